"""git objects as mdmem reads and writes them: file modes carried with bytes, tree lookups, read retries."""
from __future__ import annotations

import sys
from typing import Callable


import pygit2



class FileData(bytes):
    """A file's bytes with its git mode: executable, or a symlink (the bytes are its target).
    Plain ``bytes`` mean a regular file, which every note is; the other files a team keeps in
    its memory repo (scripts, links, hooks) keep their mode through sync and fast-forward."""

    mode: int

    def __new__(cls, data: bytes, mode: int):
        obj = super().__new__(cls, data)
        obj.mode = mode
        return obj


def with_mode(data: bytes, mode: int) -> bytes:
    return data if mode == pygit2.GIT_FILEMODE_BLOB else FileData(data, mode)


def mode_of(data: bytes) -> int:
    return getattr(data, "mode", pygit2.GIT_FILEMODE_BLOB)


def tree_entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """The entry at ``path`` (a name, or a path through folders) in ``tree``; None if absent.

    The only way mdmem looks into a tree: pygit2 1.21 keeps a reference to the string it is
    given whenever a lookup misses or goes through folders (``name in tree``, ``tree[path]``),
    so each fresh string lived for ever (~6 a write in a long-lived server). Handed an
    interned string, the one object kept for each name is the one interned anyway."""
    try:
        return tree[sys.intern(path)]
    except KeyError:
        return None


REF_READ_TRIES = 20


def tree_blob_ids(tree: pygit2.Tree, paths, *, blobs_only: bool = True,
                   load: Callable[[pygit2.Oid], pygit2.Tree] | None = None) -> dict[str, str | None]:
    """Each path's entry id in ``tree`` (None if absent; with ``blobs_only``, None for a
    folder too), every folder on the way read once for all of them (through ``load``, the
    store's per-write trees, when given)."""
    folders: dict[str, pygit2.Tree | None] = {"": tree}

    def folder(name: str) -> pygit2.Tree | None:
        if name not in folders:
            parent_name, _, base = name.rpartition("/")
            parent = folder(parent_name)
            entry = tree_entry(parent, base) if parent is not None else None
            is_tree = entry is not None and entry.type_str == "tree"
            folders[name] = (load(entry.id) if load is not None else entry) if is_tree else None
        return folders[name]

    out: dict[str, str | None] = {}
    for path in paths:
        parent_name, _, base = path.rpartition("/")
        sub = folder(parent_name)
        entry = tree_entry(sub, base) if sub is not None else None
        out[path] = None if entry is None or (blobs_only and entry.type_str != "blob") else str(entry.id)
    return out
