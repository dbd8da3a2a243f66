"""Git as the log: commits under a lock, compare-and-swap on the branch, trailers, history.

Writes go through pygit2: the blob, the changed trees and the commit are written in
process, then the branch moves only if its tip is still the parent we built on (libgit2's
``set_target`` is conditional on the old value). The note is then written into the work
tree and the on-disk index is updated for that one path, so ``git status`` stays clean and
nothing a person has staged is swept into our commit.

GitPython's index API is not used for writes: measured, it lost commits under
contention. The git CLI is used for what libgit2 does poorly (path-limited log, gc).

The commit is the acknowledgement: once the branch has moved nothing raises to the caller.
Before the branch moves, the paths about to change (with the blob each had) go into a
journal, ``.git/mdmem-pending.json``; it is cleared once the work tree and git's index
hold the new versions. A journal found on open or before the next write (a kill, a stale
``index.lock``, a full disk) is replayed by :meth:`GitStore.repair`.
"""
from __future__ import annotations

import datetime as _dt
import os
import subprocess
import threading
from typing import Callable
from pathlib import Path


import pygit2

from ..errors import GitFailed
from .locks import renew_after_fork
from .queries import GitQueries
from .gitdir import (cache_dir, erasure_lock_path, erasure_turnstile_path,
                     locks_dir)
from .erasures_seen import ErasureFollower
from .locking import StoreLocking, WRITE_LOCK
from .history import HistoryReading
from .signatures import Signing, COMMITTER, default_identity, signature
from .commits import CommitWriting
from .gitindex import IndexKeeping
from .repair import RepairJournal
from .maintenance import Housekeeping


# libgit2 keeps the trees and commits it parses in a process-wide cache, up to 256 MB by default:
# a long-lived server parses new ones with every write (each diff of a root moving on), and its
# heap grew with them, ~8 KB a write (jemalloc's heap profile: all of the growth was trees and
# commits parsed by object lookups). The cache counts an object's raw size, less than its parsed
# form: at 16 MB it was still filling after 10 minutes of writes (the heap +13%); with caching off
# the growth went (docs/decisions.md, "The server's heap over hours"). The trees mdmem reads
# again are a write's own path (kept per write, GitStore._trees) and small.
LIBGIT2_CACHE_BYTES = 2 * 1024 * 1024
pygit2.settings.cache_max_size(LIBGIT2_CACHE_BYTES)


class GitStore(GitQueries, StoreLocking, HistoryReading, Signing, CommitWriting, IndexKeeping, RepairJournal,
               Housekeeping):
    """One git repository holding memory notes: the one seam between mdmem and git. Each concern
    lives in its own mixin module (locking, history, signatures, commits, gitindex, repair, housekeeping)."""

    def __init__(self, root: Path, identity=None):
        self.root = Path(root)
        try:
            self.repo = pygit2.Repository(str(self.root))
        except pygit2.GitError as exc:
            raise GitFailed(f"{self.root}: git cannot open this repository ({exc})") from None
        self.cache_dir = cache_dir(self.root)  # mdmem's caches: storage/gitdir.py says why inside .git
        self.lock_dir = locks_dir(self.root)
        self._index: pygit2.Index | None = None
        # actor -> (author name, email); the repo's [people] table (config.identity) when given
        self.identity = identity or default_identity
        # Why the last work-tree sync or flush of git's index failed; None again once a flush
        # succeeds (a retry that worked left the old message behind).
        self.last_repair_error: str | None = None
        self.signing_key: str | None = None  # an SSH private key: sign every commit with it
        # Paths of this process's commits whose entries are not yet in git's index, written by
        # flush_index() index_delay seconds later (see INDEX_DELAY_SECONDS).
        # None (the default): with every commit, so git status is clean when a call returns.
        self.index_delay: float | None = None
        self._index_due: set[str] = set()
        self._flush_failures = 0  # flush_index's failures in a row (each tried again later)
        self.flush_seconds = 0.0  # what the last rewrite of git's index took (spaces the next)
        self._index_timer: threading.Timer | None = None
        # This repo's entry in _HOLDERS: the lock folder's real path (a symlink or `..` in the
        # way the repo was reached names the same lock).
        self._lock_key = os.path.realpath(self.lock_dir)
        self.housekeepers: list[subprocess.Popen] = []  # housekeep_in_background's, still running
        self._write_lock = str(self.lock_dir / WRITE_LOCK)
        self._holder: int | None = None  # the thread holding the lock through this store
        # Trees read by the thread holding the write lock, by id, until it lets go (_tree): a
        # write reads a big folder's tree (1,552 subjects at 100k notes: 57 KB, ~0.6 ms to read
        # and parse; libgit2 caches no tree over 4 KB) to check the note's version, to edit it
        # and to journal it -- three times before this, once now.
        self._trees: dict[pygit2.Oid, pygit2.Tree] | None = None
        self._erasing = False  # the thread holding the lock took it for an erasure
        # The erasure gate, its turnstile and stamp (paths found once: each reads .git and commondir)
        self._gate = (str(erasure_lock_path(self.root)), str(erasure_turnstile_path(self.root)))
        self._erasures = ErasureFollower([self.root])  # see follow_erasures
        # Called when another process's erasure is seen (the facade drops what it keeps).
        self.on_rewritten: Callable[[], None] | None = None
        self._threads_lock = threading.Lock()
        renew_after_fork(self)

    # --- creation -------------------------------------------------------------------
    @classmethod
    def init(cls, root: Path, files: dict[str, bytes], *, actor: str, when: _dt.datetime,
             message: str, identity=None) -> "GitStore":
        root = Path(root)
        proc = subprocess.run(["git", "init", "-q", "-b", "main", str(root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise GitFailed(f"git init {root} failed: {proc.stderr.strip()}")
        store = cls(root, identity)
        for rel, data in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        index = store.repo.index
        for rel in files:
            index.add(rel)
        index.write()
        tree = index.write_tree()
        sig = signature(*store.identity(actor), when)
        store.repo.create_commit("HEAD", sig, signature(*COMMITTER, when), message, tree, [])
        return store

    def git(self, *args: str, input: bytes | None = None, check: bool = True, flush: bool | None = None) -> str:
        """git itself in the work tree. ``flush``: this process's deferred entries are written into
        git's index first (git may read it: status, stash, grep, checkout, filter-repo...), which
        takes the write lock; by default unless the command never reads the index
        (_INDEX_FREE_COMMANDS). A reader must not wait for the write lock: trust's catch-up ran
        `git log` under the search index's lock, flushing, while a forget holding the gate
        waited for that index lock."""
        if flush is None:
            flush = _subcommand(args) not in _INDEX_FREE_COMMANDS
        if flush:
            self.flush_index()
        proc = subprocess.run(["git", "-C", str(self.root), *args], input=input, capture_output=True)
        if check and proc.returncode != 0:
            raise GitFailed(f"{self.root}: git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode("utf-8", errors="replace")


# git commands that never read git's index (history, objects, refs, config, remotes).
_INDEX_FREE_COMMANDS = frozenset({"log", "show", "rev-list", "rev-parse", "merge-base", "ls-tree", "cat-file",
                                  "for-each-ref", "show-ref", "config", "remote", "fetch", "push"})


def _subcommand(args: tuple[str, ...]) -> str:
    """The git command in ``args`` past global options (``-c key=value``, ``-C path``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-c", "-C") else 1
    return args[i] if i < len(args) else ""
