"""The per-document columns of a Whoosh index as numpy arrays: the filter (who may see a
document, when it is live), decided for every document at once before anything is ranked,
and the notes' vectors, so cosine ranks over the same docnums and the same mask as BM25F.

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

from ..errors import EmbedderError
from . import matvec

# Per-document columns, all int64.
CODE_COLUMNS = ("root_code", "kind_code", "subject_code")
TIME_COLUMNS = ("valid_from", "valid_until", "expires_at", "start", "end")


class Int64Column(COLUMN):
    """An int64 column (stored too unless told otherwise), not indexed."""

    def __init__(self, *, stored: bool = True):
        super().__init__(columns.NumericColumn("q", default=0))
        self.stored = stored


def code(text: str) -> int:
    """A string as a signed 64-bit code (the first 8 bytes of its BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


VECTOR_FIELD = "vec"


def vector_field(dim: int) -> COLUMN:
    """Each note's embedding as a fixed-width column of float32 (not stored, not indexed)."""
    return COLUMN(columns.FixedBytesColumn(dim * 4))


def vector_bytes(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def prepare_vectors(writer, docs: list[dict]) -> None:
    """Before ``docs`` are written: the vector column exists (its width is known once
    something is embedded; an empty repo's index has none yet) and values become bytes."""
    dims = {len(d[VECTOR_FIELD]) for d in docs if VECTOR_FIELD in d}
    if not dims:
        return
    if VECTOR_FIELD not in writer.schema:
        writer.add_field(VECTOR_FIELD, vector_field(max(dims)))
    width = writer.schema[VECTOR_FIELD].column_type._fixedlen // 4
    if dims != {width}:
        raise EmbedderError(f"embedder: returned {sorted(dims)}-dimensional vectors but the index holds {width}; "
                            "the model changed under the same name: run `mdmem index --rebuild`")
    for d in docs:
        if VECTOR_FIELD in d:
            d[VECTOR_FIELD] = vector_bytes(d[VECTOR_FIELD])


class _Segment:
    """One segment's columns. Segments never change once written, so a new searcher reuses
    the arrays of the segments it shares with the last one (after a write, only the new
    small segment is read)."""

    def __init__(self, reader):
        count = reader.doc_count_all()
        self.cols = {name: _column(reader, name, count) for name in CODE_COLUMNS + TIME_COLUMNS}
        self.vectors = _vector_column(reader, count)
        _release_pages(reader)


def _release_pages(reader) -> None:
    """Tell the kernel this process is done with the segment's mapped pages for now.

    Whoosh maps a segment file whole; the pages read to copy its columns out (the vectors:
    15 MB at 10,000 notes, 150 MB at 100,000) stayed in this process's resident memory
    beside the copies. The map is read-only and file-backed, so MADV_DONTNEED only drops
    them from this process: a later read faults them back in from the page cache. A
    one-call `mdmem recall` with MiniLM at 10k peaked at 267-270 MB before. Whoosh
    internals: anything else (no map, another codec) is left as it is."""
    import mmap

    storage = getattr(reader, "_storage", None)
    # A segment reader's storage is an OverlayStorage: the segment's compound file (a), the
    # index folder (b).
    for part in (storage, getattr(storage, "a", None), getattr(storage, "b", None)):
        source = getattr(part, "_source", None)
        if isinstance(source, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            try:
                source.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass  # advice only


class DocTable:
    """One searcher's columns; made again whenever the searcher is (the index changed)."""

    @classmethod
    def of(cls, searcher, current: DocTable | None, *, hidden=()) -> DocTable:
        """``current`` if it was read from this searcher, else a table for this one.
        ``hidden``: docnums to treat as deleted (older versions of notes held elsewhere)."""
        if current is not None and current.searcher is searcher:
            return current
        return cls(searcher, reuse=current._segments if current is not None else None, hidden=hidden)

    def __init__(self, searcher, reuse: dict[str, _Segment] | None = None, hidden=()):
        self.searcher = searcher
        self.size = searcher.doc_count_all()
        self._segments: dict[str, _Segment] = {}
        parts, alive = [], []
        for leaf, _offset in searcher.leaf_searchers():
            reader = leaf.reader()
            segment = reader.segment()  # None for an empty index's reader
            segid = segment.segment_id() if segment is not None else None
            seg = (reuse or {}).get(segid) or _Segment(reader)
            if segid is not None:
                self._segments[segid] = seg
            parts.append(seg)
            live = np.ones(reader.doc_count_all(), dtype=bool)
            deleted = reader.deleted_docs_set if reader.has_deletions() else ()
            if deleted:
                live[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
            alive.append(live)
        self.cols = {c: np.concatenate([p.cols[c] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
                     for c in CODE_COLUMNS + TIME_COLUMNS}
        self.alive = np.concatenate(alive) if alive else np.zeros(0, dtype=bool)
        if len(hidden):
            self.alive[np.asarray(hidden, dtype=np.int64)] = False
        # Vectors stay per segment: joining them would copy every vector after each write
        # (150 MB at 100,000 notes). (offset, matrix or None for a segment without any.)
        self._vectors: list[tuple[int, np.ndarray | None]] = []
        offset = 0
        for seg, live in zip(parts, alive):
            self._vectors.append((offset, seg.vectors))
            offset += len(live)
        self._offsets = np.array([o for o, _ in self._vectors], dtype=np.int64)
        dims = {m.shape[1] for _, m in self._vectors if m is not None}
        self.dim = dims.pop() if len(dims) == 1 else None
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

    # --- vectors ----------------------------------------------------------------------
    def has_vectors(self, query: np.ndarray | None) -> bool:
        return query is not None and self.dim is not None and self.dim == query.shape[0]

    def _cosines(self, query: np.ndarray, docnums: np.ndarray) -> np.ndarray:
        """Cosines of sorted ``docnums`` (0 for a document without a vector)."""
        out = np.zeros(len(docnums), dtype=np.float32)
        # Sorted docnums: each segment's are one slice (np.unique over 10,000 segment numbers
        # cost ~0.25 ms a recall).
        bounds = [*np.searchsorted(docnums, self._offsets).tolist(), len(docnums)]
        for p, (offset, matrix) in enumerate(self._vectors):
            lo, hi = bounds[p], bounds[p + 1]
            if matrix is None or lo == hi:
                continue
            if hi - lo == len(matrix):  # the whole segment
                out[lo:hi] = matvec.product(matrix, query)
                continue
            local = docnums[lo:hi] - offset
            # Half the segment or more: one pass over it beats gathering the rows first.
            out[lo:hi] = matvec.product(matrix, query)[local] if (hi - lo) * 2 >= len(matrix) \
                else matvec.product(matrix[local], query)
        return out

    def nearest(self, query: np.ndarray, mask: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` allowed documents most similar to ``query``: (docnum, cosine), best
        first. Only documents in ``mask`` are compared: filtered before ranking."""
        if not self.has_vectors(query):
            return []
        idx = np.flatnonzero(mask)
        if not len(idx):
            return []
        sims = self._cosines(query, idx)
        top = np.argpartition(-sims, limit)[:limit] if len(sims) > limit else np.arange(len(sims))
        top = top[np.lexsort((idx[top], -sims[top]))]
        return [(int(idx[i]), float(sims[i])) for i in top]

    def cosines(self, query: np.ndarray, docnums) -> dict[int, float]:
        docnums = sorted(docnums)
        if not docnums or not self.has_vectors(query):
            return {}
        return dict(zip(docnums, self._cosines(query, np.array(docnums, dtype=np.int64)).tolist()))



def admits(fields: dict, roots, kinds=None, subject: str | None = None) -> bool:
    """The stored strings agree with the filter (guards against a code collision)."""
    return (fields["root"] in roots and (not kinds or fields["kind"] in kinds)
            and (not subject or fields["subject"] == subject))


def _vector_column(reader, count: int) -> np.ndarray | None:
    """The segment's embeddings as a (documents x dim) float32 matrix; None without any."""
    if VECTOR_FIELD not in reader.schema or not reader.has_column(VECTOR_FIELD):
        return None
    width = reader.schema[VECTOR_FIELD].column_type._fixedlen // 4
    kept = getattr(reader, "column_array", None)  # a reader in memory keeps its arrays (search/recent.py)
    if kept is not None:
        return kept(VECTOR_FIELD, "<f4", width)
    return read_column(reader.column_reader(VECTOR_FIELD, translate=False), count, "<f4", width)


def _column(reader, name: str, count: int) -> np.ndarray:
    """A whole int64 column of one segment (zeros where the segment has none)."""
    if not reader.has_column(name):
        return np.zeros(count, dtype=np.int64)
    kept = getattr(reader, "column_array", None)
    if kept is not None:
        return kept(name, np.int64)
    return read_column(reader.column_reader(name, translate=False), count, ">i8").astype(np.int64)


def read_column(col, count: int, dtype: str, width: int = 1) -> np.ndarray:
    """A whole fixed-width column of one segment, ``count`` rows of ``width`` values: its
    bytes at once where Whoosh lays it out as a fixed-width array (whoosh3), else value by
    value through the public reader. Whoosh leaves trailing default values unwritten; those
    rows get the column's default."""
    shape = (count, width) if width > 1 else (count,)
    try:
        n = min(col._count, count)
        raw, default = col._dbfile.get(col._basepos, n * np.dtype(dtype).itemsize * width), col._default
    except AttributeError:
        rows = [np.frombuffer(v, dtype=dtype) if isinstance(v, bytes) else v for v in (col[d] for d in range(count))]
        return np.asarray(rows, dtype=dtype).reshape(shape)
    values = np.frombuffer(bytes(raw), dtype=dtype).reshape((n, width) if width > 1 else (n,))
    if n == count:
        # Read-only, over the bytes just read: no second copy (the vectors of 100,000 notes
        # are 150 MB; copying them again raised a fresh process's peak by as much).
        return values
    out = np.zeros(shape, dtype=dtype)
    out[:n] = values
    if isinstance(default, int) and default:
        out[n:] = default
    return out
