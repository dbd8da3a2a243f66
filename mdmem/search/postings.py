"""Whoosh posting lists as numpy arrays: decoded from a segment, or read from the file of a
big segment's long lists kept beside it.

A term's posting list is read from Whoosh's whoosh3 blocks (zlib, unpickling and a Python step
per block of 128 postings, ~40 us a block). bm25.py keeps what it decoded for the life of a
reader, but a word a process meets for the first time pays in full: at 100,000 notes a question
with a few common words decoded ~500 blocks (20-60 ms) where the same recall took 4 ms warm; the
p95 of recall was those first meetings. A fresh process (the CLI) meets every word
for the first time.

So a segment of LONG_SEGMENT_DOCS documents or more gets a file beside it, ``<segment>.longpost``,
with every posting list of LONG_POSTINGS postings or more (at least two blocks) in the given
fields, decoded once when the segment appears (a rebuild, an import, a merge) or when a process
first opens an index without it (an index made before these files existed: ~0.1 s at 10k notes, ~2.4 s at
100k, once). It is written under the index lock, only while its segment is still in the index's
table of contents (an erasure rebuilding the folder holds that lock: a reader that opened the old
index never writes the old segment's words into the new folder).

Reading it: the small part (keys and offsets, with a checksum) is read and checked when the
file is opened, into a dict; each list is read with pread on a kept descriptor (no memory map:
a file cut short under a long-lived process must not kill it with SIGBUS) and checked against its
own crc32, its ids rising and inside the segment, its weights finite and positive. A file that
fails any check is not used (the lists are decoded as before) and is removed; the next process
writes it again. A file larger than twice its segment cannot be one of ours and is not read.

What the file holds is exactly what decoding gives (ids as Whoosh numbers them, term
frequencies as its float32 weights), deleted documents included: the reader's deletions are
applied when it is read, as for decoded lists. The file is named like the segment's own files, so
Whoosh deletes it with its segment; erasure deletes the whole index folder. Each key ends with a
NUL byte, so a raw scan for a word (prove-gone) sees it bounded as in the segment's own files.

File layout (little-endian): an 80-byte header (MAGIC; the number of keys, the key bytes' length,
the number of postings, the segment's document count, the fewest postings a list has; crc32 of
the small part; the segment id in 24 bytes), then the small part: key offsets (uint64, keys + 1),
the keys ("field\\0term\\0"; padded to 8), posting offsets (uint64, keys + 1), each list's crc32
(uint32, padded to 8); then document numbers (uint32, padded to 8) and weights (float32).
"""
from __future__ import annotations

import errno
import os
import stat
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from whoosh.matching.wrappers import FilterMatcher

from .. import cache as cachefiles
from ..errors import LockTimeout

try:  # the fast path reads whoosh3 posting blocks directly
    from whoosh.codec.whoosh3 import W3LeafMatcher
except ImportError:  # pragma: no cover - another Whoosh: the public path below
    W3LeafMatcher = None

MAGIC = b"MDMPOST2"
SUFFIX = ".longpost"
_HEADER = struct.Struct("<8sQQQQQI24s4x")  # 80 bytes
LONG_SEGMENT_DOCS = 2_000
LONG_POSTINGS = 129  # more than one block of 128
KEY_MAX = 1024  # bytes of a key ("field\0term\0"): longer terms' lists are decoded
_STALE_TEMPORARY_SECONDS = 600.0
# errno values of a passing shortage, not of a damaged file: tried again later, nothing removed.
_PASSING = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EINTR}


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
        tf_parts.append(np.asarray(m._weights, dtype=np.float32))  # Whoosh keeps them as float32
        m._next_block()
    if not id_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
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
    """A segment's long posting lists, read from its file (see the module docstring)."""

    def __init__(self, path: Path, doc_count_all: int, segment_id: str, max_size: int):
        self.path = path
        # O_NONBLOCK: a FIFO put where the file belongs would block the open for ever.
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        # Closed when this object goes, if close() was not called (a repo dropped unclosed
        # leaked one descriptor each).
        self._closer = weakref.finalize(self, os.close, self._fd)
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            if st.st_size > max_size:
                raise ValueError("larger than its segment could make it")
            self._inode = (st.st_dev, st.st_ino)
            self._parse(st.st_size, doc_count_all, segment_id)
        except Exception:
            self.close()
            raise

    def _parse(self, size: int, docs: int, segment_id: str) -> None:
        magic, n_keys, key_bytes, n_post, file_docs, fewest, small_crc, segid = \
            _HEADER.unpack(self._read(0, _HEADER.size))
        if magic != MAGIC or file_docs != docs or segid.rstrip(b"\0") != segment_id.encode():
            raise ValueError("not this segment's file")
        # Counts a file of ours can have, checked before anything is read by them.
        if not (fewest >= LONG_POSTINGS and n_post >= n_keys * fewest and n_post <= n_keys * docs
                and 4 * n_keys <= key_bytes <= KEY_MAX * n_keys):
            raise ValueError("counts no file of long lists has")
        small = 8 * (n_keys + 1) + _pad8(key_bytes) + 8 * (n_keys + 1) + _pad8(4 * n_keys)
        if _HEADER.size + small + _pad8(4 * n_post) + 4 * n_post != size:
            raise ValueError("its size does not match its header")
        data = self._read(_HEADER.size, small)
        if zlib.crc32(data) != small_crc:
            raise ValueError("its keys fail their checksum")
        key_at = np.frombuffer(data, dtype="<u8", count=n_keys + 1).astype(np.int64)
        keys_from = 8 * (n_keys + 1)
        post_from = keys_from + _pad8(key_bytes)
        post_at = np.frombuffer(data, dtype="<u8", count=n_keys + 1, offset=post_from).astype(np.int64)
        self._crcs = np.frombuffer(data, dtype="<u4", count=n_keys, offset=post_from + 8 * (n_keys + 1))
        key_len, list_len = np.diff(key_at), np.diff(post_at)
        if (key_at[0] != 0 or key_at[-1] != key_bytes or post_at[0] != 0 or post_at[-1] != n_post
                or (key_len < 4).any() or (key_len > KEY_MAX).any() or (list_len < fewest).any()
                or (list_len > docs).any()):
            raise ValueError("its offsets are not those of its lists")
        keys = data[keys_from:keys_from + key_bytes]
        self._index = {}
        for i, (a, b) in enumerate(zip(key_at[:-1].tolist(), key_at[1:].tolist())):
            if keys[b - 1] != 0:
                raise ValueError("a key without its end")
            self._index[keys[a:b - 1]] = i
        self._post_at = post_at
        self._ids_from = _HEADER.size + small
        self._tf_from = self._ids_from + _pad8(4 * n_post)
        self.n_keys, self.docs = n_keys, docs

    def _read(self, offset: int, size: int) -> bytes:
        if self._fd < 0:
            raise ValueError("closed")
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise ValueError("shorter than it says")
        return data

    def get(self, field: str, btext: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """(document numbers, term frequencies) of a long list, None for any other term.
        ValueError if the list read is not the one written (then :meth:`discard` the file)."""
        i = self._index.get(field.encode() + b"\0" + btext)
        if i is None:
            return None
        start, end = int(self._post_at[i]), int(self._post_at[i + 1])
        id_bytes = self._read(self._ids_from + 4 * start, 4 * (end - start))
        tf_bytes = self._read(self._tf_from + 4 * start, 4 * (end - start))
        if zlib.crc32(tf_bytes, zlib.crc32(id_bytes)) != int(self._crcs[i]):
            raise ValueError("a list fails its checksum")
        # Views of what was read, as the caches keep lists (bm25.POSTINGS_CACHE_MAX): no copy.
        ids = np.frombuffer(id_bytes, dtype="<u4").view(np.int32)
        tf = np.frombuffer(tf_bytes, dtype="<f4")
        if (int(ids[0]) < 0 or (np.diff(ids) <= 0).any() or int(ids[-1]) >= self.docs
                or not (np.isfinite(tf) & (tf > 0)).all()):
            raise ValueError("a list no segment has")
        return ids, tf

    def lists(self) -> list[tuple[str, bytes, int]]:
        """(field, term bytes, number of postings) of every list the file holds."""
        lengths = np.diff(self._post_at).tolist()
        out = []
        for key, i in self._index.items():
            field, _, btext = key.partition(b"\0")
            out.append((field.decode(), btext, lengths[i]))
        return out

    def discard(self) -> None:
        """This file failed a check: closed, and removed if it is still the one read (not
        when this object was only closed: a newer one may be reading the same file)."""
        if self._fd < 0:
            return
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        self._fd = -1
        self._closer()  # closes the descriptor once


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def path_for(folder: Path, segment_id: str) -> Path:
    return folder / f"{segment_id}{SUFFIX}"


def write(folder: Path, reader, fields) -> Path:
    """Decode ``reader``'s (one segment's) long lists in ``fields`` into its file (written
    whole beside it, then renamed into place). The caller holds the index lock."""
    entries: list[tuple[bytes, np.ndarray, np.ndarray]] = []
    for field in fields:
        if field not in reader.schema:
            continue
        for btext, info in reader.iter_field(field):
            key = field.encode() + b"\0" + btext + b"\0"
            if info.doc_frequency() < LONG_POSTINGS or len(key) > KEY_MAX:
                continue
            ids, tf, _ = decode(reader.postings(field, btext))
            entries.append((key, ids.astype("<u4"), tf.astype("<f4")))
    keys = b"".join(k for k, _, _ in entries)
    key_at = np.zeros(len(entries) + 1, dtype="<u8")
    key_at[1:] = np.cumsum([len(k) for k, _, _ in entries])
    post_at = np.zeros(len(entries) + 1, dtype="<u8")
    post_at[1:] = np.cumsum([len(ids) for _, ids, _ in entries])
    crcs = np.array([zlib.crc32(tf.tobytes(), zlib.crc32(ids.tobytes())) for _, ids, tf in entries], dtype="<u4")
    n_post = int(post_at[-1])
    ids = np.concatenate([i for _, i, _ in entries]) if entries else np.zeros(0, "<u4")
    tf = np.concatenate([t for _, _, t in entries]) if entries else np.zeros(0, "<f4")
    small = (key_at.tobytes() + keys.ljust(_pad8(len(keys)), b"\0") + post_at.tobytes()
             + crcs.tobytes().ljust(_pad8(4 * len(entries)), b"\0"))
    segment_id = reader.segment().segment_id()
    fewest = min((len(i) for _, i, _ in entries), default=LONG_POSTINGS)
    header = _HEADER.pack(MAGIC, len(entries), len(keys), n_post, reader.doc_count_all(), fewest,
                          zlib.crc32(small), segment_id.encode())
    path = path_for(folder, segment_id)
    # A name Whoosh's clean-up leaves alone (it skips names starting with a dot).
    tmp = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(small)
            f.write(ids.tobytes().ljust(_pad8(4 * n_post), b"\0"))
            f.write(tf.tobytes())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _segment_size(folder: Path, segment_id: str) -> int:
    """Bytes of the segment's own files (a compound .seg, or its parts)."""
    total = 0
    for entry in os.scandir(folder):
        if entry.name.startswith(segment_id + ".") and not entry.name.endswith(SUFFIX):
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def _is_current(folder: Path, segment_id: str) -> bool:
    """Whether the index in ``folder`` still has the segment (a rebuild or an erasure replaced it)."""
    from whoosh import index as windex

    try:
        with windex.open_dir(str(folder)).reader() as reader:
            return segment_id in {leaf.segment().segment_id() for leaf, _ in reader.leaf_readers()}
    except Exception:  # noqa: BLE001 -- an index being replaced or damaged: not now
        return False


class Attacher:
    """Gives each big segment reader of a searcher its LongPostings (bm25.py reads them),
    writing a missing file first (under ``lock``, the index lock). Opened files are kept while
    unchanged on disk; a file that cannot be read or written is not tried again by this
    process (a damaged one is removed, for the next process to write again)."""

    def __init__(self, folder: Path, fields, lock: Callable[[], Any]):
        self.folder = folder
        self.fields = tuple(fields)
        self.lock = lock
        self._open: dict[str, tuple[tuple, LongPostings]] = {}
        self._failed: set[str] = set()
        self._swept = False  # stale temporaries looked for once per process (and at each write)

    def attach(self, searcher, *, holding_lock: bool = False) -> None:
        """``holding_lock``: the caller holds the index lock (a rebuild) and writes files now;
        otherwise a file is written only if the lock is free at once (else by a later call)."""
        if not self._swept:
            self._swept = True
            self._remove_stale_temporaries()
        current = set()
        for leaf, _ in searcher.leaf_searchers():
            reader = leaf.reader()
            if reader.doc_count_all() < LONG_SEGMENT_DOCS:
                continue
            current.add(reader.segment().segment_id())
            if "_mdmem_long" not in reader.__dict__:
                found = self._for(reader, holding_lock)
                if found is not False:
                    reader.__dict__["_mdmem_long"] = found
        for gone in set(self._open) - current:  # merged away or rebuilt (closed with its last reader)
            del self._open[gone]

    def _for(self, reader, holding_lock: bool) -> LongPostings | None | bool:
        """The segment's LongPostings; None if it has none for good; False: not yet."""
        segment_id = reader.segment().segment_id()
        if segment_id in self._failed:
            return None
        path = path_for(self.folder, segment_id)
        try:
            if not os.path.lexists(path) and not self._write(reader, segment_id, holding_lock):
                return False
            st = os.lstat(path)
            stamp = (st.st_dev, st.st_ino, st.st_size)  # not mtime: a touch is not another file
            kept = self._open.get(segment_id)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            max_size = 2 * _segment_size(self.folder, segment_id) + (1 << 20)
            found = LongPostings(path, reader.doc_count_all(), segment_id, max_size)
        except OSError as exc:
            if exc.errno in _PASSING:  # out of descriptors or memory for a moment: not damage
                return False
            self._failed.add(segment_id)
            cachefiles.remove(path)
            return None
        except Exception:  # noqa: BLE001 -- ValueError, struct.error, a Whoosh error
            # Unreadable or unwritable: decoded as before (only slower). A damaged file is
            # written again by the next process that finds it missing.
            self._failed.add(segment_id)
            cachefiles.remove(path)
            return None
        # A replaced LongPostings is not closed here: a reader of an older searcher may still
        # read through it (its descriptor closes when the last reader lets it go).
        self._open[segment_id] = (stamp, found)
        return found

    def _write(self, reader, segment_id: str, holding_lock: bool) -> bool:
        """Write the segment's file if it is still in the index and the lock is ours."""
        lock = None if holding_lock else self.lock()
        if lock is not None:
            try:
                lock.acquire(timeout=0)
            except LockTimeout:
                return False
        try:
            if not _is_current(self.folder, segment_id):
                return False
            if not os.path.lexists(path_for(self.folder, segment_id)):  # another process's, meanwhile
                self._remove_stale_temporaries()
                write(self.folder, reader, self.fields)
            return True
        finally:
            if lock is not None:
                lock.release()

    def _remove_stale_temporaries(self) -> None:
        """A writer killed mid-file leaves its temporary: gone after a while."""
        now = time.time()
        try:
            for p in self.folder.glob(f".*{SUFFIX}.*.tmp"):
                if now - p.lstat().st_mtime > _STALE_TEMPORARY_SECONDS:
                    p.unlink(missing_ok=True)
        except OSError:
            pass

    def close(self) -> None:
        """The index is closed: so are the files (its readers go with it)."""
        for _, found in self._open.values():
            found.close()
        self._open.clear()
