"""The filter columns of a Whoosh index as numpy arrays: who may see a document and when it
is live, decided for every document at once before anything is ranked.

Whoosh keeps these values as per-document columns (not as indexed terms): a range query
over indexed numbers cost ~2 ms at 10,000 notes on every recall, reading a column whole
costs microseconds. Roots, kinds and subjects are columns of 64-bit hashes; a hash can in
principle collide, so recall checks the stored strings of what it returns (``admits``).
"""
from __future__ import annotations

import hashlib

import numpy as np
from whoosh import columns
from whoosh.fields import COLUMN

# Per-document columns, all int64.
CODE_COLUMNS = ("root_code", "kind_code", "subject_code")
TIME_COLUMNS = ("valid_from", "valid_until", "expires_at", "start", "end")


class Int64Column(COLUMN):
    """A stored int64 that is also a column, not indexed."""

    stored = True

    def __init__(self, *, stored: bool = True):
        super().__init__(columns.NumericColumn("q", default=0))
        self.stored = stored


def code(text: str) -> int:
    """A string as a signed 64-bit code (the first 8 bytes of its BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


class DocTable:
    """One searcher's columns; made again whenever the searcher is (the index changed)."""

    @classmethod
    def of(cls, searcher, current: DocTable | None) -> DocTable:
        """``current`` if it was read from this searcher, else a fresh table."""
        return current if current is not None and current.searcher is searcher else cls(searcher)

    def __init__(self, searcher):
        self.searcher = searcher
        self.size = searcher.doc_count_all()
        parts: dict[str, list[np.ndarray]] = {c: [] for c in CODE_COLUMNS + TIME_COLUMNS}
        live = []
        for leaf, _offset in searcher.leaf_searchers():
            reader = leaf.reader()
            count = reader.doc_count_all()
            for name in parts:
                parts[name].append(_column(reader, name, count))
            alive = np.ones(count, dtype=bool)
            if reader.has_deletions():
                alive[:] = False
                alive[np.fromiter(reader.all_doc_ids(), dtype=np.int64)] = True
            live.append(alive)
        self.cols = {c: np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for c, p in parts.items()}
        self.alive = np.concatenate(live) if live else np.zeros(0, dtype=bool)
        self._roots: dict[tuple[str, ...], np.ndarray] = {}

    def _is_in(self, column: str, values) -> np.ndarray:
        return np.isin(self.cols[column], np.array([code(v) for v in values], dtype=np.int64))

    def visible(self, roots: list[str]) -> np.ndarray:
        """Documents in the readable roots (the caller got them from the visibility rule);
        kept per set of roots for the life of the table."""
        key = tuple(sorted(roots))
        if key not in self._roots:
            self._roots[key] = self._is_in("root_code", key) & self.alive if key else np.zeros(self.size, bool)
        return self._roots[key]

    def allowed(self, roots: list[str], *, kinds=None, subject: str | None = None, live_at: int | None = None,
                current_at: int | None = None, started_by: int | None = None) -> np.ndarray:
        """A mask over docnums. ``live_at``: valid and unexpired then. ``current_at``: the
        version that was the note's current one then (versions index). ``started_by``:
        versions written by then."""
        mask = self.visible(roots).copy()
        if kinds:
            mask &= self._is_in("kind_code", kinds)
        if subject:
            mask &= self.cols["subject_code"] == code(subject)
        c = self.cols
        if live_at is not None:
            mask &= (c["valid_from"] <= live_at) & (c["valid_until"] > live_at) & (c["expires_at"] > live_at)
        if current_at is not None:
            mask &= (c["start"] <= current_at) & (c["end"] > current_at)
        if started_by is not None:
            mask &= c["start"] <= started_by
        return mask

    def of_kind(self, kind: str) -> np.ndarray:
        return self.cols["kind_code"] == code(kind)


def admits(fields: dict, roots, kinds=None, subject: str | None = None) -> bool:
    """The stored strings agree with the filter (guards against a code collision)."""
    return (fields["root"] in roots and (not kinds or fields["kind"] in kinds)
            and (not subject or fields["subject"] == subject))


def _column(reader, name: str, count: int) -> np.ndarray:
    """A whole int64 column of one segment: its bytes directly when Whoosh lays it out as a
    fixed-width array (whoosh3), else through the public column reader."""
    out = np.zeros(count, dtype=np.int64)
    if not reader.has_column(name):
        return out
    col = reader.column_reader(name, translate=False)
    try:
        n = min(col._count, count)
        raw = col._dbfile.get(col._basepos, n * 8)
        out[:n] = np.frombuffer(bytes(raw), dtype=">i8")
        if col._default:
            out[n:] = col._default
    except AttributeError:
        out[:] = np.fromiter(col, dtype=np.int64, count=count)
    return out
