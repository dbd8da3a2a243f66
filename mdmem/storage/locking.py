"""A store's write lock and the erasure gate: one writer at a time per repository, an erasure alone."""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path


import pygit2

from ..errors import Conflict, LockTimeout
from .locks import Lock, leave_turnstile, open_files, pass_turnstile
from .gitdir import clear_cache_path
from .repair import PENDING_NAME


# A git lock file nobody holds open is stale once this old (git closes a ref lock a moment
# before renaming it, so a young unheld lock may still be a live writer's).
STALE_LOCK_SECONDS = 2.0


# Without /proc to ask who holds a lock open, only age can tell.
STALE_LOCK_SECONDS_BLIND = 30.0


LOCK_TIMEOUT_SECONDS = 60.0


LOCK_POLL_SECONDS = 0.005


WRITE_LOCK = "write.lock"  # in each worktree's lock folder (gitdir.locks_dir)


# Which thread of this process holds each repo's write lock (by lock folder), whatever GitStore
# took it: a store made while the lock is held (an erasure reloads its repo mid-way) would
# otherwise wait for the lock its own thread holds. Cleared in a forked child (renew_after_fork),
# where only the store the forking thread locked through still holds it.
_HOLDERS: dict[str, int] = {}


class StoreLocking:
    """GitStore's locking methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

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

    @contextmanager
    def beside_writers(self, timeout: float | None = None):
        """The erasure gate held as a writer holds it (shared), without the write lock: work
        that may run while others write but never while an erasure runs (packing objects)."""
        gate = self._enter_gate(LOCK_TIMEOUT_SECONDS if timeout is None else timeout, False)
        try:
            yield
        finally:
            gate[0].release()

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
            leave_turnstile(turnstile)

    @staticmethod
    def _gate_timeout(path: str, timeout: float, erasure: bool) -> LockTimeout:
        if erasure:
            return LockTimeout(f"{path}: writers in this repository's worktrees held it for {timeout:.0f}s; the "
                               "erasure waits for every write in progress; try again")
        return LockTimeout(f"{path}: an erasure held it for {timeout:.0f}s (no worktree of the repository is "
                           "written while one runs); try again when it ends")

    def follow_erasures(self) -> bool:
        """Another process's erasure ended since this store last looked (storage/erasures_seen.py:
        one stat): what this process kept of the old history names commits that are gone.
        libgit2's object and pack lists included: it still found the erased tip in a pack gc had
        deleted, and a linked worktree's writer that waited for the erasure then failed every
        write with a raw NotFoundError. The repository is opened anew and ``on_rewritten`` (the
        facade's caches) is told. True if it saw one."""
        if not self._erasures.ended():
            return False
        self.repo = pygit2.Repository(str(self.root))
        self._index = None
        if self._trees is not None:
            self._trees = {}
        if self.on_rewritten is not None:
            self.on_rewritten()
        return True

    def renew_after_fork(self) -> None:
        """In a forked child: this process's thread lock and timer anew (locks.renew_after_fork).
        The thread that forked, if it was inside :meth:`locked`, can leave it as it entered;
        the file lock itself is the parent's alone (locks.Lock closes its descriptor in the
        child, so a parent killed mid-write frees it whatever the child does)."""
        self._threads_lock = threading.Lock()
        _HOLDERS.clear()  # in the child only a store's own record counts
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
