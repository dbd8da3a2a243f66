"""The Whoosh full-text index: BM25F over body, key and subject, with stored note fields.

Two indexes share one schema: ``current`` holds the version of each note in the work
tree; ``versions`` holds every committed version with the span of time it was current
(for ``at`` and history recall). Both are caches under ``.mdmem/``.
"""
from __future__ import annotations

import datetime as _dt
import re
import shutil
from pathlib import Path

from whoosh import index as windex
from whoosh import query as Q
from whoosh.analysis import STOP_WORDS, StemmingAnalyzer
from whoosh.lang.porter2 import stem as porter2_stem
from whoosh.fields import ID, NUMERIC, STORED, TEXT, Schema
from whoosh.scoring import BM25F

from ..store import StoredNote

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
FIELD_BOOSTS = {"body": 1.0, "key_text": 1.2, "subject_text": 0.4}


def _time() -> NUMERIC:
    # shift_step 16: four terms per value instead of sixteen; range queries stay fast and
    # indexing does a quarter of the work.
    return NUMERIC(stored=True, bits=64, signed=True, shift_step=16)


def make_schema() -> Schema:
    """Indexed: what the filters and BM25F need. Stored only: what a hit shows."""
    return Schema(
        doc_id=ID(stored=True, unique=True),  # path for current; path@commit for versions
        path=STORED(), root=ID(stored=True), kind=ID(stored=True), subject=ID(stored=True),
        key=STORED(), key_text=TEXT(analyzer=ANALYZER), subject_text=TEXT(analyzer=ANALYZER),
        body=TEXT(analyzer=ANALYZER, stored=True), scope=STORED(), team=STORED(), owner=STORED(),
        source=STORED(), note_id=STORED(), version=STORED(), valid_from=_time(), valid_until=_time(),
        expires_at=_time(), start=_time(), end=_time(), commit=STORED(),
    )


def ts(dt: _dt.datetime | None) -> int:
    return NEVER if dt is None else int(dt.timestamp())


def words(text: str) -> str:
    """Keys and subjects as words: deploy.window -> deploy window."""
    return re.sub(r"[._:/\-]+", " ", text or "")


def note_doc(stored: StoredNote, *, doc_id: str | None = None, start: int = 0, end: int = NEVER,
             commit: str = "") -> dict:
    n = stored.note
    return dict(doc_id=doc_id or stored.path, path=stored.path, root=stored.root, kind=n.kind, subject=n.subject,
                key=n.key or "", key_text=words(n.key or ""), subject_text=words(n.subject), body=n.text,
                scope=n.scope, team=n.team or "", owner=n.owner, source=n.source, note_id=n.id,
                version=stored.version, valid_from=ts(n.valid_from), valid_until=ts(n.valid_until),
                expires_at=ts(n.expires_at), start=start, end=end, commit=commit)


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


def text_query(text: str, searcher=None) -> Q.Query | None:
    """An OR over analysed terms in each field; the user's text is never parsed as syntax.

    With a searcher over 50+ notes, a term found in more than half the notes of a field is left out: its
    IDF is near zero, so it changes no ranking, but matching it would score every note.
    """
    terms = query_terms(text)
    if not terms:
        return None
    # Only in a corpus big enough for document frequency to say anything.
    limit = searcher.doc_count() / 2 if searcher is not None and searcher.doc_count() >= 50 else None
    parts = [Q.Term(field, t, boost=boost) for t in terms for field, boost in FIELD_BOOSTS.items()
             if limit is None or searcher.doc_frequency(field, t) <= limit]
    return Q.Or(parts) if parts else None


def weighting() -> BM25F:
    return BM25F(B=0.75, K1=1.2)
