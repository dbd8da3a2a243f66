"""Recall: candidates filtered by identity and liveness first (one mask over the index's
docnums, from the visibility rule), then BM25F and cosine over that same mask, linear
fusion, a score floor, and each kind's read rule (DESIGN 7). Stored fields are read only
for the hits returned.
"""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from ..policy.access import require_user
from ..model.clock import format_time, parse_time, resolve_now
from ..model.kinds import READ_NEWEST, READ_RANK_EVENTS
from ..errors import BadInput, NotFound
from . import fulltext
from .doctable import admits, code
from .note_index import NoteIndex
from .versions import VersionsIndex, utc
from .when import asks_when, named_spans, tells_when

BM25_WEIGHT = 0.3
# With an embedder, linear fusion also adds this times the note's word coverage (the share of
# the question's findable words it contains, from BM25F). BM25F's sum saturates per word and is
# scaled to the best note, so a note with every word of the question can rank below one that
# repeats a rare word; coverage counts the words themselves. Chosen on LoCoMo's dev half
# (0.3-0.5 alike), confirmed on REALTALK: hit@1/5 LoCoMo .45/.74 -> .47/.76, REALTALK .37/.66
# -> .40/.67 (bench_conversations, MEMORY.md). Without an embedder it cost REALTALK hit@1, so
# BM25-only fusion is unchanged.
COVERAGE_WEIGHT = 0.4
RRF_K = 60
CANDIDATES = 50  # for history and `at`, where versions compete


def candidates(k: int) -> int:
    """How many each ranker proposes: enough for fusion to reorder, few enough to look up."""
    return max(20, 4 * k)


# Without kinds, the pool that does not fit the question's tense is weighted down: an
# episode must match clearly better to beat a note about what is true now, and the other
# way round for questions about what happened. Measured on lifecycle_60days and
# contracts_14days (see benchmarks/).
EPISODE_WEIGHT = 0.5
# Below this cosine a note is unrelated, unless its words cover the question well.
COSINE_FLOOR = 0.25
COVERAGE_FLOOR = 0.5
BM25_ONLY_COVERAGE_FLOOR = 0.25
# Added to the fused score of a note whose valid_from lies in a span of time the question
# names ("on 7 July, 2023", "in May 2023"). Measured on LoCoMo (bench_conversations).
TIME_BOOST = 0.1
# A note that only asks ("What's your best camping memory?") records what was asked, not
# what is known: it shares the most words with a question about the same thing and answers
# nothing. Measured on LoCoMo: hit@1 .39 -> .44 at 0.8 (0.9: .43, 0.7: .44 with hit@5 lower).
QUESTION_WEIGHT = 0.8
# For a question that asks when ("When did Mel paint the sunrise?"), a note among the 2k read
# that places something in time ("yesterday", "last week") is this much higher. Chosen on
# LoCoMo (hit@1 rises up to 0.15), confirmed on REALTALK and on five REALTALK chats never used
# for choosing: hit@1 +.005 / +.013 / +.017, hit@5 alike or higher (MEMORY.md). Without an
# embedder fused scores are BM25F's share (at most BM25_WEIGHT, not ~1), so the boost is scaled
# by it: the full 0.1 there cost REALTALK hit@5 (.653 -> .642), 0.03 raised both sets.
WHEN_BOOST = 0.1


# A question about what happened: past tense and event words. Without kinds, such a
# question may be answered by episodes; any other by notes about what is true now.
_EVENT_INTENT = re.compile(r"\b(did|didn't|happened|happen|went|caused|ever|last time|ago|yesterday|"
                           r"incident|outage|complain(ed)?|fail(ed)?|broke)\b", re.IGNORECASE)


# A question about the asker's own current state ("what am I editing right now?") is read
# from working memory first, whose contract is recency rather than word overlap.
_WORKING_INTENT = re.compile(r"\b(am i|i am|i'm|my current|my task|this task)\b", re.IGNORECASE)


def asks(text: str) -> bool:
    """The note is a question: its text ends with a question mark."""
    return text.rstrip().endswith("?")


def working_intent(query: str) -> bool:
    return bool(_WORKING_INTENT.search(query))


def event_intent(query: str) -> bool:
    return bool(_EVENT_INTENT.search(query))


@dataclass(frozen=True)
class Hit:
    path: str
    kind: str
    subject: str
    key: str | None
    scope: str
    team: str | None
    owner: str
    source: str
    text: str
    score: float
    version: str
    valid_from: _dt.datetime | None
    valid_until: _dt.datetime | None = None
    expires_at: _dt.datetime | None = None
    current: bool = True
    commit: str | None = None
    bm25: float | None = None
    cosine: float | None = None
    untrusted: str | None = None  # set by MemoryRepo.recall from verify: no permitted writer committed it
    note_id: str | None = None  # the note's id (frontmatter `id`), the same across its versions

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        for name in ("valid_from", "valid_until", "expires_at"):
            d[name] = format_time(d[name])
        return d


def _hit(fields: dict, score: float, *, current: bool, bm25, cosine) -> Hit:
    return Hit(path=fields["path"], kind=fields["kind"], subject=fields["subject"], key=fields["key"] or None,
               scope=fields["scope"], team=fields["team"] or None, owner=fields["owner"], source=fields["source"],
               text=fields["body"], score=round(score, 6), version=fields["version"],
               valid_from=utc(fields["valid_from"]), valid_until=utc(fields["valid_until"]),
               expires_at=utc(fields["expires_at"]), current=current, commit=fields.get("commit") or None,
               bm25=None if bm25 is None else round(bm25, 4), cosine=None if cosine is None else round(cosine, 4),
               note_id=fields.get("note_id") or None)


@dataclass(frozen=True)
class _Asked:
    """A recall's arguments, checked."""
    query: str
    user: str
    k: int
    when: _dt.datetime
    contracts: list
    subject: str | None
    key: str | None
    at: _dt.datetime | None
    include_history: bool
    tags: list[str] | None


class Recall:
    def __init__(self, repo, index: NoteIndex):
        self.repo = repo
        self.index = index
        self._versions: VersionsIndex | None = None
        self._by_code: dict | None = None  # kind code (as the index stores it) -> contract

    def __call__(self, query: str, *, as_user: str, k: int = 5, kinds=None, subject: str | None = None,
                 key: str | None = None, at=None, include_history: bool = False, now=None,
                 tags: list[str] | None = None) -> list[Hit]:
        asked = self._check(query, as_user=as_user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                            include_history=include_history, now=now, tags=tags)
        # The question is embedded on another thread from here (search/embed_ahead.py) while
        # this call waits its turn for the index, catches it up and runs the BM25F half:
        # recalls queued behind a slow one find their vectors made when their turn comes,
        # instead of each embedding its question in turn with the index held.
        query_vector = None if key else self.index.embed_query_soon(query)
        if query_vector is not None:
            self.index.settle_vectors()  # this process's writes' vectors, waited for without the index
        with self.index.held():  # a warming pass gives way (search/warm.py)
            return self._recall(asked, query_vector)

    def _check(self, query: str, *, as_user: str, k: int, kinds, subject: str | None, key: str | None, at,
               include_history: bool, now, tags: list[str] | None) -> _Asked:
        """The arguments checked (bad input is refused before any question is embedded)."""
        user = require_user(as_user)
        if not isinstance(query, str) or not query.strip():
            raise BadInput("query: recall needs a question or some words")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            # (A TypeError from comparing read as a damaged index, which was moved aside.)
            raise BadInput(f"k: how many hits, a whole number of at least 1, not {k!r}")
        when = resolve_now(now)
        contracts = [self.repo.contracts.resolve(x) for x in (kinds or [])]
        if tags is not None and (isinstance(tags, str) or not all(isinstance(t, str) for t in tags)):
            raise BadInput("tags: a list of tags (like [\"billing\"])")
        if key:
            # A key is part of a note's path: with the subject and a keyed kind it names one note.
            if not (subject and contracts) or not all(c.keyed for c in contracts):
                raise BadInput("key: an exact key lookup needs --subject and keyed --kind(s) "
                               f"({', '.join(n for n, c in self.repo.contracts.kinds.items() if c.keyed)})")
            if at is not None or include_history or tags:
                raise BadInput("key: an exact key lookup is of the current note; for past versions use "
                               "`mdmem history --subject S --kind K --key KEY [--at TIME]`")
        at_time = parse_time(at, field="at") if at is not None else None
        return _Asked(query, user, k, when, contracts, subject, key, at_time, include_history, tags)

    def _recall(self, asked: _Asked, query_vector: Future | None) -> list[Hit]:
        query, user, k, when, subject, tags = asked.query, asked.user, asked.k, asked.when, asked.subject, asked.tags
        contracts = asked.contracts
        kind_names = sorted({c.name for c in contracts}) or None
        roots = self.repo.access.readable_roots(user)  # the one visibility rule
        # BM25F's statistics are kept under the very roots they are counted over (a shared
        # setting read later could name another reader's); the warm keeps these.
        seen_by = tuple(sorted(roots))
        self.index.reader_roots = seen_by
        if query_vector is None:
            assert asked.key is not None and subject is not None and kind_names is not None
            return self._exact(user, kind_names, subject, asked.key, when)
        self.index.sync()
        if asked.at is not None or asked.include_history:
            return self._search_versions(query, query_vector, roots, kind_names, subject, k, when, at=asked.at,
                                         tags=tags)
        searcher, table = self.index.searcher(), self.index.table()
        allowed = table.allowed(roots, kinds=kind_names, subject=subject, live_at=fulltext.ts(when))
        if tags:
            allowed &= fulltext.tag_mask(searcher, tags, len(allowed))
        load = _Loader(searcher, roots, kind_names, subject)
        if contracts and all(c.read_rule == READ_NEWEST for c in contracts):
            # Working memory: every live note of the kind, newest first; recency is the rule.
            newest = sorted(np.flatnonzero(allowed).tolist(), key=lambda d: (-table.cols["valid_from"][d], d))
            return [_hit(f, 0.0, current=True, bm25=None, cosine=None) for _, f in load.first(newest, k)]
        exempt: set[int] = set()
        if kind_names is None and working_intent(query):
            # The working contract is recency: its live notes skip the word-overlap floor.
            exempt = set(np.flatnonzero(allowed & table.of_kind("working")).tolist())
        ranked, scores, cos, have_vectors = self._rank(searcher, table, query, query_vector, allowed, candidates(k),
                                                       exempt=exempt, favour=_in_spans(table, query), fill=k,
                                                       meanwhile=lambda docnums: load.read(docnums[:2 * k]),
                                                       visible=table.visible(roots),
                                                       visible_key=seen_by)
        weighted = self._weigh(ranked, table, explicit=kind_names is not None, events=event_intent(query),
                               working=bool(exempt))
        weights = dict(weighted)
        # Twice k are read so that questions demoted below the k-th can give way (~30 us each).
        loaded = load.first([d for d, _ in weighted], 2 * k)
        when_boost = (WHEN_BOOST if have_vectors else WHEN_BOOST * BM25_WEIGHT) if asks_when(query) else 0.0
        for d, f in loaded:
            if asks(f["body"]):
                weights[d] = round(weights[d] * QUESTION_WEIGHT, 6)
            if when_boost and tells_when(f["body"]):
                weights[d] = round(weights[d] + when_boost, 6)
        loaded = sorted(loaded, key=lambda df: (-weights[df[0]], df[0]))[:k]
        return [_hit(f, weights[d], current=True, bm25=scores.get(d), cosine=cos.get(d)) for d, f in loaded]

    # --- parts ----------------------------------------------------------------------
    def _exact(self, user, kind_names, subject, key, when) -> list[Hit]:
        hits = []
        for kind in kind_names:
            try:
                stored = self.repo.get(as_user=user, subject=subject, kind=kind, key=key, now=when)
            except NotFound:
                continue
            hits.append(_hit(fulltext.note_doc(stored), 1.0, current=True, bm25=None, cosine=None))
        return hits

    def _rank(self, searcher, table, query: str, query_vector: Future, allowed: np.ndarray, limit: int,
              exempt: set[int] = frozenset(), favour: np.ndarray | None = None, fill: int = 0,
              meanwhile: Callable[[list[int]], None] | None = None, visible: np.ndarray | None = None,
              visible_key: Hashable = None,
              ) -> tuple[list[tuple[int, float]], dict[int, float], dict[int, float], bool]:
        """BM25F and cosine over the same allowed docnums, fused: (ranked docnums with fused
        scores, BM25F scores, cosines, whether vectors were compared). ``query_vector`` is
        the question's vector being embedded on another thread: asked for after the BM25F
        half. If it is not there yet, ``meanwhile`` is given BM25F's docnums, best first, to
        use the wait (the hits' stored fields are read then: ~0.5 ms of a 10k MiniLM recall,
        which waited ~4 ms for the vector). ``exempt`` docnums skip the floor and get a
        cosine. ``favour`` (the notes in a span of time the question names) proposes its own
        best candidates too, and they rank TIME_BOOST higher. ``visible`` (named by
        ``visible_key``): every document the reader may see, whose statistics BM25F takes."""
        # Without vectors, a common word is still evidence, and the list is filled to k
        # whenever notes match (see fulltext.search).
        expected = table.dim is not None and self.index.embedder is not None
        seen_by = {"visible": visible, "visible_key": visible_key}
        bm25 = fulltext.search(searcher, query, allowed, limit=limit, bm25_only=not expected,
                               fill=0 if expected else fill, **seen_by)
        if meanwhile is not None and not query_vector.done():
            meanwhile([h.docnum for h in bm25])
        qv = query_vector.result()
        have_vectors = table.has_vectors(qv)
        if have_vectors != expected:  # a vector of another width than the index holds
            bm25 = fulltext.search(searcher, query, allowed, limit=limit, bm25_only=not have_vectors,
                                   fill=0 if have_vectors else fill, **seen_by)
        vec = table.nearest(qv, allowed, limit) if have_vectors else []
        inside = allowed & favour if favour is not None else None
        if inside is not None and inside.any():
            seen = {h.docnum for h in bm25}
            bm25 += [h for h in fulltext.search(searcher, query, inside, limit=limit, bm25_only=not have_vectors,
                                                **seen_by) if h.docnum not in seen]
            if have_vectors:
                seen = {d for d, _ in vec}
                vec += [(d, c) for d, c in table.nearest(qv, inside, limit) if d not in seen]
        cos = dict(vec)
        if have_vectors:
            cos.update(table.cosines(qv, [d for d in {h.docnum for h in bm25} | set(exempt) if d not in cos]))
        ranked = self._fuse([(h.docnum, h.score, h.coverage) for h in bm25], [d for d, _ in vec], cos,
                            have_vectors, exempt=exempt)
        if inside is not None and inside.any():
            ranked = sorted(((d, s + TIME_BOOST if inside[d] else s) for d, s in ranked),
                            key=lambda kv: (-kv[1], kv[0]))
        return ranked, {h.docnum: h.score for h in bm25}, cos, have_vectors

    def _fuse(self, bm25: list[tuple[Hashable, float, float]], vec: list[Hashable], cos: dict[Hashable, float],
              have_vectors: bool, exempt: set = frozenset()) -> list[tuple[Hashable, float]]:
        """Fused scores above the floor, best first. Candidates are keyed by docnum (current
        notes) or doc id (versions); ``bm25`` holds (key, score, coverage).

        ``linear`` (the default): cosine plus BM25F scaled to the best BM25F score, so how far
        apart two notes are counts, not only their order, plus (with vectors) the share of the
        question's words the note has (COVERAGE_WEIGHT). ``rrf``: reciprocal rank fusion.
        Both are measured by the benchmarks ([recall] fusion = "rrf", or MDMEM_FUSION=rrf in the CLI).
        """
        floor = self.repo.config.score_floor
        floor = COSINE_FLOOR if floor is None else float(floor)
        scores: dict[str, float] = {}
        top_bm25 = max((b for _, b, _ in bm25), default=0.0) or 1.0
        if self.repo.config.fusion == "rrf":
            for rank, (key, _, _) in enumerate(bm25):
                scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
            for rank, key in enumerate(vec):
                scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
        else:
            for key in set(vec) | {p for p, _, _ in bm25} | set(exempt):
                scores[key] = cos.get(key, 0.0) if have_vectors else 0.0
            for key, b, c in bm25:
                scores[key] += BM25_WEIGHT * b / top_bm25 + (COVERAGE_WEIGHT * c if have_vectors else 0.0)
        # The floor: never present an unrelated note as the best evidence. A negative
        # [recall] score_floor in mdmem.toml turns it off (benchmarks measure both).
        coverage = {p: c for p, _, c in bm25}
        if floor < 0:
            return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        if have_vectors:
            def related(key) -> bool:
                return cos.get(key, 0.0) >= floor or coverage.get(key, 0.0) >= COVERAGE_FLOOR
        else:
            def related(key) -> bool:
                return coverage.get(key, 0.0) >= BM25_ONLY_COVERAGE_FLOOR
        kept = {key: s for key, s in scores.items() if related(key) or key in exempt}
        if not have_vectors and any(key not in exempt for key in kept):
            # The floor decides whether the question has evidence at all; once one note
            # clears it, every other note matching a word of the question ranks below it
            # rather than being dropped (dropping them left 45% of long-conversation
            # questions with fewer than k notes, see benchmarks/bench_conversations.py).
            kept.update({key: s for key, s in scores.items() if coverage.get(key, 0.0) > 0})
        return sorted(kept.items(), key=lambda kv: (-kv[1], kv[0]))

    def _weigh(self, ranked: list[tuple[int, float]], table, *, explicit: bool, events: bool,
               working: bool) -> list[tuple[int, float]]:
        """Each kind's read rule on the fused scores, best first. Without kinds, the pool that
        does not fit the question's tense is weighted down (and, for a question about the
        asker's current state, everything but working memory)."""
        if self._by_code is None:
            self._by_code = {code(name): c for name, c in self.repo.contracts.kinds.items()}
        by_code, out = self._by_code, []
        for docnum, score in ranked:
            contract = by_code.get(int(table.cols["kind_code"][docnum]))
            if contract is None:  # a kind mdmem.toml no longer names
                contract = self.repo.contracts.resolve(table.searcher.stored_fields(docnum)["kind"])
            # An episode with an expiry ("freeze until Friday") is a condition that holds until
            # then, so it answers "now" questions like a fact does.
            is_event = contract.read_rule == READ_RANK_EVENTS and table.cols["expires_at"][docnum] >= fulltext.NEVER
            if not explicit and is_event != events:
                score *= EPISODE_WEIGHT
            if not explicit and working and contract.read_rule != READ_NEWEST:
                score *= EPISODE_WEIGHT
            out.append((docnum, round(score, 6)))
        return sorted(out, key=lambda x: (-x[1], x[0]))

    def _search_versions(self, query, query_vector, roots, kind_names, subject, k, when, *, at,
                         tags=None) -> list[Hit]:
        """The versions index, read like the current one: filter, BM25F and cosine over the
        same docnums, fusion. History recall puts a note's past versions before its current one."""
        if self._versions is None:
            self._versions = VersionsIndex(self.index)
        self._versions.ensure()
        s, table = self._versions.searcher(), self._versions.table()
        allowed = self._versions.allowed_docs(roots, at=fulltext.ts(at) if at else None,
                                              until=fulltext.ts(when), kinds=kind_names, subject=subject)
        if tags:
            allowed = allowed & fulltext.tag_mask(s, tags, len(allowed))
        ranked, scores, cos, _ = self._rank(s, table, query, query_vector, allowed, CANDIDATES, fill=k,
                                            visible=table.visible(roots), visible_key=tuple(sorted(roots)))
        fused = dict(ranked)
        now_ts = fulltext.ts(when)
        out = []
        for d, f in _Loader(s, roots, kind_names, subject).first([d for d, _ in ranked], len(ranked)):
            is_current = f["end"] >= fulltext.NEVER and f["valid_until"] > now_ts and f["expires_at"] > now_ts
            out.append(_hit(f, fused[d], current=is_current if at is None else True, bm25=scores.get(d),
                            cosine=cos.get(d)))
        if at is None:
            out = _past_before_current(out)
        return out[:k]


class _Loader:
    """Stored fields for the hits actually returned, read only then (each read costs ~30-80
    microseconds) or while the recall waits anyway (:meth:`read`), and checked against the
    filter's strings."""

    def __init__(self, searcher, roots, kinds, subject):
        self.searcher, self.roots, self.kinds, self.subject = searcher, roots, kinds, subject
        self._read: dict[int, dict] = {}

    def read(self, docnums: list[int]) -> None:
        for d in docnums:
            self._fields(d)

    def _fields(self, docnum: int) -> dict:
        if docnum not in self._read:
            self._read[docnum] = self.searcher.stored_fields(docnum)
        return self._read[docnum]

    def first(self, docnums: list[int], k: int) -> list[tuple[int, dict]]:
        out = []
        for d in docnums:
            fields = self._fields(d)
            if admits(fields, self.roots, self.kinds, self.subject):
                out.append((d, fields))
                if len(out) == k:
                    break
        return out


def _in_spans(table, query: str) -> np.ndarray | None:
    """A mask of the notes whose valid_from lies in a span of time the question names."""
    spans = named_spans(query)
    if not spans:
        return None
    start = table.cols["valid_from"]
    mask = np.zeros(len(start), dtype=bool)
    for span in spans:
        mask |= (start >= span.start) & (start < span.end)
    return mask


def _past_before_current(hits: list[Hit]) -> list[Hit]:
    """History recall answers "what was it before?": within one note, its past versions
    come before its current one; notes keep the order of their best version."""
    order: dict[str, int] = {}
    for i, h in enumerate(hits):
        order.setdefault(h.path, i)
    return sorted(hits, key=lambda h: (order[h.path], h.current, -(h.valid_from.timestamp() if h.valid_from else 0)))
