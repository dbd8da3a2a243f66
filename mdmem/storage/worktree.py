"""Reading notes from the work tree: the live notes a path, a folder or a root holds."""
from __future__ import annotations

import datetime as _dt
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..errors import NoteInvalid
from ..model.kinds import Contracts
from ..model.layout import is_note_path, root_of
from ..model.note import DEFAULT_MAX_BYTES, Note, check_size
from ..model.validate import validate_note


@dataclass(frozen=True)
class StoredNote:
    """A note as stored: its path (identity), the blob id of this version, and the note."""

    path: str
    version: str
    note: Note
    untrusted: str | None = None  # set by MemoryRepo.get: why no permitted writer vouches for it

    @property
    def root(self) -> str:
        return root_of(self.path)

    def to_dict(self) -> dict:
        """results.py's rule: every field, the note nested, its id and text beside it."""
        return {"path": self.path, "version": self.version, "note_id": self.note.id, "text": self.note.text,
                "untrusted": self.untrusted, "note": self.note.to_dict()}


# Notes found invalid, by (path, blob id, limit): a bad note costs one parse per process,
# not one per read (views, the gate and the index all read the same files).
_INVALID: OrderedDict[tuple, NoteInvalid] = OrderedDict()
_INVALID_MAX = 4096
# Notes found valid, the same way, with the kinds they were checked against: a long-lived
# process reading a file again unchanged (every episode write reads the day's episodes of its
# subject to find the turn it follows) does not parse and check it again -- that was two thirds
# of a write's CPU on a server after a day of turns. Bounded in notes and in bytes (a whole-tree
# scan passes through it): the least recently read go first.
_VALID: OrderedDict[tuple, tuple[Contracts, StoredNote, int]] = OrderedDict()
_VALID_MAX, _VALID_BYTES_MAX = 2048, 8_000_000
_valid_bytes = [0]
_valid_mutex = threading.Lock()


def read_note_bytes(root: Path, path: str, max_bytes: int | None = None, *, check_dirs: bool = True) -> bytes | None:
    """The bytes of the note file at ``path``, or None if there is none. A note is a small
    regular file: a symlink (anywhere on the path), a device or FIFO, or a file over the size
    cap raises NoteInvalid without being read (a symlink to /dev/zero read until MemoryError)."""
    full = os.path.join(root, path)
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except (IsADirectoryError, NotADirectoryError):
        if _through_symlink(root, path):
            raise NoteInvalid(path, "file", "a folder on its path is a symbolic link; "
                              "notes are regular files") from None
        return None
    except OSError as exc:
        if os.path.islink(full):
            raise NoteInvalid(path, "file", "is a symbolic link; a note is a regular file") from None
        raise NoteInvalid(path, "file", f"cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                return None
            raise NoteInvalid(path, "file", "is not a regular file (device, FIFO or socket)")
        # ~10 us a read; callers that found the path by walking real folders skip it.
        if check_dirs and _through_symlink(root, path):
            raise NoteInvalid(path, "file", "a folder on its path is a symbolic link; notes are regular files")
        check_size(path, info.st_size, max_bytes)
        limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        chunks, size = [], 0
        while True:  # read at most the cap + 1: the file may grow after fstat
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                check_size(path, size, max_bytes)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _through_symlink(root: Path, path: str) -> bool:
    """Whether a folder between ``root`` and ``path`` is a symbolic link."""
    parts = path.split("/")[:-1]
    folder = str(root)
    for part in parts:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            return True
    return False


def forget_read_notes() -> None:
    """Drop the notes kept as read (after a history rewrite: erased text is not kept in memory)."""
    with _valid_mutex:
        _VALID.clear()
        _valid_bytes[0] = 0
    _INVALID.clear()


def read_note(root: Path, path: str, contracts: Contracts, *, max_bytes: int | None = None,
              check_dirs: bool = True) -> StoredNote | None:
    """The note at ``path`` in the work tree, or None if there is no file. Raises NoteInvalid."""
    data = read_note_bytes(root, path, max_bytes, check_dirs=check_dirs)
    if data is None:
        return None
    return validated(path, data, contracts, max_bytes=max_bytes)


def validated(path: str, data: bytes, contracts: Contracts, *, max_bytes: int | None = None) -> StoredNote:
    """``data`` checked as the note at ``path`` (raises NoteInvalid), once per version and
    kinds in this process: a write checks what it commits here, and the server's next
    recall, reading the same file to index it, finds it checked (0.4 ms of a catch-up that
    holds the index mutex, every other recall waiting)."""
    from .queries import worktree_version  # pygit2 only once a note is read

    blob = worktree_version(data)
    memo = (path, blob, max_bytes)
    known = _INVALID.get(memo)
    if known is not None:
        raise known
    with _valid_mutex:
        valid = _VALID.get(memo)
        if valid is not None and valid[0] is contracts:  # the very kinds it was checked against
            _VALID.move_to_end(memo)
            return valid[1]
    try:
        stored = StoredNote(path, blob, validate_note(path, data, contracts, max_bytes=max_bytes))
    except NoteInvalid as exc:
        _INVALID[memo] = exc
        if len(_INVALID) > _INVALID_MAX:
            _INVALID.popitem(last=False)
        raise
    with _valid_mutex:
        old = _VALID.pop(memo, None)
        _valid_bytes[0] += len(data) - (old[2] if old else 0)
        _VALID[memo] = (contracts, stored, len(data))
        while _VALID and (len(_VALID) > _VALID_MAX or _valid_bytes[0] > _VALID_BYTES_MAX):
            _valid_bytes[0] -= _VALID.popitem(last=False)[1][2]
    return stored


def iter_note_paths(root: Path, under: str = "") -> list[str]:
    """Repository-relative paths of note files below ``under`` (a scope root or deeper)."""
    base = root / under if under else root
    out = []
    for top in ([base] if under else [root / "team", root / "private"]):
        rel_top = os.path.relpath(top, root).replace(os.sep, "/")
        if not top.is_dir() or _through_symlink(root, f"{rel_top}/-"):
            continue  # a symlinked root is not followed (os.walk follows only its top)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            for name in filenames:
                rel = f"{rel_dir}/{name}"
                if is_note_path(rel):
                    out.append(rel)
    return sorted(out)


def scan_notes(root: Path, contracts: Contracts, under: str = "", *,
               max_bytes: int | None = None) -> tuple[list[StoredNote], list[NoteInvalid]]:
    """Every note below ``under``; broken ones are reported, not raised."""
    good, bad = [], []
    for path in iter_note_paths(root, under):
        try:
            # os.walk does not descend into symlinked folders: the path's folders are real.
            stored = read_note(root, path, contracts, max_bytes=max_bytes, check_dirs=False)
        except NoteInvalid as exc:
            bad.append(exc)
            continue
        if stored is not None:
            good.append(stored)
    return good, bad


def live_in_dir(root: Path, folder: str, contracts: Contracts, now: _dt.datetime, *,
                max_bytes: int | None = None) -> list[StoredNote]:
    """Live notes directly in one kind folder (broken ones skipped: the gate must not crash)."""
    base = root / folder
    if not base.is_dir():
        return []
    out = []
    for name in sorted(os.listdir(base)):
        if not name.endswith(".md"):
            continue
        try:
            stored = read_note(root, f"{folder}/{name}", contracts, max_bytes=max_bytes)
        except NoteInvalid:
            continue
        if stored is not None and stored.note.is_live(now):
            out.append(stored)
    return out


def notes_named(root: Path, folder: str, prefixes: tuple[str, ...], contracts: Contracts, *,
                max_bytes: int | None = None) -> list[StoredNote]:
    """The notes directly in ``folder`` whose file names start with one of ``prefixes`` (an
    episode folder's day, ``2026-10-01-``): a look at one day, not at every file of a month
    (broken ones skipped)."""
    base = root / folder
    try:
        names = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    if _through_symlink(root, f"{folder}/-"):  # the folder or one above it: each file would be refused
        return []
    out = []
    for name in names:
        if not name.endswith(".md") or not name.startswith(prefixes):
            continue
        try:
            # The folders were looked at once above, not again per file (a day of turns is
            # hundreds of files, each a walk up the path).
            stored = read_note(root, f"{folder}/{name}", contracts, max_bytes=max_bytes, check_dirs=False)
        except NoteInvalid:
            continue
        if stored is not None:
            out.append(stored)
    return out
