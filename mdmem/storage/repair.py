"""The repair journal: paths a commit is about to change, replayed after a crash so the work tree
and git's index match the branch again."""
from __future__ import annotations

import json
import os
from pathlib import Path


import pygit2

from .objects import tree_blob_ids, tree_entry, with_mode
from .gitindex import stage


PENDING_NAME = "mdmem-pending.json"


class RepairJournal:
    """GitStore's repair methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

    # --- the journal and repair -------------------------------------------------------
    @property
    def pending_path(self) -> Path:
        return Path(self.repo.path) / PENDING_NAME

    def pending_entries(self) -> dict[str, str | None]:
        """Paths of mdmem commits whose work-tree file or git index entry may not be written
        yet (path -> its blob before that commit, None if new): the journal. A long-lived
        process (index_delay) keeps its index entries here until it writes them."""
        return self._read_journal()

    def _read_journal(self) -> dict[str, str | None]:
        try:
            data = json.loads(self.pending_path.read_text())
            paths = data.get("paths", {}) if isinstance(data, dict) else {}
            return {p: b for p, b in paths.items() if isinstance(p, str) and (b is None or isinstance(b, str))}
        except (FileNotFoundError, ValueError, OSError):
            return {}

    def _journal(self, changes: dict[str, bytes | None], parent) -> None:
        """Record, before the branch moves, each path's blob before this write: repair tells
        our unfinished write (the file still holds that blob) from a person's later edit."""
        paths = self._read_journal()
        new = [path for path in changes if path not in paths]
        if parent is None:
            paths.update(dict.fromkeys(new))
        else:
            paths.update(tree_blob_ids(parent.tree, new, blobs_only=False, load=self._tree))
        tmp = self.pending_path.with_name(PENDING_NAME + ".tmp")
        tmp.write_text(json.dumps({"paths": paths}))
        os.replace(tmp, self.pending_path)

    def _clear_journal(self) -> None:
        self.pending_path.unlink(missing_ok=True)

    def _unjournal(self, paths) -> None:
        """Drop ``paths`` from the journal (another process's may remain)."""
        left = {p: b for p, b in self._read_journal().items() if p not in paths}
        if not left:
            self._clear_journal()
            return
        tmp = self.pending_path.with_name(PENDING_NAME + ".tmp")
        tmp.write_text(json.dumps({"paths": left}))
        os.replace(tmp, self.pending_path)

    def repair(self) -> list[str]:
        """Bring the work tree and git's index in line with HEAD for the paths an unfinished
        write left behind (call under the lock). A file still holding its pre-write blob (or
        missing) gets HEAD's version; a file a person changed since is left alone. Index
        entries for those paths follow HEAD, and notes HEAD has but the index lost (a staged
        deletion mdmem caused) are put back. Returns the paths fixed."""
        self.flush_index()
        journal = self._read_journal()
        head = self.head()
        fixed: list[str] = []
        if head is None:
            self._clear_journal()
            return fixed
        tree = self.repo[head].peel(pygit2.Commit).tree
        self._index = None
        index = self.repo.index
        index.read(force=True)
        staged = {e.path: str(e.id) for e in index}
        for path, before in sorted(journal.items()):
            entry = tree_entry(tree, path)
            want = str(entry.id) if entry is not None else None
            full = self.root / path
            full.with_name(f".{full.name}.mdmem-tmp").unlink(missing_ok=True)
            have = self.worktree_blob_id(path, expect=want)
            if have != want and have == before:
                self._write_file(path, None if entry is None else with_mode(self.repo[entry.id].data, entry.filemode))
                fixed.append(path)
                have = want
            # The index follows HEAD where it still holds the pre-write blob (our unfinished
            # write) or where the work tree does: else a plain `git commit` reverts our commit.
            if staged.get(path) != want and (have == want or staged.get(path) == before):
                if want is None:
                    if path in index:
                        index.remove(path)
                elif have == want:
                    stage(index, path)
                else:
                    stage(index, pygit2.IndexEntry(path, pygit2.Oid(hex=want), pygit2.GIT_FILEMODE_BLOB))
                fixed.append(path)
        # Notes whose index entry disagrees with HEAD while the work tree holds HEAD's
        # version: an index write that failed after its commit (a stale index.lock, a kill).
        # A plain `git commit` would otherwise delete or revert them.
        for path, blob in self._head_notes(tree):
            if staged.get(path) != blob and path not in journal and self.worktree_blob_id(path) == blob:
                stage(index, path)
                fixed.append(path)
        if fixed:
            index.write()
        self._clear_journal()
        return sorted(set(fixed))

    def _head_notes(self, tree) -> list[tuple[str, str]]:
        out = []
        stack = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for item in node:
                name = f"{prefix}{item.name}"
                if item.type_str == "tree":
                    if prefix or name in ("team", "private"):
                        stack.append((self.repo[item.id], name + "/"))
                elif prefix and item.filemode == pygit2.GIT_FILEMODE_BLOB:
                    out.append((name, str(item.id)))
        return out
