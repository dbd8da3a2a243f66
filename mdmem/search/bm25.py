"""BM25F over Whoosh's postings, a whole posting list at a time.

Whoosh's own search scores each matching document through a tree of Python matchers,
about 10 microseconds a document, and a filter turns off its block-max skipping. A
question whose words are in a tenth of 10,000 notes then costs 8-9 ms. Here the same
BM25F (Whoosh's formula, IDF and quantised field lengths, so scores are equal to its
own) is computed with numpy over each term's posting arrays: the Whoosh index stays the
index, only the scoring loop changes.

The posting blocks and the field-length column are read through Whoosh's segment
internals (whoosh3 codec). Anything else — another codec, a future Whoosh — takes the
slow path through the public matcher API, which gives the same numbers.
"""
from __future__ import annotations

from collections import OrderedDict
from math import log
from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh.util.numeric import byte_to_length

from . import postings
from .doctable import read_column

try:  # the length column is read from whoosh3 segments directly
    from whoosh.codec.whoosh3 import LENGTHS_COLUMN, _lenfield
except ImportError:  # pragma: no cover - another Whoosh: the public path below
    LENGTHS_COLUMN = _lenfield = None

_BYTE_TO_LENGTH = np.array([byte_to_length(b) for b in range(256)], dtype=np.float64)
# The length BM25F takes for a length byte: Whoosh's scorer asks with default 1, but its reader
# answers None for a zero byte.
_SCORED_LENGTH = np.where(_BYTE_TO_LENGTH == 0, 1.0, _BYTE_TO_LENGTH)

# Decoded posting lists kept per segment reader, at most this many postings per reader, least
# recently used dropped first. A list is kept as it is stored: docnums as int32, term
# frequencies as Whoosh's float32, field lengths as the length column's bytes (9 bytes a
# posting, ~9 MB; widened to float64 only while weights are computed, so every weight is the
# one full-width arrays gave). A segment never changes once written and a reader is dropped
# with its searcher, so a kept list cannot go stale. Decoding (zlib, unpickling, a Python loop
# per block of 128) was ~40% of a recall's CPU at 10,000 notes of ~60 words; an agent's
# questions keep meeting the same words (its subjects, names, services). 0 turns the cache off
# (benchmarks measure both). A searcher keeps as many postings' BM25F weights (8 bytes each, the
# docnums shared), in the same way (_term_weights). A process that warms its caches
# (warm_postings, Visible.weights) gives each cache room for what it warmed, up to WARM_POSTINGS_MAX.
POSTINGS_CACHE_MAX = 1_000_000
WARM_POSTINGS_MAX = 4_000_000


@dataclass(frozen=True)
class Scored:
    docnum: int
    score: float
    coverage: float  # share of the question's findable words this document matches


def search(searcher, terms: list[str], boosts: dict[str, float], allowed: np.ndarray, *, limit: int,
           B: float = 0.75, K1: float = 1.2, prune_above: float | None = None,
           evidence_fields: frozenset[str] | None = None, visible: np.ndarray | None = None,
           visible_key: Any = None) -> list[Scored]:
    """The ``limit`` best allowed documents for an OR of ``terms`` over the boosted fields.

    ``allowed`` is the filter, a mask over docnums (what the caller may see); only those
    are ranked. ``visible``: the documents the reader may see at all (a mask); BM25F's
    statistics (document count, each word's document frequency, average field lengths) are then
    theirs alone (:class:`Visible`), so no score depends on a note the reader may not see.
    Without it they are the whole index's, as Whoosh's own.
    ``prune_above``: a (field, term) found in more documents than this is left out — its
    IDF is near zero. Coverage counts only terms some document has in some field (a word
    no note contains cannot be matched by any of them) and only matches in
    ``evidence_fields`` (a subject word matches every note of the subject).
    """
    if not terms or not allowed.any():
        return []
    stats = Visible(searcher, visible, visible_key) if visible is not None else None
    evidence = frozenset(boosts) if evidence_fields is None else evidence_fields
    total = searcher.doc_count_all()
    scores = np.zeros(total, dtype=np.float64)
    # Per findable term, its evidence lists (sorted docnums, one per segment and field): the
    # coverage of the few documents returned is counted from them at the end. Marking every
    # matching document in arrays the size of the index, per term, was a third of a recall's
    # CPU at 100,000 notes (a word in 42% of them: ~42,000 postings a list).
    findable: list[list[np.ndarray]] = []
    for t in terms:
        frequencies = {f: stats.doc_frequency(f, t) if stats else _doc_frequency(searcher, f, t) for f in boosts}
        if not any(frequencies.values()):
            continue
        lists: list[np.ndarray] = []
        findable.append(lists)
        for field, boost in boosts.items():
            df = frequencies[field]
            if not df or (prune_above is not None and df > prune_above):
                continue
            for ids, weight in (stats.weights(field, t, boost, B, K1) if stats
                                else _term_weights(searcher, field, t, boost, B, K1)):
                scores[ids] += weight  # ids are distinct within a list
                if field in evidence:
                    lists.append(ids)
    # Every weight is positive (Whoosh's idf is at least ~1), so a score above 0 is a match.
    candidates = np.flatnonzero((scores > 0) & allowed)
    if not len(candidates):
        return []
    # Best score first; equal scores by docnum, as Whoosh orders them. Only the documents
    # scoring at least the limit-th best are sorted (a common word matches tens of thousands).
    ranked = scores[candidates]
    if 0 < limit < len(candidates):
        kth = np.partition(ranked, len(ranked) - limit)[len(ranked) - limit]
        keep = ranked >= kth
        candidates, ranked = candidates[keep], ranked[keep]
    top = candidates[np.lexsort((candidates, -ranked))[:limit]]
    covered = np.zeros(len(top), dtype=np.int32)  # how many findable terms each document has
    for lists in findable:
        has_term = np.zeros(len(top), dtype=bool)
        for ids in lists:
            at = np.minimum(np.searchsorted(ids, top), len(ids) - 1)
            has_term |= ids[at] == top
        covered += has_term
    return [Scored(int(d), float(scores[d]), int(c) / max(1, len(findable)))
            for d, c in zip(top.tolist(), covered.tolist())]


def _term_weights(searcher, field: str, text: str, boost: float, B: float, K1: float):
    """(global docnums, each one's BM25F weight for the term in the field) per segment holding
    it, by the whole index's statistics (Whoosh's own); kept per searcher (the field's average
    length and the idf are the searcher's), so a word met again by a later question costs one
    addition per posting."""
    return _kept_weights(searcher, (field, text, boost, B, K1), lambda: _weighed(
        searcher, field, text, boost * _idf(searcher, field, text), searcher.avg_field_length(field) or 1, B, K1))


def _kept_weights(searcher, key: tuple, compute, *, keep: bool = True, warm: bool = False) -> list:
    """The searcher's kept weights under ``key``, else ``compute()``'s, kept (``keep``); ``warm``:
    a warming pass asks (search/warm.py), and the cache makes room for it."""
    cache = searcher.__dict__.setdefault("_mdmem_weights", _Kept())
    if keep and key in cache.lists and POSTINGS_CACHE_MAX:
        cache.lists.move_to_end(key)
        return cache.lists[key]
    found = compute()
    if keep:
        n = sum(len(ids) for ids, _ in found)
        if warm:
            cache.room_for_warmed(n)
        cache.keep(key, found, n)
    return found


def _weighed(searcher, field: str, text: str, scale: float, avgfl: float, B: float, K1: float) -> list:
    """Each segment's (docnums, BM25F weights) for the term (``scale``: boost times idf)."""
    return [(ids, _bm25f_weights(tf, lengths, scale, avgfl, B, K1))
            for ids, tf, lengths in _term_postings(searcher, field, text)]


def _bm25f_weights(tf: np.ndarray, lengths: np.ndarray, scale: float, avgfl: float, B: float, K1: float) -> np.ndarray:
    """Each posting's BM25F weight, in float64 whatever the kept arrays' widths (``scale``: the
    field's boost times the term's idf; ``lengths``: length bytes or lengths)."""
    tf = tf.astype(np.float64)
    fl = _SCORED_LENGTH[lengths] if lengths.dtype == np.uint8 else lengths
    return scale * (tf * (K1 + 1)) / (tf + K1 * ((1 - B) + B * fl / avgfl))


class Visible:
    """BM25F's statistics over the documents one reader may see: the number of them,
    each word's number among them, and each field's average length among them. Over the whole
    index (Whoosh's own) bob's score for his own team note changed with whether alice's private
    notes held the word he asked about: an oracle for text he may not read. Lengths are the
    length column's quantised bytes (Whoosh's average uses exact totals, of every document).
    ``key`` names the set of documents (the readable roots) for the searcher's caches; None:
    nothing kept."""

    def __init__(self, searcher, visible: np.ndarray, key: Any = None):
        self.searcher, self.visible, self.key = searcher, visible, key
        self.count = int(visible.sum())
        self._kept: dict = _searcher_cache(searcher) if key is not None else {}

    def doc_frequency(self, field: str, text: str) -> int:
        k = ("visible df", self.key, field, text)
        if k not in self._kept:
            lists = _term_postings(self.searcher, field, text)
            self._kept[k] = sum(int(self.visible[ids].sum()) for ids, _, _ in lists)
        return self._kept[k]

    def avg_field_length(self, field: str) -> float:
        k = ("visible avgfl", self.key, field)
        if k not in self._kept:
            total = float(_all_lengths(self.searcher, field)[self.visible].sum())
            self._kept[k] = (total / self.count if self.count else 0.0) or 1.0
        return self._kept[k]

    def idf(self, field: str, text: str) -> float:
        return log(max(self.count, 1) / (self.doc_frequency(field, text) + 1)) + 1

    def weights(self, field: str, text: str, boost: float, B: float, K1: float, *, warm: bool = False) -> list:
        """Each segment's (docnums, BM25F weights) for the term; kept per searcher and ``key``.
        ``warm``: a warming pass asks (search/warm.py), and the cache makes room for it."""
        return _kept_weights(self.searcher, (field, text, boost, B, K1, self.key), lambda: _weighed(
            self.searcher, field, text, boost * self.idf(field, text), self.avg_field_length(field), B, K1),
            keep=self.key is not None, warm=warm)


def _all_lengths(searcher, field: str) -> np.ndarray:
    """Every document's length in the field (quantised as stored), by global docnum; kept per
    searcher."""
    kept = searcher.__dict__.setdefault("_mdmem_all_lengths", {})
    if field not in kept:
        out = np.zeros(searcher.doc_count_all(), dtype=np.float64)
        for leaf, offset in searcher.leaf_searchers():
            reader = leaf.reader()
            n = reader.doc_count_all()
            column = _length_bytes(reader, field)
            if column is not None:
                out[offset:offset + n] = _BYTE_TO_LENGTH[column[:n]]
            else:
                out[offset:offset + n] = [reader.doc_field_length(d, field) or 0 for d in range(n)]
        kept[field] = out
    return kept[field]


# --- warming: a long-lived process's background thread (search/warm.py) ----------------------
def long_lists(searcher, boosts: dict[str, float], limit: int, prune_share: float) -> list[tuple[Any, str, str]]:
    """The lists worth warming in ``searcher``: its big segments' long lists (postings.py) in the
    ``boosts`` fields, longest first (a first meeting costs ~100 ns a posting: the long ones are
    a first-time question's tail), at most ``limit`` postings in all, leaving out those search
    always prunes (in more than ``prune_share`` of the documents). (reader, field, term) each."""
    count = searcher.doc_count()
    found = []
    for leaf, _ in searcher.leaf_searchers():
        reader = leaf.reader()
        long = reader.__dict__.get("_mdmem_long")
        if long is None:
            continue
        for field, btext, n in long.lists():
            if field in boosts and n <= prune_share * count:
                found.append((n, reader, field, reader.schema[field].from_bytes(btext)))
    found.sort(key=lambda x: -x[0])
    picked, total = [], 0
    for n, reader, field, text in found:
        if total + n > limit:
            break
        picked.append((reader, field, text))
        total += n
    return picked


def warm_postings(reader, field: str, text: str) -> int:
    """One long list into ``reader``'s kept postings, as a question would keep it (call under the
    index's mutex). Returns the postings kept: 0 if kept already, if the caches are off, or if
    the file fails a check (the recall's own read then finds it so and removes it)."""
    cache = reader.__dict__.setdefault("_mdmem_postings", _Kept())
    key = (field, text, reader.doc_count())
    long = reader.__dict__.get("_mdmem_long")
    column = _length_bytes(reader, field)
    if key in cache.lists or long is None or column is None or not POSTINGS_CACHE_MAX:
        return 0
    try:
        listed = long.get(field, reader.schema[field].to_bytes(text))
    except (ValueError, OSError):  # damaged, or closed meanwhile
        return 0
    if listed is None or len(listed[0]) != segment_doc_frequency(reader, field, text):
        return 0
    ids, tf = postings.without(*listed, reader.deleted_docs_set)
    if not len(ids):
        return 0
    cache.room_for_warmed(len(ids))
    cache.keep(key, _kept_form(ids, tf, column[ids]), len(ids))
    return len(ids)


# Terms whose per-segment counts a reader keeps (a question's words, over a process's life).
SEGMENT_DF_CACHE_MAX = 20_000


def segment_doc_frequency(reader, fieldname: str, text: str) -> int:
    """``reader.doc_frequency(fieldname, text)``, kept on the reader (a reader is never changed
    in place: new segments or deletions make new readers). Each count is a lookup in Whoosh's
    term tables (~10-40 us, more the first time its pages are read)."""
    cache = reader.__dict__.setdefault("_mdmem_df", {})
    key = (fieldname, text)
    found = cache.get(key)
    if found is None:
        if len(cache) >= SEGMENT_DF_CACHE_MAX:
            cache.clear()
        found = cache[key] = reader.doc_frequency(fieldname, text)
    return found


def count_by_segment(searcher) -> None:
    """Make a Whoosh searcher over an index's segments count a term's documents as the sum of
    its segments' kept counts (:func:`segment_doc_frequency`), as Searcher itself takes its
    reader's ``doc_frequency``. Its own asks every segment's term table each time: BM25F's
    count, then idf's count again; at 100,000 notes a question met for the first time spent
    ~3 ms of its ~15 in such lookups, most of the recall's p95."""
    readers = [reader for reader, _ in searcher.ixreader.leaf_readers()]

    def doc_frequency(fieldname, text) -> int:
        return sum(segment_doc_frequency(r, fieldname, text) for r in readers)

    searcher.doc_frequency = doc_frequency


def _searcher_cache(searcher) -> dict:
    """Per searcher: (what, field, term) -> a number read from the term tables. A searcher
    is made again whenever the index changes."""
    return searcher.__dict__.setdefault("_mdmem_terms", {})


def _term_stat(searcher, what: str, field: str, text: str):
    """``searcher.<what>(field, text)`` (doc_frequency or idf), read once per searcher."""
    cache = _searcher_cache(searcher)
    key = (what, field, text)
    if key not in cache:
        cache[key] = getattr(searcher, what)(field, text)
    return cache[key]


def _doc_frequency(searcher, field: str, text: str) -> int:
    return int(_term_stat(searcher, "doc_frequency", field, text))


def _idf(searcher, field: str, text: str) -> float:
    return float(_term_stat(searcher, "idf", field, text))


def _term_postings(searcher, field: str, text: str):
    """(global docnums, term frequencies, field lengths) per segment holding the term."""
    for leaf, offset in searcher.leaf_searchers():
        found = _segment_postings(leaf.reader(), field, text)
        if found is not None:
            ids, tf, fl = found
            yield (ids + offset if offset else ids), tf, fl  # the kept array itself: not changed


def _segment_postings(reader, field: str, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One segment's (local docnums, term frequencies, field lengths) for a term, None where
    it has none; kept per reader (see POSTINGS_CACHE_MAX). The live count is part of the
    key, in case a reader's deletions ever change under it."""
    cache = reader.__dict__.setdefault("_mdmem_postings", _Kept())
    key = (field, text, reader.doc_count())
    if key in cache.lists and POSTINGS_CACHE_MAX:
        cache.lists.move_to_end(key)
        return cache.lists[key]
    btext = reader.schema[field].to_bytes(text)
    found = None
    long = reader.__dict__.get("_mdmem_long")  # a big segment's file of long lists (postings.py)
    # The segment's count says whether it has the term at all (a term in its table has a
    # posting, deleted or not), and how long a kept list must be: no more term-table lookups.
    count = segment_doc_frequency(reader, field, text)
    listed = _long_postings(long, reader, count, field, btext) if long is not None and count else None
    if listed is not None:
        ids, tf = postings.without(*listed, reader.deleted_docs_set)
    elif count:
        ids, tf = postings.without(*postings.decode(reader.postings(field, btext)))
    else:
        ids = None
    if ids is not None and len(ids):
        found = _kept_form(ids, tf, _lengths(reader, field, ids))
    cache.keep(key, found, len(found[0]) if found is not None else 0)
    return found


def _kept_form(ids: np.ndarray, tf: np.ndarray, lengths: np.ndarray):
    """A segment's list as the caches keep it (see POSTINGS_CACHE_MAX)."""
    return ids.astype(np.int32, copy=False), tf.astype(np.float32, copy=False), lengths


def _long_postings(long, reader, count: int, field: str, btext: bytes):
    """A long list from the segment's file; None if it is not there (then decoded). A file
    found damaged here is not read again, and removed (the next process writes it anew): a list
    must also be as long as the segment says the term's is (``count``; a shorter one with a
    good checksum was used)."""
    try:
        listed = long.get(field, btext)
        if listed is not None and len(listed[0]) != count:
            raise ValueError("a list of another length than its term's")
        return listed
    except (ValueError, OSError):
        long.discard()
        reader.__dict__["_mdmem_long"] = None
        return None


class _Kept:
    """Lists of postings (a segment's decoded ones, a searcher's weights) by key, at most
    ``cap`` postings in all (POSTINGS_CACHE_MAX, and what was warmed), the least recently used
    dropped first."""

    def __init__(self):
        self.lists: OrderedDict[tuple, Any] = OrderedDict()
        self.sizes: dict[tuple, int] = {}
        self.size = 0
        self.cap = POSTINGS_CACHE_MAX

    def keep(self, key: tuple, found, n: int) -> None:
        if n > self.cap or not POSTINGS_CACHE_MAX:
            return
        if key in self.lists:
            self.size -= self.sizes[key]
        self.lists[key], self.sizes[key] = found, n
        self.size += n
        while self.size > self.cap:
            dropped, _ = self.lists.popitem(last=False)
            self.size -= self.sizes.pop(dropped)

    def room_for_warmed(self, n: int) -> None:
        """``n`` more postings warmed into this cache: room made for them (a warm that pushed
        out the lists questions use would cost more than it saves)."""
        self.cap = min(self.cap + n, POSTINGS_CACHE_MAX + WARM_POSTINGS_MAX)


def _lengths(reader, field: str, ids: np.ndarray) -> np.ndarray:
    """Each document's length in the field: the length column's bytes (quantised as Whoosh
    stores them; _bm25f_weights reads them through _SCORED_LENGTH), or off that path the lengths."""
    column = _length_bytes(reader, field)
    if column is not None:
        return column[ids]
    lengths = np.asarray([reader.doc_field_length(int(d), field) or 0 for d in ids], dtype=np.float64)
    lengths[lengths == 0] = 1  # as _SCORED_LENGTH
    return lengths


def _length_bytes(reader, field: str) -> np.ndarray | None:
    """A whoosh3 segment's length column (one byte a document), or None off that path."""
    cache = reader.__dict__.setdefault("_mdmem_lengths", {})
    if field in cache:
        return cache[field]
    column = None
    try:
        if _lenfield is None:
            raise AttributeError
        col = reader._perdoc._cached_reader(_lenfield(field), LENGTHS_COLUMN)
        if col is None:
            # No document of the segment has the field: Whoosh answers length 0 for each, after
            # a stat of the missing column file per document (the slow path below took ~0.2 s a
            # segment of 2,000 notes, again for every new searcher, i.e. after every write).
            column = np.zeros(reader.doc_count_all(), dtype=np.uint8)
        elif col._fixedlen == 1:
            column = read_column(col, reader.doc_count_all(), "u1")
    except (AttributeError, NameError):
        column = None
    cache[field] = column
    return column
