"""The Whoosh full-text index: BM25F over body, key and subject, with stored note fields.

Two indexes share one schema: ``current`` holds the version of each note in the work
tree; ``versions`` holds every committed version with the span of time it was current
(for ``at`` and history recall). Both are caches under ``.git/mdmem/``.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
from collections.abc import Set as AbstractSet
from pathlib import Path

from whoosh import index as windex
from whoosh.analysis import STOP_WORDS, StemmingAnalyzer
from whoosh.lang.porter2 import stem as porter2_stem
from whoosh.fields import ID, KEYWORD, STORED, Schema
from whoosh.scoring import BM25F

from .. import cache as cachefiles
from ..results import ProgressCallback
from ..storage.worktree import StoredNote
from . import bm25
from .doctable import prepare_vectors
from .doctable import code
from .bulkwriter import BulkWriter
from .pickled import FastText, Int64Column  # registered: indexes name them by code

NEVER = 2**62  # sentinel "no end" for numeric time fields
# Questions are full of words that say nothing about the answer ("what does ... do?").
# "now" and "current" stay: superseding notes often say them.
QUESTION_WORDS = frozenset("""what which who whom whose where why how do does did done i im am my me
mine our ours was were been being has had having there their them they he she his her its
should would could shall might must these those about into than then so such any some
ever also just very get got go goes went like right""".split())
# Porter2 (Snowball English): Porter 1 stems "deploy" and "deployments" apart.
ANALYZER = StemmingAnalyzer(stemfn=porter2_stem, stoplist=STOP_WORDS | QUESTION_WORDS)
# Field weights for BM25F: the key often carries the only word a superseding note shares
# with its question (PAYGW_TIMEOUT_MS is in the key gateway.timeout's question, not its text).
# A note's context (what was around it when written: a turn's speaker, date and the turn
# before) is weaker evidence than its own words. Measured on LoCoMo (bench_conversations).
FIELD_BOOSTS = {"body": 1.0, "key_text": 1.2, "subject_text": 0.4, "context_text": 0.3}
# A subject word matches every note of the subject, so it is no evidence of relevance; a
# context word is (a reply is the answer to the question its context asked).
EVIDENCE_FIELDS = frozenset({"body", "key_text", "context_text"})
# Length normalisation: Whoosh's 0.75 punished the long turns of a conversation that carry the
# facts; 0.3 measured better on LoCoMo and REALTALK (bench_conversations, see MEMORY.md).
B, K1 = 0.3, 1.2


def make_schema() -> Schema:
    """Indexed: what BM25F needs. Columns: what the filters need (read whole, see doctable).
    Stored: what a hit shows."""
    return Schema(
        doc_id=ID(stored=True, unique=True),  # path for current; path@commit for versions
        path=STORED(), root=ID(stored=True), kind=ID(stored=True), subject=ID(stored=True),
        root_code=Int64Column(stored=False), kind_code=Int64Column(stored=False),
        subject_code=Int64Column(stored=False),
        key=STORED(), key_text=FastText(analyzer=ANALYZER, phrase=False),
        subject_text=FastText(analyzer=ANALYZER, phrase=False),
        context_text=FastText(analyzer=ANALYZER, phrase=False),
        body=FastText(analyzer=ANALYZER, phrase=False, stored=True), scope=STORED(), team=STORED(), owner=STORED(),
        source=STORED(), note_id=STORED(), version=STORED(), valid_from=Int64Column(),
        valid_until=Int64Column(), expires_at=Int64Column(), start=Int64Column(), end=Int64Column(),
        commit=STORED(),
        tags=KEYWORD(lowercase=True, commas=True, scorable=False),  # a filter (recall --tag), never ranked
    )


def ts(dt: _dt.datetime | None) -> int:
    return NEVER if dt is None else int(dt.timestamp())


def words(text: str) -> str:
    """Keys and subjects as words: deploy.window -> deploy window."""
    return re.sub(r"[._:/\-]+", " ", text or "")


def embedding_text(key: str | None, text: str, context: str | None = None) -> str:
    """What gets embedded: the key goes in with the text, since a superseding note often
    shares no other word with its question; so does the note's context, since a turn of a
    conversation often lacks its subject ("Yes, last Tuesday!")."""
    text = f"{words(key)}: {text}" if key else text
    return f"{context}\n{text}" if context else text


def embedding_texts(key: str | None, text: str, context: str | None = None) -> list[str]:
    """Every text embedded for a note; its vector is their mean, so its cosine is the mean of
    theirs. A note with a context is embedded alone and with it: the context gives a short
    turn its subject, but a long previous turn also drowns the turn's own words. Measured on
    LoCoMo and REALTALK (bench_conversations): the mean beats either alone on both."""
    alone = embedding_text(key, text)
    return [alone, embedding_text(key, text, context)] if context else [alone]


def note_doc(stored: StoredNote, *, doc_id: str | None = None, start: int = 0, end: int = NEVER,
             commit: str = "") -> dict:
    n = stored.note
    return dict(doc_id=doc_id or stored.path, path=stored.path, root=stored.root, kind=n.kind, subject=n.subject,
                root_code=code(stored.root), kind_code=code(n.kind), subject_code=code(n.subject),
                key=n.key or "", key_text=words(n.key or ""), subject_text=words(n.subject), body=n.text,
                context_text=n.context or "",
                scope=n.scope, team=n.team or "", owner=n.owner, source=n.source, note_id=n.id,
                version=stored.version, valid_from=ts(n.valid_from), valid_until=ts(n.valid_until),
                expires_at=ts(n.expires_at), start=start, end=end, commit=commit, tags=",".join(n.tags))


def open_or_create(folder: Path):
    if folder.exists() and windex.exists_in(str(folder)):
        return windex.open_dir(str(folder))
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return windex.create_in(str(folder), make_schema())


def query_terms(text: str) -> list[str]:
    seen, out = set(), []
    for token in ANALYZER(text):
        if token.text not in seen:
            seen.add(token.text)
            out.append(token.text)
    return out


# A word in more than this share of the notes is left out of BM25F: its IDF is low, so it
# rarely changes which notes rank first, and scoring it reads every posting (a word in all of
# 10,000 notes: ~40 ms). With an embedder, cosine fills the list, so half is enough. Without
# one, BM25F is the whole answer and a word in half the notes is sometimes the only evidence
# (a speaker's name in a two-person chat): BM25-only LoCoMo hit@1 .425 -> .442, under-filled
# at k=5 4.3% -> 0.1%, the same as pruning nothing (see MEMORY.md).
PRUNE_SHARE = 0.5
PRUNE_SHARE_BM25_ONLY = 0.9


def search(searcher, text: str, allowed, *, limit: int, bm25_only: bool = False, fill: int = 0,
           visible=None, visible_key=None) -> list:
    """The best ``limit`` of the ``allowed`` docnums for an OR of the text's analysed terms in
    each field (BM25F); the user's text is never parsed as query syntax. ``visible``: the
    documents the reader may see, whose statistics BM25F then takes (bm25.Visible).

    With 50+ notes (enough for document frequency to say anything), a term found in more
    than PRUNE_SHARE of the notes (PRUNE_SHARE_BM25_ONLY when ``bm25_only``) is left out.
    If that leaves fewer than ``fill`` notes, every term is scored: matching notes are
    never dropped for speed.
    """
    terms = query_terms(text)
    count = int(visible.sum()) if visible is not None else searcher.doc_count()

    def scored(share: float | None) -> list:
        prune_above = count * share if share is not None and count >= 50 else None
        return bm25.search(searcher, terms, FIELD_BOOSTS, allowed, limit=limit, B=B, K1=K1,
                           prune_above=prune_above, evidence_fields=EVIDENCE_FIELDS, visible=visible,
                           visible_key=visible_key)

    hits = scored(PRUNE_SHARE_BM25_ONLY if bm25_only else PRUNE_SHARE)
    if len(hits) < fill and count >= 50:
        hits = scored(None)
    return hits


def weighting() -> BM25F:
    return BM25F(B=B, K1=K1)


def tag_mask(searcher, tags: list[str], size: int):
    """Docnums carrying every one of ``tags`` (an editor's frontmatter ``tags``) as a mask."""
    import numpy as np
    from whoosh.query import And, Term

    mask = np.zeros(size, dtype=bool)
    wanted = [t.strip().lstrip("#").lower() for t in tags if t.strip()]
    if not wanted:
        return ~mask
    docs = list(searcher.docs_for_query(And([Term("tags", t) for t in wanted])))
    if docs:
        mask[np.asarray(docs, dtype=np.int64)] = True
    return mask


INDEXING = "indexing notes"  # what progress callbacks call the full-text indexing


def add_documents(writer, docs: list[dict], *, fresh: AbstractSet[str] | None = None,
                  progress: ProgressCallback | None = None) -> None:
    """``docs`` into ``writer``: added when ``fresh`` is None or holds the doc_id (never
    indexed: no delete-by-path lookup in every segment), else updated. ``progress(done,
    total, INDEXING)`` every 500 (a 10,000-note import spends seconds here)."""
    every = 500 if progress is not None and len(docs) >= 1000 else 0
    for n, doc in enumerate(docs, 1):
        if fresh is None or doc["doc_id"] in fresh:
            writer.add_document(**doc)
        else:
            writer.update_document(**doc)
        if every and (n % every == 0 or n == len(docs)):
            progress(n, len(docs), INDEXING)


def build_beside(folder: Path, docs: list[dict], *, limitmb: int, progress: ProgressCallback | None = None,
                 segments: list | None = None, segment_folder: Path | None = None) -> None:
    """A new index of ``docs`` written beside ``folder`` (see cache.fresh_folder), with
    ``segments`` (built in ``segment_folder``, see :func:`adopt_segments`) if given. The caller
    closes the old index and calls ``cache.swap_in(folder)``: a kill before the swap leaves the
    old index, never an empty one that recall would trust."""
    new_folder = cachefiles.fresh_folder(folder)
    new_ix = windex.create_in(str(new_folder), make_schema())
    writer = BulkWriter(new_ix, limitmb=limitmb)
    prepare_vectors(writer, docs)
    add_documents(writer, docs, progress=progress)
    if not segments:
        writer.commit()
    else:
        assert segment_folder is not None
        writer.commit(mergetype=adopt_segments(new_folder, segment_folder, segments))


# Small segments an index holds before a commit merges some of them (see merge_when_many), and
# the most documents one commit rewrites: a segment of half that or more is never merged.
MERGE_AFTER_SEGMENTS = 4
MERGE_BUDGET_DOCS = 600
MERGE_BELOW_DOCS = MERGE_BUDGET_DOCS // 2


def merge_when_many(writer, segments: list) -> list:
    """The merge function (``writer.commit(mergetype=...)``) of every commit to an index after
    its build: returns the segments kept as they are; the others are merged into the commit's.

    Whoosh's default (MERGE_SMALL) merges on every commit, and once one segment is big (a
    rebuild's, an import's) its Fibonacci thresholds never merge segments of tens of notes
    again: a 100k index gained one per process that wrote, without end. A word a process meets
    for the first time is looked up and decoded in every segment: with 9 segments the
    first-time recall took 6.7-11.7 ms (p95 12.6-20.1) at 100k, against 4.6-5.8 (p95 9.5-12.2)
    with the small ones merged into one.

    So small segments (fewer than MERGE_BELOW_DOCS documents) are merged once the commit would
    make MERGE_AFTER_SEGMENTS of them: the two smallest, and each next one no bigger than twice
    what is merged so far (a size tier), at most MERGE_BUDGET_DOCS documents in all. A merge
    costs ~1-2 ms a document (Whoosh's add_reader), paid by the recall whose catch-up commits,
    under the index lock: a tier without a budget rewrote up to ~6,000 documents in one commit
    (10 s). A segment with no live document is dropped, whatever its size."""
    from whoosh.reading import SegmentReader

    dead = [s for s in segments if s.doc_count() == 0]
    small = sorted((s for s in segments if s.doc_count_all() < MERGE_BELOW_DOCS and s.doc_count()),
                   key=lambda s: s.doc_count_all())
    merged: list = []
    if len(small) + 1 >= MERGE_AFTER_SEGMENTS:  # + 1: the commit's own segment
        merged, total = small[:2], sum(s.doc_count_all() for s in small[:2])
        for seg in small[2:]:
            if seg.doc_count_all() > 2 * total or total + seg.doc_count_all() > MERGE_BUDGET_DOCS:
                break
            merged.append(seg)
            total += seg.doc_count_all()
    for seg in merged:
        reader = SegmentReader(writer.storage, writer.schema, seg)
        try:
            writer.add_reader(reader)
        finally:
            reader.close()
    gone = {id(s) for s in merged + dead}
    return [s for s in segments if id(s) not in gone]


def adopt_segments(folder: Path, segment_folder: Path, segments: list, mergetype=None):
    """A Whoosh merge function (``writer.commit(mergetype=...)``) that keeps what
    ``mergetype`` (default: no merge) keeps and adds ``segments``, finished segments of an
    index with this schema built in ``segment_folder`` (search/index_worker.py). Their files
    are moved into ``folder`` (the writer's) when the commit runs: under the writer's lock,
    just before the table of contents naming them is written (Whoosh's commit removes
    segment files no table of contents names)."""
    def merge(writer, current):
        kept = list(mergetype(writer, current) if mergetype is not None else current)
        prefixes = tuple(s.segment_id() + "." for s in segments)
        for name in os.listdir(segment_folder):
            if name.startswith(prefixes):
                os.replace(segment_folder / name, folder / name)
        return kept + list(segments)
    return merge
