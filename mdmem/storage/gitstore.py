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

import atexit
import contextlib
import datetime as _dt
import json
import os
import stat
import subprocess
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import shutil

import pygit2

from ..errors import BranchMoved, Conflict, GitFailed, LockTimeout
from .locks import Lock, open_files, pass_turnstile, renew_after_fork
from .queries import GitQueries, worktree_version
from .gitdir import (cache_dir, clear_cache_path, erasure_done_path, erasure_lock_path, erasure_turnstile_path,
                     file_stamp, locks_dir)

# A git lock file nobody holds open is stale once this old (git closes a ref lock a moment
# before renaming it, so a young unheld lock may still be a live writer's).
STALE_LOCK_SECONDS = 2.0
# Without /proc to ask who holds a lock open, only age can tell.
STALE_LOCK_SECONDS_BLIND = 30.0
LOCK_TIMEOUT_SECONDS = 60.0
LOCK_POLL_SECONDS = 0.005
WRITE_LOCK = "write.lock"  # in each worktree's lock folder (gitdir.locks_dir)
# A ref update that finds the ref locked (git pack-refs, gc, a person's git) retries this long.
REF_LOCK_RETRY_SECONDS = 10.0
PENDING_NAME = "mdmem-pending.json"
# git's index is one file rewritten whole on every update (libgit2 has no split index): ~5 ms
# at 10k notes, 60-300 ms at 100k. A long-lived process (the MCP server) sets
# GitStore.index_delay: a commit's index entries are then written this long after it (one
# rewrite for a burst of writes) by a timer thread, or before anything reads the index, or on
# close/exit; until then the journal lists them, and a kill is repaired on the next open.
INDEX_DELAY_SECONDS = 0.2
FLUSH_RETRIES = 8  # a failed flush of git's index is tried again after 0.2, 0.4, ... 5 s
_REF_READ_TRIES = 20
_OBJECT_WRITE_TRIES = 5
_COMMITTER = ("mdmem", "mdmem@localhost")


@dataclass(frozen=True)
class Trailers:
    op: str
    actor: str
    source: str
    evidence: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()

    def render(self) -> str:
        lines = [f"Memory-Op: {self.op}", f"Memory-Actor: {self.actor}", f"Memory-Source: {self.source}"]
        if self.evidence:
            lines.append(f"Memory-Evidence: {', '.join(self.evidence)}")
        lines += [f"{k}: {v}" for k, v in self.extra]
        return "\n".join(lines)


def parse_trailers(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in message.splitlines():
        if line.startswith("Memory-") and ": " in line:
            k, v = line.split(": ", 1)
            out[k[len("Memory-"):].lower()] = v.strip()
    return out


@dataclass(frozen=True)
class LogEntry:
    commit: str
    time: _dt.datetime
    author: str
    message: str
    blob: str | None  # the path's blob at this commit, None if deleted there
    email: str = ""  # the author's e-mail: who made the commit, as git records it

    @property
    def trailers(self) -> dict[str, str]:
        return parse_trailers(self.message)


def default_identity(actor: str) -> tuple[str, str]:
    return actor, f"{actor}@mdmem.invalid"


def _signature(name: str, email: str, when: _dt.datetime) -> pygit2.Signature:
    return pygit2.Signature(name, email, int(when.timestamp()), 0)


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


class GitStore(GitQueries):
    """One git repository holding memory notes (or, later, one scope root of them)."""

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
        # succeeds (a retry that worked left the old message behind, attack 15d).
        self.last_repair_error: str | None = None
        self.signing_key: str | None = None  # an SSH private key: sign every commit with it
        # Paths of this process's commits whose entries are not yet in git's index, written by
        # flush_index() index_delay seconds later (see INDEX_DELAY_SECONDS).
        # None (the default): with every commit, so git status is clean when a call returns.
        self.index_delay: float | None = None
        self._index_due: set[str] = set()
        self._flush_failures = 0  # flush_index's failures in a row (each tried again later)
        self._index_timer: threading.Timer | None = None
        # This repo's entry in _HOLDERS: the lock folder's real path (a symlink or `..` in the
        # way the repo was reached names the same lock).
        self._lock_key = os.path.realpath(self.lock_dir)
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
        self._erasure_done = erasure_done_path(self.root)
        self._erasures_seen = file_stamp(self._erasure_done)  # see follow_erasures
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
        sig = _signature(*store.identity(actor), when)
        store.repo.create_commit("HEAD", sig, _signature(*_COMMITTER, when), message, tree, [])
        return store

    # --- locking --------------------------------------------------------------------
    @contextmanager
    def locked(self, timeout: float | None = None, *, erasure: bool = False):
        """The repo's write lock; writers in several processes serialise on it. Taking it
        recovers git locks a dead writer left and replays an unfinished write's journal.
        ``timeout``: LOCK_TIMEOUT_SECONDS, read at the call (a default bound at definition made
        the module's value a dead letter: a test setting it to 0.2 s waited the whole 60).

        The erasure gate (gitdir.erasure_lock_path) is taken first: shared by writers, alone by
        an ``erasure``, which so waits for every worktree's writers and keeps them all out
        until it ends (its turnstile keeps new writers from taking turns on the gate meanwhile:
        :meth:`_enter_gate`). Everyone takes the gate before a write lock: no two wait on each
        other."""
        if timeout is None:
            timeout = LOCK_TIMEOUT_SECONDS
        if self.holds_lock():
            if erasure and not self._erasing:
                # The gate is held shared: taking it alone now could wait on itself.
                raise Conflict("an erasure must take the repository's locks first; it was started "
                               "inside another write of this thread")
            yield  # this thread holds it already (a flush of git's index inside a write)
            return
        clear_cache_path(self.cache_dir)
        path = self._write_lock  # Lock makes its folder
        # This process's threads queue on a thread lock first: one waiting behind another (a
        # write behind the deferred flush of git's index, two MCP calls) wakes the moment it
        # is released, not at the file lock's next poll (a remember at 100k waited 50 ms that way).
        if not self._threads_lock.acquire(timeout=timeout):
            raise LockTimeout(f"{path}: another thread of this process held this lock for {timeout:.0f}s; try again")
        try:
            gate = self._enter_gate(timeout, erasure)  # (with the turnstile, for an erasure)
            try:
                lock = Lock(path)
                # Another process's write: polled every LOCK_POLL_SECONDS (a try of flock costs ~us).
                lock.acquire(timeout=timeout, poll_interval=LOCK_POLL_SECONDS)  # LockTimeout names the file
                self._holder = _HOLDERS[self._lock_key] = threading.get_ident()
                self._trees, self._erasing = {}, erasure
                try:
                    self.follow_erasures()
                    try:
                        self.recover_stale_locks()
                        if not self._index_due and os.path.exists(self.repo.path + PENDING_NAME):
                            self.repair()  # another process's unfinished write (ours are due, not lost)
                    except Exception as exc:  # noqa: BLE001 -- a live git's lock: the journal stays for next time
                        self.last_repair_error = f"{type(exc).__name__}: {exc}"
                    yield
                finally:
                    self._holder, self._trees, self._erasing = None, None, False
                    _HOLDERS.pop(self._lock_key, None)
                    lock.release()
            finally:
                gate[0].release()
                self._leave_turnstile(gate[1:])
        finally:
            self._threads_lock.release()

    def _enter_gate(self, timeout: float, erasure: bool) -> list[Lock]:
        """The erasure gate, shared (a write) or alone (an erasure), and what to let go after
        the write lock. An erasure first takes the turnstile alone and keeps it: writers arriving
        then wait there, and those already past it end their writes and let the gate go. A
        writer passes the turnstile (locks.pass_turnstile: no file, no wait) before the gate."""
        gate_path, turnstile_path = self._gate
        held: list[Lock] = []
        if erasure:
            turnstile = Lock(turnstile_path)
            try:
                turnstile.acquire(timeout=timeout, poll_interval=LOCK_POLL_SECONDS)
            except LockTimeout:
                raise LockTimeout(f"{turnstile_path}: another erasure held it for {timeout:.0f}s; try again when "
                                  "it ends") from None
            held.append(turnstile)
        else:
            try:
                pass_turnstile(turnstile_path, timeout, LOCK_POLL_SECONDS)
            except LockTimeout:
                raise self._gate_timeout(turnstile_path, timeout, erasure) from None
        try:
            gate = Lock(gate_path, shared=not erasure)
            try:
                gate.acquire(timeout=timeout, poll_interval=LOCK_POLL_SECONDS)
            except LockTimeout:
                raise self._gate_timeout(gate_path, timeout, erasure) from None
            return [gate, *held]
        except BaseException:
            self._leave_turnstile(held)
            raise

    @staticmethod
    def _leave_turnstile(held: list[Lock]) -> None:
        """An erasure's turnstile (none for a writer): its file goes first (writers then find
        none to wait on, and those waiting wake as it is let go), then the lock."""
        for turnstile in held:
            with contextlib.suppress(OSError):
                os.unlink(turnstile.lock_file)
            turnstile.release()

    @staticmethod
    def _gate_timeout(path: str, timeout: float, erasure: bool) -> LockTimeout:
        if erasure:
            return LockTimeout(f"{path}: writers in this repository's worktrees held it for {timeout:.0f}s; the "
                               "erasure waits for every write in progress; try again")
        return LockTimeout(f"{path}: an erasure held it for {timeout:.0f}s (no worktree of the repository is "
                           "written while one runs); try again when it ends")

    def follow_erasures(self) -> None:
        """Another process's erasure ended since this store last looked (its stamp moved, one
        stat): what this process kept of the old history names commits that are gone. libgit2's
        object and pack lists included: it still found the erased tip in a pack gc had
        deleted, and a linked worktree's writer that waited for the erasure then failed every
        write with a raw NotFoundError (attack 15). The repository is opened anew and
        ``on_rewritten`` (the facade's caches) is told."""
        stamp = file_stamp(self._erasure_done)
        if stamp == self._erasures_seen:
            return
        self._erasures_seen = stamp
        self.repo = pygit2.Repository(str(self.root))
        self._index = None
        if self._trees is not None:
            self._trees = {}
        if self.on_rewritten is not None:
            self.on_rewritten()

    def renew_after_fork(self) -> None:
        """In a forked child: this process's thread lock and timer anew (locks.renew_after_fork).
        The thread that forked, if it was inside :meth:`locked`, can leave it as it entered;
        the file lock itself is the parent's alone (locks.Lock closes its descriptor in the
        child, so a parent killed mid-write frees it whatever the child does)."""
        self._threads_lock = threading.Lock()
        _HOLDERS.clear()  # in the child only a store's own record counts (attack 9, F3/F4)
        if self._holder == threading.get_ident():
            self._threads_lock.acquire()  # the forking thread is inside locked(): it releases this one
        else:
            self._holder = None
        self._index_timer = None

    def holds_lock(self) -> bool:
        """Whether the calling thread holds the repo's write lock (in-process caches may then
        change what they hold in place: no other writer can run until it is released)."""
        me = threading.get_ident()
        return self._holder == me or _HOLDERS.get(self._lock_key) == me

    def _git_lock_files(self) -> list[Path]:
        # With strings and os.path: every write looks (pathlib's parsing made it ~0.2 ms a write).
        git_dir = self.repo.path
        out = [git_dir + "index.lock", git_dir + "packed-refs.lock", git_dir + "HEAD.lock"]
        out += [os.path.join(dirpath, name) for dirpath, _, names in os.walk(git_dir + "refs/heads")
                for name in names if name.endswith(".lock")]
        return [Path(p) for p in out if os.path.exists(p)]

    def recover_stale_locks(self) -> list[str]:
        """Remove git lock files a dead writer left (a kill, a crash). Call under the repo lock.

        A lock is stale when no process has it open and it is older than a moment (git keeps
        its lock file open while it writes it), or, where /proc cannot say who holds it, when
        it is older than ``STALE_LOCK_SECONDS_BLIND``. A live writer's lock is never removed:
        the caller waits for it (ref updates retry) instead."""
        removed = []
        locks = self._git_lock_files()
        if not locks:
            return removed
        held = open_files()
        for path in locks:
            path = Path(os.path.realpath(path))
            try:
                age = time.time() - path.lstat().st_mtime
            except FileNotFoundError:
                continue
            stale = (age > STALE_LOCK_SECONDS and str(path) not in held) if held is not None \
                else age > STALE_LOCK_SECONDS_BLIND
            if stale:
                path.unlink(missing_ok=True)
                removed.append(str(path))
        return removed

    # --- reading --------------------------------------------------------------------
    def branch_ref(self) -> str:
        """The branch HEAD names (refs/heads/main). mdmem writes to a branch only: on a
        detached HEAD (someone looking at an old state) every write is refused up front."""
        if self.repo.head_is_detached:
            raise Conflict(f"{self.root}: HEAD is detached (at {str(self.repo.head.target)[:10]}); mdmem writes "
                           "to a branch: check out your branch first (git checkout main)")
        return self.repo.lookup_reference("HEAD").target  # symbolic: refs/heads/main

    def head(self) -> str | None:
        """The branch tip, None before the first commit. git pack-refs moving the ref from
        its loose file into packed-refs can make one read miss it: read again then."""
        for attempt in range(_REF_READ_TRIES):
            try:
                return str(self.repo.head.target)
            except pygit2.GitError:
                if self.repo.head_is_unborn:
                    return None
                time.sleep(0.002 * (attempt + 1))
        return str(self.repo.head.target)

    def blob_id(self, path: str, rev: str | None = None) -> str | None:
        commit = (self.repo.revparse_single(rev) if rev else self.repo[self.head()]).peel(pygit2.Commit)
        entry = self._entry(commit.tree, path)
        return str(entry.id) if entry is not None and entry.type_str == "blob" else None  # a folder: none

    def _tree(self, oid: pygit2.Oid) -> pygit2.Tree:
        """The tree ``oid``; read once per write by the thread holding the write lock (trees
        never change under an id: what is kept is only ever reused, and dropped with the lock)."""
        memo = self._trees
        if memo is None or self._holder != threading.get_ident():
            return self.repo[oid]
        tree = memo.get(oid)
        if tree is None:
            tree = memo[oid] = self.repo[oid]
        return tree

    def _entry(self, tree: pygit2.Tree, path: str):
        """The entry at ``path`` under ``tree`` (a file or folder), None if absent; each folder
        on the way through :meth:`_tree`."""
        *folders, base = path.split("/")
        for name in folders:
            if name not in tree:
                return None
            entry = tree[name]
            if entry.type_str != "tree":
                return None
            tree = self._tree(entry.id)
        return tree[base] if base in tree else None

    def blob_ids(self, paths, rev: str | None = None) -> dict[str, str | None]:
        """:meth:`blob_id` for many paths at once, each folder's tree read once. A batch of
        1,000 new notes looked up one by one re-read the big subject folders' trees every
        time (libgit2 caches no tree over 4 KB): ~2 ms a path at 10k notes."""
        head = rev or self.head()
        if head is None:
            return dict.fromkeys(paths)
        return _tree_blob_ids(self.repo.revparse_single(head).peel(pygit2.Tree), paths, load=self._tree)

    def file_in(self, rev: str, path: str) -> bytes | None:
        """A file's bytes in the tree of ``rev`` (a commit or a tree id), None if absent."""
        try:
            entry = self.repo[rev].peel(pygit2.Tree)[path]
        except KeyError:
            return None
        return self.repo[entry.id].data if entry.type_str == "blob" else None

    def is_link_in(self, rev: str, path: str) -> bool:
        """Whether ``path`` in the tree of ``rev`` is a symbolic link (its blob is the target)."""
        try:
            return self.repo[rev].peel(pygit2.Tree)[path].filemode == pygit2.GIT_FILEMODE_LINK
        except KeyError:
            return False

    def folders_in(self, rev: str, folder: str) -> list[str]:
        """Names of the sub-folders of ``folder`` in the tree of ``rev`` (commit or tree id)."""
        tree = self.repo[rev].peel(pygit2.Tree)
        try:
            entry = tree[folder]
        except KeyError:
            return []
        if entry.type_str != "tree":
            return []
        return [e.name for e in self.repo[entry.id] if e.type_str == "tree"]

    def read_blob(self, oid: str) -> bytes:
        return self.repo[oid].data

    def read_at(self, path: str, rev: str) -> bytes | None:
        oid = self.blob_id(path, rev)
        return None if oid is None else self.read_blob(oid)

    def worktree_blob_id(self, path: str) -> str | None:
        """The blob id of the regular file at ``path``; None if there is none; a marker that
        matches no blob for a symlink, folder or device (never followed or read)."""
        full = self.root / path
        try:
            mode = full.lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(mode):
            return "not-a-file"
        return worktree_version(full.read_bytes())

    def last_change(self, rev: str, path: str) -> tuple[str, str] | None:
        """(commit, author e-mail) of the newest commit in ``rev``'s history that changed ``path``
        (git log's history simplification: a merge that took one parent's version is skipped)."""
        out = self.git("log", "-1", "--format=%H%x1f%ae", rev, "--", path, check=False).strip()
        commit, sep, email = out.partition("\x1f")
        return (commit, email) if sep else None

    def parents(self, commit: str) -> list[str]:
        return [str(p) for p in self.repo[commit].parent_ids]

    def writers(self, base: str, tip: str, prefixes: tuple[str, ...]) -> dict[str, list[tuple[str, str, str | None]]]:
        """For the commits in ``tip``'s history that ``base``'s does not hold: path -> [(commit,
        author e-mail, the blob id it wrote or None for a deletion)], newest first (topological
        order). A merge counts only for paths whose version differs from every parent's (git's
        combined diff: what the merge itself made, not what it took). One git call answers for
        every path (a `git log -1` per path: a merge of 1,000 notes took 18-20 s at load ~17)."""
        out = self.git("log", "--topo-order", "-c", "--raw", "--no-abbrev", "--no-renames", "--format=%x1e%H%x1f%ae",
                       f"{base}..{tip}", "--", *prefixes, check=False)
        found: dict[str, list[tuple[str, str, str | None]]] = {}
        for record in out.split("\x1e"):
            lines = record.strip("\n").splitlines()
            if not lines or "\x1f" not in lines[0]:
                continue
            commit, email = lines[0].split("\x1f", 1)
            for line in lines[1:]:
                meta, tab, path = line.partition("\t")
                if not meta.startswith(":") or not tab:
                    continue
                blob = meta.split()[-2]  # the version this commit made: the last id before the status
                found.setdefault(path, []).append((commit, email, None if blob.strip("0") == "" else blob))
        return found

    def git(self, *args: str, input: bytes | None = None, check: bool = True, flush: bool | None = None) -> str:
        """git itself in the work tree. ``flush``: this process's deferred entries are written into
        git's index first (git may read it: status, stash, grep, checkout, filter-repo...), which
        takes the write lock; by default unless the command never reads the index
        (_INDEX_FREE_COMMANDS). A reader must not wait for the write lock: trust's catch-up ran
        `git log` under the search index's lock, flushing, while a forget holding the gate
        waited for that index lock (attack 15c)."""
        if flush is None:
            flush = _subcommand(args) not in _INDEX_FREE_COMMANDS
        if flush:
            self.flush_index()
        proc = subprocess.run(["git", "-C", str(self.root), *args], input=input, capture_output=True)
        if check and proc.returncode != 0:
            raise GitFailed(f"{self.root}: git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode("utf-8", errors="replace")

    def log(self, path: str | None = None, rev: str = "HEAD") -> list[LogEntry]:
        """Commits touching ``path`` newest first, with the path's blob at each."""
        if rev == "HEAD" and self.head() is None:
            return []  # no commit yet: no history (git log would fail)
        fmt = "%H%x1f%at%x1f%an%x1f%ae%x1f%B%x1e"
        # --full-history: a merge that kept one side's version must not hide the other
        # side's (sync keeps the superseded version of a conflicting pair in history).
        args = ["log", "--full-history", f"--format={fmt}", rev]
        if path:
            args += ["--", path]
        out = self.git(*args)  # a failing git is GitFailed, never "no history"
        entries = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, ts, author, email, message = record.split("\x1f", 4)
            when = _dt.datetime.fromtimestamp(int(ts), _dt.timezone.utc)
            blob = self.blob_id(path, sha) if path else None
            entries.append(LogEntry(sha, when, author, message.strip(), blob, email))
        return entries

    def changes_by_commit(self, rev: str, since: str | None = None, prefixes: tuple[str, ...] = ("team", "private"),
                          ) -> list[tuple[str, str, list[tuple[str, str]], list[str]]]:
        """(commit, author e-mail, [(status, path)], its parents) for each commit on
        ``rev``'s first-parent line after ``since`` (all of history without it), oldest first.
        Merges count as changes against their first parent (what the merge made current here;
        verify asks who wrote each such version)."""
        rng = f"{since}..{rev}" if since else rev
        out = self.git("log", "--first-parent", "-m", "--reverse", "--no-renames", "--name-status",
                       "--format=%x1e%H%x1f%ae%x1f%P", rng, "--", *prefixes, check=False)
        result = []
        for record in out.split("\x1e"):
            lines = record.strip("\n").splitlines()
            if not lines:
                continue
            commit, email, parents = lines[0].split("\x1f", 2)
            files = []
            for line in lines[1:]:
                status, _, path = line.partition("\t")
                if path:
                    files.append((status[:1], path))
            result.append((commit, email, files, parents.split()))
        return result

    def is_ancestor(self, older: str, newer: str) -> bool:
        """False also when either commit is gone (an erasure in another process rewrote
        history; this handle may still list the pruned objects until they are read)."""
        try:
            if older not in self.repo or newer not in self.repo:
                return False
            return older == newer or self.repo.descendant_of(newer, older)
        except pygit2.GitError:
            return False

    def signatures(self, commits: list[str], allowed_signers: bytes | None) -> dict[str, tuple[str, str]]:
        """commit -> (git's %G? status letter, signer principal), checked against an allowed-signers
        file given as bytes (written to a scratch file inside .git/, removed after)."""
        if not commits:
            return {}
        scratch = Path(self.repo.path) / "mdmem-allowed-signers"
        scratch.write_bytes(allowed_signers or b"")
        try:
            out = self.git("-c", f"gpg.ssh.allowedSignersFile={scratch}", "log", "--no-walk=unsorted",
                           "--format=%H%x1f%G?%x1f%GS", *commits, check=False)
        finally:
            scratch.unlink(missing_ok=True)
        found = {}
        for line in out.splitlines():
            parts = line.split("\x1f")
            if len(parts) == 3:
                found[parts[0]] = (parts[1], parts[2])
        return found

    def branches(self, prefix: str) -> list[str]:
        return sorted(name for name in self.repo.branches.local if name.startswith(prefix))

    # --- writing --------------------------------------------------------------------
    def _edit_tree(self, tree: pygit2.Tree | None,
                   edits: dict[tuple[str, ...], tuple[pygit2.Oid, int] | None]) -> pygit2.Oid | None:
        """A copy of ``tree`` with each path set to its (blob, mode) (or removed), every changed
        tree written once; None if the tree ends up empty."""
        builder = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        groups: dict[str, dict[tuple[str, ...], tuple[pygit2.Oid, int] | None]] = {}
        for parts, blob in edits.items():
            name = parts[0]
            if len(parts) == 1:
                if blob is None:
                    if tree is not None and name in tree:
                        builder.remove(name)
                else:
                    builder.insert(name, *blob)
            else:
                groups.setdefault(name, {})[parts[1:]] = blob
        for name, sub_edits in groups.items():
            existing = tree[name] if tree is not None and name in tree else None
            sub = self._tree(existing.id) if existing is not None and existing.type_str == "tree" else None
            new_sub = self._edit_tree(sub, sub_edits)
            if new_sub is None:
                if existing is not None:
                    builder.remove(name)
            else:
                builder.insert(name, new_sub, pygit2.GIT_FILEMODE_TREE)
        if len(builder) == 0:
            return None
        return builder.write()

    def _tree_with(self, base: pygit2.Tree | None, changes: dict[str, bytes | None]) -> pygit2.Oid:
        edits = {tuple(path.split("/")): ((self.repo.create_blob(data), mode_of(data)) if data is not None else None)
                 for path, data in changes.items()}
        oid = self._edit_tree(base, edits)
        return oid if oid is not None else self.repo.TreeBuilder().write()

    def signed_commit(self, author, committer, message: str, tree, parents) -> pygit2.Oid:
        """A commit signed with git's SSH signing (``ssh-keygen -Y sign -n git``), as
        ``git commit -S`` with gpg.format=ssh would make it."""
        content = self.repo.create_commit_string(author, committer, message, tree, parents)
        proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(self.signing_key)],
                              input=content.encode("utf-8"), capture_output=True)
        if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
            raise GitFailed(f"signing: ssh-keygen could not sign with {self.signing_key}: "
                             f"{proc.stderr.decode(errors='replace').strip()}")
        return self.repo.create_commit_with_signature(content, proc.stdout.decode("ascii"))

    def commit(self, changes: dict[str, bytes | None], message: str, *, actor: str,
               when: _dt.datetime, branch: str | None = None, worktree: bool = True,
               author: tuple[str, str] | None = None, merge_parent: str | None = None,
               expect_tip: str | None = None) -> str:
        """One commit of ``changes`` (path -> bytes, or None to delete) on ``branch``.

        The author is ``author`` (name, email) when given (a person's own git identity),
        else the acting user's identity from ``[people]``. ``merge_parent`` makes it a merge
        commit (its tree is still the tip's tree with ``changes``); ``expect_tip`` refuses
        (BranchMoved) unless the branch is still there.

        Call under :meth:`locked`. The branch moves by compare-and-swap; if it moved
        since we read its tip, :class:`BranchMoved` is raised and nothing was changed.
        """
        ref_name = branch or self.branch_ref()
        ref = self._lookup_ref(ref_name)
        parent = self.repo[ref.target] if ref is not None else None
        if expect_tip is not None and (parent is None or str(parent.id) != expect_tip):
            raise BranchMoved(f"{ref_name} moved since {expect_tip[:10]}; nothing was written")
        author_sig = _signature(*(author or self.identity(actor)), when)
        committer = _signature(*_COMMITTER, when)
        for attempt in range(_OBJECT_WRITE_TRIES):
            try:
                tree = self._tree_with(parent.tree if parent is not None else None, changes)
                parents = [parent.id] if parent is not None else []
                if merge_parent is not None:
                    parents.append(pygit2.Oid(hex=merge_parent))
                if self.signing_key:
                    oid = self.signed_commit(author_sig, committer, message, tree, parents)
                else:
                    oid = self.repo.create_commit(None, author_sig, committer, message, tree, parents)
                break
            except OSError:
                # A person's `git gc` (prune-packed) removes an empty objects/xx folder
                # between libgit2 making it and renaming an object into it: write again.
                if attempt == _OBJECT_WRITE_TRIES - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        to_worktree = worktree and ref_name == self.branch_ref()
        if to_worktree:
            self._journal(changes, parent)
        self._move_ref(ref, ref_name, oid, message)
        # The branch has moved: the write is acknowledged. Nothing below may raise; what
        # fails here stays in the journal and is repaired before the next write or open.
        if to_worktree:
            try:
                if self.index_delay is None:
                    self._sync_worktree(changes)
                    self._unjournal(changes)  # another process's deferred entries stay listed
                else:
                    self._write_files(changes)
            except Exception as exc:  # noqa: BLE001 -- anything: the commit stands
                self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return str(oid)

    def _write_files(self, changes: dict[str, bytes | None]) -> None:
        """The work tree now; git's index entries later (flush_index), the journal keeping them."""
        folders: set[str] = set()
        for path, data in changes.items():
            self._write_file(path, data, folders)
            self._index_due.add(path)
        if self._index_timer is None:
            self._flush_failures = 0
            self._arm_flush(self.index_delay or 0.0)

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
        git status stayed dirty until some later write, attack 15c), and stays in the journal
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
                    try:
                        entry = tree[path] if tree is not None else None
                    except KeyError:
                        entry = None
                    if self._staged_by_a_person(index, path, entry, before):
                        continue
                    if entry is None:
                        if path in index:
                            index.remove(path)
                    elif self.worktree_blob_id(path) == str(entry.id):
                        stage(index, path)  # with the file's stat data: git status need not hash it
                    else:  # a person changed the file since (or a link): the index follows HEAD
                        stage(index, pygit2.IndexEntry(path, entry.id, entry.filemode))
                index.write()
                self._unjournal(due)
                due = set()
            self._flush_failures = 0
            self.last_repair_error = None
        except Exception as exc:  # noqa: BLE001 -- the journal keeps them; repair finishes
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
            self._index_due |= due
            # No timer left behind (a LockTimeout before the flush cleared it kept the finished
            # one, and no later write armed another: attack 15d).
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
        (a retried flush staged HEAD's over a person's `git add`: attack 15d)."""
        staged = str(index[path].id) if path in index else None
        want = str(entry.id) if entry is not None else None
        if staged == want or staged == before.get(path, staged):
            return False
        return self.worktree_blob_id(path) != want

    def _lookup_ref(self, name: str):
        """The reference, or None if it does not exist (read again if pack-refs hid it)."""
        for attempt in range(_REF_READ_TRIES):
            try:
                return self.repo.lookup_reference(name)
            except (KeyError, pygit2.GitError):
                if name != self.branch_ref() and name not in self.repo.references:
                    return None
                if name == self.branch_ref() and self.repo.head_is_unborn:
                    return None
                time.sleep(0.002 * (attempt + 1))
        return self.repo.lookup_reference(name)

    def _move_ref(self, ref, ref_name: str, oid, message: str) -> None:
        """Compare-and-swap the branch to ``oid``. A ref locked by someone else (pack-refs,
        gc, a person's git) is waited for, and a dead writer's lock recovered; a ref that
        moved raises BranchMoved (nothing was written)."""
        deadline = time.monotonic() + REF_LOCK_RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                if ref is None:
                    self.repo.references.create(ref_name, oid)
                else:
                    ref.set_target(oid, f"mdmem: {message.splitlines()[0]}")
                return
            except OSError as exc:  # libgit2: "failed to lock file ... for writing"
                if time.monotonic() > deadline:
                    raise LockTimeout(f"{ref_name}: locked by another git process for "
                                   f"{REF_LOCK_RETRY_SECONDS:.0f}s; nothing was written ({exc})") from None
                self.recover_stale_locks()
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            except (pygit2.GitError, ValueError) as exc:
                raise BranchMoved(f"{ref_name} moved while writing; nothing was written ({exc})") from None

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
            paths.update(_tree_blob_ids(parent.tree, new, blobs_only=False, load=self._tree))
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
            try:
                entry = tree[path]
                want = str(entry.id)
            except KeyError:
                entry, want = None, None
            full = self.root / path
            full.with_name(f".{full.name}.mdmem-tmp").unlink(missing_ok=True)
            have = self.worktree_blob_id(path)
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

    def fast_forward(self, target: str, *, expect_tip: str, why: str = "fast-forward") -> dict[str, bytes | None]:
        """Move the branch from ``expect_tip`` to ``target`` (compare-and-swap; its descendant, or
        with ``why`` another history that replaces it) and bring the changed paths of the work
        tree and index along. Returns the changes."""
        ref_name = self.branch_ref()
        ref = self._lookup_ref(ref_name)
        if ref is None or str(ref.target) != expect_tip:
            raise BranchMoved(f"{ref_name} moved since {expect_tip[:10]}; nothing was changed")
        changes = self.tree_changes(expect_tip, target)
        self._journal(changes, self.repo[expect_tip].peel(pygit2.Commit))
        self._move_ref(ref, ref_name, pygit2.Oid(hex=target), f"{why} to {target[:10]}")
        try:
            self._sync_worktree(changes)
            self._unjournal(changes)
        except Exception as exc:  # noqa: BLE001 -- the branch moved; repair finishes the work tree
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return changes

    def tree_changes(self, old: str | None, new: str) -> dict[str, bytes | None]:
        """path -> bytes (None: deleted) taking the tree of ``old`` to that of ``new``
        (commit or tree ids)."""
        new_tree = self.repo[new].peel(pygit2.Tree)
        old_tree = self.repo[old].peel(pygit2.Tree) if old else None
        diff = self.repo.diff(old_tree, new_tree) if old_tree is not None else new_tree.diff_to_tree(swap=True)
        out: dict[str, bytes | None] = {}
        for delta in diff.deltas:
            if delta.status_char() == "D":
                out[delta.old_file.path] = None
            else:
                if delta.old_file.path != delta.new_file.path:
                    out[delta.old_file.path] = None
                out[delta.new_file.path] = with_mode(self.repo[delta.new_file.id].data, delta.new_file.mode)
        return out

    def amend_head(self, changes: dict[str, bytes | None], reflog: str) -> str:
        """Replace the branch tip by a commit with the same parents, authors and message and
        ``changes`` applied (a merge commit whose views must be regenerated). Call under
        :meth:`locked`; the branch moves by compare-and-swap like :meth:`commit`."""
        ref_name = self.branch_ref()
        ref = self._lookup_ref(ref_name)
        head = self.repo[ref.target].peel(pygit2.Commit)
        tree = self._tree_with(head.tree, changes)
        oid = self.repo.create_commit(None, head.author, head.committer, head.message, tree, head.parent_ids)
        self._journal(changes, head)
        self._move_ref(ref, ref_name, oid, reflog)
        try:
            self._sync_worktree(changes)
            self._unjournal(changes)
        except Exception as exc:  # noqa: BLE001 -- the commit stands; repair finishes the work tree
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return str(oid)

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

    def delete_branch(self, name: str) -> None:
        branch = self.repo.branches.local.get(name)
        if branch is not None:
            branch.delete()

    def maybe_gc(self) -> None:
        """Objects written in process stay loose; let git pack them now and then. Never
        raises (it runs after a write was acknowledged). The gc runs in a process of its own
        that takes the repo lock first, so it never holds a ref lock a write needs."""
        try:
            head = self.head()
            if head and head.startswith("00"):
                self.housekeep_in_background()
        except Exception:  # noqa: BLE001 -- housekeeping must not fail a write
            pass

    def housekeep_in_background(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-I", "-m", "mdmem.storage.housekeeping", str(self.root)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def housekeep(self, *, force: bool = False) -> None:
        """git gc (and with it pack-refs) under the repo lock; in the foreground (gc.autoDetach
        would run it on after the lock is released)."""
        with self.locked():
            self.git("-c", "gc.autoDetach=false", "gc", "--quiet", *([] if force else ["--auto"]))


# Stores with index entries due, flushed at exit (a process that never closes its repo).
_OPEN_STORES: "weakref.WeakSet[GitStore]" = weakref.WeakSet()

# Which thread of this process holds each repo's write lock (by lock folder), whatever GitStore
# took it: a store made while the lock is held (an erasure reloads its repo mid-way) would
# otherwise wait for the lock its own thread holds. Cleared in a forked child (renew_after_fork),
# where only the store the forking thread locked through still holds it.
_HOLDERS: dict[str, int] = {}



def stage(index: pygit2.Index, entry: str | pygit2.IndexEntry) -> None:
    """``index.add(entry)`` (a work-tree path, or an entry), first dropping what git's own
    ``update-index --replace`` drops: entries under the path (a folder stood there) and a file
    at a folder on its way. libgit2 keeps them, and git then refuses every commit ("you have
    both X and X/a"): a view path committed as a folder did that after mdmem's next write
    (attack 14)."""
    path = entry if isinstance(entry, str) else entry.path
    index.remove_directory(path)
    parts = path.split("/")
    for end in range(1, len(parts)):
        folder = "/".join(parts[:end])
        if folder in index:
            index.remove(folder)
    index.add(entry)


def _tree_blob_ids(tree: pygit2.Tree, paths, *, blobs_only: bool = True,
                   load: Callable[[pygit2.Oid], pygit2.Tree] | None = None) -> dict[str, str | None]:
    """Each path's entry id in ``tree`` (None if absent; with ``blobs_only``, None for a
    folder too), every folder on the way read once for all of them (through ``load``, the
    store's per-write trees, when given)."""
    folders: dict[str, pygit2.Tree | None] = {"": tree}

    def folder(name: str) -> pygit2.Tree | None:
        if name not in folders:
            parent_name, _, base = name.rpartition("/")
            parent = folder(parent_name)
            entry = parent[base] if parent is not None and base in parent else None
            is_tree = entry is not None and entry.type_str == "tree"
            folders[name] = (load(entry.id) if load is not None else entry) if is_tree else None
        return folders[name]

    out: dict[str, str | None] = {}
    for path in paths:
        parent_name, _, base = path.rpartition("/")
        sub = folder(parent_name)
        entry = sub[base] if sub is not None and base in sub else None
        out[path] = None if entry is None or (blobs_only and entry.type_str != "blob") else str(entry.id)
    return out


# git commands that never read git's index (history, objects, refs, config, remotes).
_INDEX_FREE_COMMANDS = frozenset({"log", "show", "rev-list", "rev-parse", "merge-base", "ls-tree", "cat-file",
                                  "for-each-ref", "show-ref", "config", "remote", "fetch", "push"})


def _subcommand(args: tuple[str, ...]) -> str:
    """The git command in ``args`` past global options (``-c key=value``, ``-C path``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-c", "-C") else 1
    return args[i] if i < len(args) else ""


def _flush_later(ref) -> None:
    store = ref()
    if store is not None:
        store.flush_index()


@atexit.register
def _flush_at_exit() -> None:
    for store in list(_OPEN_STORES):
        store.flush_index()


