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
from dataclasses import dataclass

import numpy as np
from whoosh.util.numeric import byte_to_length

from . import postings
from .doctable import read_column

try:  # the length column is read from whoosh3 segments directly
    from whoosh.codec.whoosh3 import LENGTHS_COLUMN, _lenfield
except ImportError:  # pragma: no cover - another Whoosh: the public path below
    LENGTHS_COLUMN = _lenfield = None

_BYTE_TO_LENGTH = np.array([byte_to_length(b) for b in range(256)], dtype=np.float64)

# Decoded posting lists kept per segment reader, at most this many postings (24 bytes each:
# ~24 MB) per reader, least recently used dropped first. A segment never changes once
# written and a reader is dropped with its searcher, so a kept list cannot go stale.
# Decoding (zlib, unpickling, a Python loop per block of 128) was ~40% of a recall's CPU at
# 10,000 notes of ~60 words; an agent's questions keep meeting the same words (its
# subjects, names, services). 0 turns the cache off (benchmarks measure both).
POSTINGS_CACHE_MAX = 1_000_000


@dataclass(frozen=True)
class Scored:
    docnum: int
    score: float
    coverage: float  # share of the question's findable words this document matches


def search(searcher, terms: list[str], boosts: dict[str, float], allowed: np.ndarray, *, limit: int,
           B: float = 0.75, K1: float = 1.2, prune_above: float | None = None,
           evidence_fields: frozenset[str] | None = None) -> list[Scored]:
    """The ``limit`` best allowed documents for an OR of ``terms`` over the boosted fields.

    ``allowed`` is the filter, a mask over docnums (what the caller may see); only those
    are ranked.
    ``prune_above``: a (field, term) found in more documents than this is left out — its
    IDF is near zero. Coverage counts only terms some document has in some field (a word
    no note contains cannot be matched by any of them) and only matches in
    ``evidence_fields`` (a subject word matches every note of the subject).
    """
    if not terms or not allowed.any():
        return []
    evidence = frozenset(boosts) if evidence_fields is None else evidence_fields
    total = searcher.doc_count_all()
    scores = np.zeros(total, dtype=np.float64)
    matched = np.zeros(total, dtype=bool)
    covered = np.zeros(total, dtype=np.int32)  # how many findable terms each document has
    findable = 0
    for t in terms:
        frequencies = {f: _doc_frequency(searcher, f, t) for f in boosts}
        if not any(frequencies.values()):
            continue
        findable += 1
        has_term = np.zeros(total, dtype=bool)
        for field, boost in boosts.items():
            df = frequencies[field]
            if not df or (prune_above is not None and df > prune_above):
                continue
            idf = _idf(searcher, field, t)
            avgfl = searcher.avg_field_length(field) or 1
            for ids, tf, fl in _term_postings(searcher, field, t):
                scores[ids] += boost * idf * (tf * (K1 + 1)) / (tf + K1 * ((1 - B) + B * fl / avgfl))
                matched[ids] = True
                if field in evidence:
                    has_term[ids] = True
        covered += has_term
    candidates = np.flatnonzero(matched & allowed)
    if not len(candidates):
        return []
    # Best score first; equal scores by docnum, as Whoosh orders them.
    order = np.lexsort((candidates, -scores[candidates]))[:limit]
    top = candidates[order].tolist()
    return [Scored(d, float(scores[d]), int(covered[d]) / max(1, findable)) for d in top]


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
            yield ids + offset, tf, fl


def _segment_postings(reader, field: str, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One segment's (local docnums, term frequencies, field lengths) for a term, None where
    it has none; kept per reader (see POSTINGS_CACHE_MAX). The live count is part of the
    key, in case a reader's deletions ever change under it."""
    cache = reader.__dict__.setdefault("_mdmem_postings", _Postings())
    key = (field, text, reader.doc_count())
    if key in cache.lists and POSTINGS_CACHE_MAX:
        cache.lists.move_to_end(key)
        return cache.lists[key]
    btext = reader.schema[field].to_bytes(text)
    found = None
    long = reader.__dict__.get("_mdmem_long")  # a big segment's file of long lists (postings.py)
    listed = _long_postings(long, reader, field, text, btext) if long is not None else None
    if listed is not None:
        ids, tf = postings.without(*listed, reader.deleted_docs_set)
    elif (field, btext) in reader:
        ids, tf = postings.without(*postings.decode(reader.postings(field, btext)))
    else:
        ids = None
    if ids is not None and len(ids):
        found = (ids, tf, _field_lengths(reader, field, ids))
    cache.keep(key, found)
    return found


def _long_postings(long, reader, field: str, text: str, btext: bytes):
    """A long list from the segment's file; None if it is not there (then decoded). A file
    found damaged here is not read again, and removed (the next process writes it anew): a list
    must also be as long as the segment says the term's is (a shorter one with a good checksum
    was used, attack 9b G1)."""
    try:
        listed = long.get(field, btext)
        if listed is not None and len(listed[0]) != reader.doc_frequency(field, text):
            raise ValueError("a list of another length than its term's")
        return listed
    except (ValueError, OSError):
        long.discard()
        reader.__dict__["_mdmem_long"] = None
        return None


class _Postings:
    """A reader's decoded posting lists, least recently used first."""

    def __init__(self):
        self.lists: OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = OrderedDict()
        self.size = 0

    def keep(self, key: tuple, found) -> None:
        n = len(found[0]) if found is not None else 0
        if n > POSTINGS_CACHE_MAX:
            return
        self.lists[key] = found
        self.size += n
        while self.size > POSTINGS_CACHE_MAX:
            _, dropped = self.lists.popitem(last=False)
            self.size -= len(dropped[0]) if dropped is not None else 0


def _field_lengths(reader, field: str, ids: np.ndarray) -> np.ndarray:
    """Each document's length in the field, quantised to a byte as Whoosh stores it."""
    column = _length_bytes(reader, field)
    if column is not None:
        lengths = _BYTE_TO_LENGTH[column[ids]]
    else:
        lengths = np.asarray([reader.doc_field_length(int(d), field) or 0 for d in ids], dtype=np.float64)
    # Whoosh's scorer asks with default 1 but its reader answers None for a zero byte.
    lengths[lengths == 0] = 1
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
        if col is not None and col._fixedlen == 1:
            column = read_column(col, reader.doc_count_all(), "u1")
    except (AttributeError, NameError):
        column = None
    cache[field] = column
    return column
