"""The work tree and git's on-disk index brought in line with a commit: files written, entries
staged, deferred flushes."""
from __future__ import annotations

from typing import TYPE_CHECKING

import atexit
import os
import stat
import threading
import time
import weakref
from pathlib import Path

import shutil

import pygit2

from .objects import mode_of, tree_entry


# git's index is one file rewritten whole on every update (libgit2 has no split index): ~5 ms
# at 10k notes, 60-300 ms at 100k. A long-lived process (the MCP server) sets
# GitStore.index_delay: a commit's index entries are then written this long after it (one
# rewrite for a burst of writes) by a timer thread, or before anything reads the index, or on
# close/exit; until then the journal lists them, and a kill is repaired on the next open.
INDEX_DELAY_SECONDS = 0.2


# A rewrite of git's index holds the write lock: flushes are spaced at least this many times
# what the last one took (at 100k notes a ~50 ms rewrite every 0.2 s held the lock a fifth of
# the time, and writes queued behind it), by at most MAX_INDEX_DELAY_SECONDS for that reason.
FLUSH_SPACING = 50
MAX_INDEX_DELAY_SECONDS = 5.0


FLUSH_RETRIES = 8  # a failed flush of git's index is tried again after 0.2, 0.4, ... 5 s


# Stores with index entries due, flushed at exit (a process that never closes its repo).
if TYPE_CHECKING:
    from .gitstore import GitStore
_OPEN_STORES: "weakref.WeakSet[GitStore]" = weakref.WeakSet()


def stage(index: pygit2.Index, entry: str | pygit2.IndexEntry) -> None:
    """``index.add(entry)`` (a work-tree path, or an entry), first dropping what git's own
    ``update-index --replace`` drops: entries under the path (a folder stood there) and a file
    at a folder on its way. libgit2 keeps them, and git then refuses every commit ("you have
    both X and X/a"): a view path committed as a folder did that after mdmem's next write."""
    path = entry if isinstance(entry, str) else entry.path
    index.remove_directory(path)
    parts = path.split("/")
    for end in range(1, len(parts)):
        folder = "/".join(parts[:end])
        if folder in index:
            index.remove(folder)
    index.add(entry)


def _flush_later(ref) -> None:
    store = ref()
    if store is not None:
        store.flush_index()


@atexit.register
def _flush_at_exit() -> None:
    for store in list(_OPEN_STORES):
        store.flush_index()


class IndexKeeping:
    """GitStore's gitindex methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

    def flush_delay(self) -> float:
        """How long after a write its index entries are written: ``index_delay``, or longer
        where git's index costs more to rewrite (FLUSH_SPACING)."""
        return max(self.index_delay or 0.0, min(MAX_INDEX_DELAY_SECONDS, FLUSH_SPACING * self.flush_seconds))

    def _arm_flush(self, delay: float) -> None:
        self._index_timer = threading.Timer(delay, _flush_later, (weakref.ref(self),))
        self._index_timer.daemon = True
        self._index_timer.start()
        _OPEN_STORES.add(self)

    def flush_index(self) -> None:
        """Write the index entries of this process's commits into git's index (one rewrite
        for all of them) and drop them from the journal. Never raises: what fails is kept and
        tried again a little later (git's own index.lock -- a person's git, or the stat refresh
        mdmem runs in a copied repository -- made the write fail, and the entries were dropped:
        git status stayed dirty until some later write), and stays in the journal
        for repair meanwhile."""
        if not self._index_due:
            return
        due: set[str] = set()
        try:
            with self.locked():
                due, self._index_due = set(self._index_due), set()
                timer, self._index_timer = self._index_timer, None
                if timer is not None and timer is not threading.current_thread():
                    timer.cancel()
                if not due:
                    return
                index = self._git_index()
                head = self.head()
                tree = self.repo[head].peel(pygit2.Commit).tree if head else None
                before = self._read_journal()  # each path's blob before our write
                for path in due:
                    # What HEAD holds now (a later commit, ours or another process's, may have
                    # changed the path again since).
                    entry = tree_entry(tree, path) if tree is not None else None
                    if self._staged_by_a_person(index, path, entry, before):
                        continue
                    if entry is None:
                        if path in index:
                            index.remove(path)
                    elif self.worktree_blob_id(path, expect=str(entry.id)) == str(entry.id):
                        stage(index, path)  # with the file's stat data: git status need not hash it
                    else:  # a person changed the file since (or a link): the index follows HEAD
                        stage(index, pygit2.IndexEntry(path, entry.id, entry.filemode))
                started = time.perf_counter()
                index.write()
                self.flush_seconds = time.perf_counter() - started
                self._unjournal(due)
                due = set()
            self._flush_failures = 0
            self.last_repair_error = None
        except Exception as exc:  # noqa: BLE001 -- the journal keeps them; repair finishes
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
            self._index_due |= due
            # No timer left behind (a LockTimeout before the flush cleared it kept the finished
            # one, and no later write armed another).
            timer, self._index_timer = self._index_timer, None
            if timer is not None and timer is not threading.current_thread():
                timer.cancel()
            self._flush_failures += 1
            if self._flush_failures <= FLUSH_RETRIES:  # then the next write arms it again
                self._arm_flush(min(5.0, 0.1 * 2 ** self._flush_failures))

    def _staged_by_a_person(self, index: pygit2.Index, path: str, entry, before: dict[str, str | None]) -> bool:
        """Whether git's index holds, for a path of ours still due, a version a person staged
        since our write: neither HEAD's, nor the one before our write (the journal's), while the
        work tree is not HEAD's either. It is theirs and stays, as repair and the hook leave it
        (a retried flush staged HEAD's over a person's `git add`)."""
        staged = str(index[path].id) if path in index else None
        want = str(entry.id) if entry is not None else None
        if staged == want or staged == before.get(path, staged):
            return False
        return self.worktree_blob_id(path, expect=want) != want

    def _git_index(self) -> pygit2.Index:
        # One Index object per store; re-read only when the file changed on disk
        # (someone else wrote it), which saves a full parse per write in long-lived processes.
        if self._index is None:
            self._use_index_v4()
            self._index = self.repo.index
        self._index.read(force=False)
        return self._index

    def _sync_worktree(self, changes: dict[str, bytes | None]) -> None:
        self.flush_index()  # this process's earlier entries first: the index is written once
        index = self._git_index()
        folders: set[str] = set()
        for path, data in changes.items():
            self._write_file(path, data, folders)
            if data is None:
                if path in index:
                    index.remove(path)
            else:
                stage(index, path)
        index.write()

    def _write_file(self, path: str, data: bytes | None, folders: set[str] | None = None) -> None:
        """Put ``data`` at ``path`` in the work tree (None: remove it), atomically. A folder on
        the way that is a symlink or a file is replaced by a real folder, as git checkout
        does: a committed symlink must never send our write outside the work tree.
        ``folders``: the folders (relative paths) this commit's writes have made sure of so far,
        not checked again (a 10k import lstat'ed ~5 folders a note, ~0.1 ms each); a path
        written as a file or link leaves it, a removal empties it (empty folders are pruned)."""
        full = self.root / path
        if folders is not None and path in folders:
            folders.difference_update([f for f in folders if f == path or f.startswith(path + "/")])
        if data is None:
            if folders is not None:
                folders.clear()
            if not full.is_dir() or full.is_symlink():
                full.unlink(missing_ok=True)
            self._prune_empty_dirs(full.parent)
            return
        folder, at = str(self.root), ""
        for part in path.split("/")[:-1]:
            folder, at = os.path.join(folder, part), f"{at}/{part}" if at else part
            if folders is not None and at in folders:
                continue
            try:
                mode = os.lstat(folder).st_mode
            except FileNotFoundError:
                os.mkdir(folder)
                mode = stat.S_IFDIR
            if not stat.S_ISDIR(mode):
                os.unlink(folder)
                os.mkdir(folder)
            if folders is not None:
                folders.add(at)
        tmp = full.with_name(f".{full.name}.mdmem-tmp")
        tmp.unlink(missing_ok=True)
        mode = mode_of(data)
        if mode == pygit2.GIT_FILEMODE_LINK:  # as git checks it out: a link, never followed here
            os.symlink(os.fsdecode(data), tmp)
        else:
            with open(tmp, "xb") as f:
                f.write(data)
            if mode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE:
                tmp.chmod(0o755)
        if full.is_dir() and not full.is_symlink():
            shutil.rmtree(full)
        os.replace(tmp, full)

    def _use_index_v4(self) -> None:
        """Every write rewrites the whole on-disk index: version 4 compresses its paths
        (a third smaller at 10,000 notes, 5.2 -> 3.8 ms a write). git reads it since 1.8;
        libgit2 keeps the version it finds. Done once, under the write lock."""
        path = Path(self.repo.path) / "index"
        try:
            with open(path, "rb") as f:
                header = f.read(8)
        except FileNotFoundError:
            return
        if header[:4] == b"DIRC" and int.from_bytes(header[4:8], "big") < 4:
            self.git("update-index", "--index-version", "4", check=False)

    def _prune_empty_dirs(self, folder: Path) -> None:
        root = self.root.resolve()
        folder = folder.resolve()
        while folder != root and root in folder.parents and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
