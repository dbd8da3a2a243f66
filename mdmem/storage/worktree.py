"""Reading notes from the work tree: the live notes a path, a folder or a root holds."""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from ..model.kinds import Contracts
from ..errors import NoteInvalid
from ..model.layout import is_note_path
from ..model.note import Note
from ..model.validate import validate_note


@dataclass(frozen=True)
class StoredNote:
    """A note as stored: its path (identity), the blob id of this version, and the note."""

    path: str
    version: str
    note: Note

    @property
    def root(self) -> str:
        return "/".join(self.path.split("/")[:2])

    def to_dict(self) -> dict:
        return {"path": self.path, "version": self.version, **self.note.to_dict()}


def read_note(root: Path, path: str, contracts: Contracts) -> StoredNote | None:
    """The note at ``path`` in the work tree, or None if there is no file. Raises NoteInvalid."""
    import pygit2

    full = root / path
    try:
        data = full.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return StoredNote(path, str(pygit2.hash(data)), validate_note(path, data, contracts))


def iter_note_paths(root: Path, under: str = "") -> list[str]:
    """Repository-relative paths of note files below ``under`` (a scope root or deeper)."""
    base = root / under if under else root
    out = []
    for top in ([base] if under else [root / "team", root / "private"]):
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            for name in filenames:
                rel = f"{rel_dir}/{name}"
                if is_note_path(rel):
                    out.append(rel)
    return sorted(out)


def scan_notes(root: Path, contracts: Contracts, under: str = "") -> tuple[list[StoredNote], list[NoteInvalid]]:
    """Every note below ``under``; broken ones are reported, not raised."""
    good, bad = [], []
    for path in iter_note_paths(root, under):
        try:
            stored = read_note(root, path, contracts)
        except NoteInvalid as exc:
            bad.append(exc)
            continue
        if stored is not None:
            good.append(stored)
    return good, bad


def live_in_dir(root: Path, folder: str, contracts: Contracts, now: _dt.datetime) -> list[StoredNote]:
    """Live notes directly in one kind folder (broken ones skipped: the gate must not crash)."""
    base = root / folder
    if not base.is_dir():
        return []
    out = []
    for name in sorted(os.listdir(base)):
        if not name.endswith(".md"):
            continue
        try:
            stored = read_note(root, f"{folder}/{name}", contracts)
        except NoteInvalid:
            continue
        if stored is not None and stored.note.is_live(now):
            out.append(stored)
    return out
