"""Whoosh posting lists as numpy arrays: decoded from a segment, or read from the file of a
big segment's long lists kept beside it.

A term's posting list is read from Whoosh's whoosh3 blocks (zlib, unpickling and a Python step
per block of 128 postings, ~40 us a block). bm25.py keeps what it decoded for the life of a
reader, but a word a process meets for the first time pays in full: at 100,000 notes a question
with a few common words decoded ~500 blocks (20-60 ms) where the same recall took 4 ms warm; the
p95 of recall was those first meetings (session 9). A fresh process (the CLI) meets every word
for the first time.

So a segment of LONG_SEGMENT_DOCS documents or more gets a file beside it, ``<segment>.longpost``,
with every posting list of LONG_POSTINGS postings or more (at least two blocks) in the given
fields, decoded once when the segment appears (a rebuild, an import, a merge) or when a process
first opens an index without it (an index made before session 9: ~0.2 s at 10k notes, ~2-3 s at
100k, once). A lookup is a binary search over the file's sorted keys (no table built when the
file is opened: the file is memory-mapped) and two array slices.

What the file holds is exactly what decoding gives (ids as Whoosh numbers them, term
frequencies as its float32 weights), deleted documents included: the reader's deletions are
applied when it is read, as for decoded lists. The file is named like the segment's own files, so
Whoosh deletes it with its segment; erasure deletes the whole index folder. A file that is
missing, short, of another segment or otherwise unreadable is not used (the lists are decoded
as before) and is written again by the next process that opens the index.

File layout (little-endian): a 64-byte header (MAGIC, then the number of keys, the key bytes'
length, the number of postings, the segment's document count, the segment id in 24 bytes),
key offsets (uint64, keys + 1), the keys ("field\\0term" as bytes, sorted; padded to 8),
posting offsets (uint64, keys + 1), document numbers (uint32, padded to 8), weights (float32).
"""
from __future__ import annotations

import mmap
import os
import shutil
import stat
import struct
import time
from pathlib import Path

import numpy as np
from whoosh.matching.wrappers import FilterMatcher

try:  # the fast path reads whoosh3 posting blocks directly
    from whoosh.codec.whoosh3 import W3LeafMatcher
except ImportError:  # pragma: no cover - another Whoosh: the public path below
    W3LeafMatcher = None

MAGIC = b"MDMPOST1"
SUFFIX = ".longpost"
_HEADER = struct.Struct("<8sQQQQ24s")  # 64 bytes
LONG_SEGMENT_DOCS = 2_000
LONG_POSTINGS = 129  # more than one block of 128
_STALE_TEMPORARY_SECONDS = 600.0


# --- decoding from the segment ------------------------------------------------------------
def decode(matcher) -> tuple[np.ndarray, np.ndarray, set | None]:
    """A term's postings from its matcher: (document numbers, term frequencies, the reader's
    deleted documents or None). The lists include deleted documents; see :func:`without`."""
    deleted = None
    if isinstance(matcher, FilterMatcher) and getattr(matcher, "_exclude", False):
        deleted, matcher = matcher._ids, matcher.child
    if W3LeafMatcher is not None and type(matcher) is W3LeafMatcher and not matcher._byteids:
        ids, tf = _w3_blocks(matcher)
    else:
        ids, tf = _walk(matcher)
    return ids, tf, deleted


def without(ids: np.ndarray, tf: np.ndarray, deleted) -> tuple[np.ndarray, np.ndarray]:
    """The postings of documents not in ``deleted`` (a reader's deleted document numbers)."""
    if not deleted:
        return ids, tf
    keep = ~np.isin(ids, np.fromiter(deleted, dtype=np.int64, count=len(deleted)))
    return ids[keep], tf[keep]


def _w3_blocks(m) -> tuple[np.ndarray, np.ndarray]:
    """A whoosh3 posting list, block by block: ids are delta-coded tuples, weights arrays."""
    id_parts, tf_parts = [], []
    while m.is_active():
        m._read_data()
        id_parts.append(np.cumsum(np.asarray(m._data[0], dtype=np.int64)))
        m._read_weights()
        tf_parts.append(np.asarray(m._weights, dtype=np.float64))
        m._next_block()
    if not id_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return np.concatenate(id_parts), np.concatenate(tf_parts)


def _walk(m) -> tuple[np.ndarray, np.ndarray]:
    """Any matcher, one posting at a time (the public API)."""
    ids, tf = [], []
    while m.is_active():
        ids.append(m.id())
        tf.append(m.weight())
        m.next()
    return np.asarray(ids, dtype=np.int64), np.asarray(tf, dtype=np.float64)


# --- the file of long lists ----------------------------------------------------------------
class LongPostings:
    """A segment's long posting lists, memory-mapped from its file."""

    def __init__(self, path: Path, doc_count_all: int, segment_id: str):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a link is not our file
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("not a regular file")
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            self._parse(doc_count_all, segment_id)
        except Exception:
            self._map.close()
            raise

    def _parse(self, doc_count_all: int, segment_id: str) -> None:
        buf = self._map
        if len(buf) < _HEADER.size:
            raise ValueError("shorter than its header")
        magic, n_keys, key_bytes, n_post, docs, segid = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC or docs != doc_count_all or segid.rstrip(b"\0") != segment_id.encode():
            raise ValueError("not this segment's file")
        offset = _HEADER.size
        self._key_at = np.frombuffer(buf, dtype="<u8", count=n_keys + 1, offset=offset)
        offset += 8 * (n_keys + 1)
        self._keys_from = offset
        offset += _pad8(key_bytes)
        self._post_at = np.frombuffer(buf, dtype="<u8", count=n_keys + 1, offset=offset)
        offset += 8 * (n_keys + 1)
        self._ids = np.frombuffer(buf, dtype="<u4", count=n_post, offset=offset)
        offset += _pad8(4 * n_post)
        self._tf = np.frombuffer(buf, dtype="<f4", count=n_post, offset=offset)
        offset += 4 * n_post
        if offset != len(buf):
            raise ValueError("its size does not match its header")
        for at, end in ((self._key_at, key_bytes), (self._post_at, n_post)):
            if at[0] != 0 or at[-1] != end or (len(at) > 1 and bool((np.diff(at.astype(np.int64)) < 0).any())):
                raise ValueError("its offsets are not in order")
        self.n_keys, self.docs = n_keys, docs

    def _key(self, i: int) -> bytes:
        return self._map[self._keys_from + int(self._key_at[i]):self._keys_from + int(self._key_at[i + 1])]

    def get(self, field: str, btext: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """(document numbers, term frequencies) of a long list, None for any other term."""
        want = field.encode() + b"\0" + btext
        lo, hi = 0, self.n_keys
        while lo < hi:  # the first key >= want
            mid = (lo + hi) // 2
            if self._key(mid) < want:
                lo = mid + 1
            else:
                hi = mid
        if lo == self.n_keys or self._key(lo) != want:
            return None
        start, end = int(self._post_at[lo]), int(self._post_at[lo + 1])
        ids = self._ids[start:end].astype(np.int64)
        if len(ids) and int(ids.max()) >= self.docs:
            raise ValueError("a document number beyond its segment")
        return ids, self._tf[start:end].astype(np.float64)

    def close(self) -> None:
        self._key_at = self._post_at = self._ids = self._tf = None  # the map's views first
        try:
            self._map.close()
        except BufferError:  # a view still held somewhere: the map goes with it
            pass


def _remove(path: Path) -> None:
    """Whatever is at ``path`` (a damaged file, a folder, a link), if it can be removed."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def path_for(folder: Path, segment_id: str) -> Path:
    return folder / f"{segment_id}{SUFFIX}"


def write(folder: Path, reader, fields) -> Path:
    """Decode ``reader``'s (one segment's) long lists in ``fields`` into its file (written
    whole beside it, then renamed into place)."""
    entries: list[tuple[bytes, np.ndarray, np.ndarray]] = []
    for field in fields:
        if field not in reader.schema:
            continue
        for btext, info in reader.iter_field(field):
            if info.doc_frequency() < LONG_POSTINGS:
                continue
            ids, tf, _ = decode(reader.postings(field, btext))
            entries.append((field.encode() + b"\0" + btext, ids, tf))
    entries.sort(key=lambda e: e[0])
    keys = b"".join(k for k, _, _ in entries)
    key_at = np.zeros(len(entries) + 1, dtype="<u8")
    key_at[1:] = np.cumsum([len(k) for k, _, _ in entries])
    post_at = np.zeros(len(entries) + 1, dtype="<u8")
    post_at[1:] = np.cumsum([len(ids) for _, ids, _ in entries])
    n_post = int(post_at[-1])
    ids = np.concatenate([i for _, i, _ in entries]).astype("<u4") if entries else np.zeros(0, "<u4")
    tf = np.concatenate([t for _, _, t in entries]).astype("<f4") if entries else np.zeros(0, "<f4")
    segment_id = reader.segment().segment_id()
    header = _HEADER.pack(MAGIC, len(entries), len(keys), n_post, reader.doc_count_all(), segment_id.encode())
    path = path_for(folder, segment_id)
    # A name Whoosh's clean-up leaves alone (it skips names starting with a dot).
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(key_at.tobytes())
        f.write(keys.ljust(_pad8(len(keys)), b"\0"))
        f.write(post_at.tobytes())
        f.write(ids.tobytes().ljust(_pad8(4 * n_post), b"\0"))
        f.write(tf.tobytes())
    os.replace(tmp, path)
    return path


class Attacher:
    """Gives each big segment reader of a searcher its LongPostings (bm25.py reads them),
    writing a missing file first. Opened files are kept while unchanged on disk; a file that
    cannot be read or written is not tried again by this process."""

    def __init__(self, folder: Path, fields):
        self.folder = folder
        self.fields = tuple(fields)
        self._open: dict[str, tuple[tuple, LongPostings]] = {}
        self._failed: set[str] = set()

    def attach(self, searcher) -> None:
        current = set()
        for leaf, _ in searcher.leaf_searchers():
            reader = leaf.reader()
            if reader.doc_count_all() < LONG_SEGMENT_DOCS:
                continue
            current.add(reader.segment().segment_id())
            if "_mdmem_long" not in reader.__dict__:
                reader.__dict__["_mdmem_long"] = self._for(reader)
        for gone in set(self._open) - current:  # merged away or rebuilt
            self._open.pop(gone)[1].close()

    def _for(self, reader) -> LongPostings | None:
        segment_id = reader.segment().segment_id()
        if segment_id in self._failed:
            return None
        path = path_for(self.folder, segment_id)
        try:
            try:
                st = path.stat()
            except FileNotFoundError:
                self._remove_stale_temporaries()
                write(self.folder, reader, self.fields)
                st = path.stat()
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            kept = self._open.get(segment_id)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            found = LongPostings(path, reader.doc_count_all(), segment_id)
        except Exception:  # noqa: BLE001 -- OSError, ValueError, struct.error, a Whoosh error
            # Unreadable or unwritable: decoded as before (only slower). A damaged file is
            # written again by the next process that finds it missing.
            self._failed.add(segment_id)
            _remove(path)
            return None
        self._open[segment_id] = (stamp, found)
        return found

    def _remove_stale_temporaries(self) -> None:
        """A writer killed mid-file leaves its temporary: gone after a while."""
        now = time.time()
        try:
            for p in self.folder.glob(f".*{SUFFIX}.*.tmp"):
                if now - p.stat().st_mtime > _STALE_TEMPORARY_SECONDS:
                    p.unlink(missing_ok=True)
        except OSError:
            pass

    def close(self) -> None:
        # The arrays handed out are copies (astype): closing the maps is safe.
        for _, found in self._open.values():
            found.close()
        self._open.clear()
