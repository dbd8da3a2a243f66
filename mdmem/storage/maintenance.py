"""Housekeeping a store asks for now and then, in a background process: loose objects packed
beside writers, then gc --auto under the lock."""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from .background import start_in_background
from .gitdir import housekeeping_lock_path
from .locks import Lock, leave_turnstile, pass_turnstile

# git gc --auto repacks everything once there are gc.autoPackLimit (50) packs, under the lock;
# pack_objects makes them one before that, beside writers.
MANY_PACKS = 40


@contextmanager
def housekeeping_lock(root: Path, *, shared: bool, timeout: float):
    """The repository's housekeeping lock (gitdir.housekeeping_lock_path): alone for
    housekeeping, ``shared`` for readers who need objects/ to hold still (a proof). Beside it a
    turnstile, as at the erasure gate: housekeeping holds it alone from before it waits, and a
    proof passes it before taking the lock, so proofs that keep overlapping (anyone may run
    one) cannot keep housekeeping out for ever."""
    lock_path = housekeeping_lock_path(root)
    turnstile = lock_path.with_name("housekeeping-waiting.lock")
    waiting = None
    if shared:
        pass_turnstile(str(turnstile), timeout)
    else:
        waiting = Lock(turnstile).acquire(timeout=timeout)
    try:
        lock = Lock(lock_path, shared=shared).acquire(timeout=timeout)
        try:
            yield
        finally:
            lock.release()
    finally:
        if waiting is not None:
            leave_turnstile(waiting)


class Housekeeping:
    """GitStore's housekeeping methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

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
        """Start housekeeping in a process of its own; :meth:`wait_for_housekeeping` (a
        library close) waits for it, a CLI call lets it run on, as git's detached gc does."""
        self.housekeepers = [p for p in self.housekeepers if p.poll() is None]
        proc = start_in_background([sys.executable, "-I", "-m", "mdmem.storage.housekeeping", str(self.root)])
        self.housekeepers.append(proc)
        return proc

    def wait_for_housekeeping(self) -> None:
        """Wait for the housekeeping this store started: once a library caller closes the store,
        nothing of mdmem's writes under it any more (a folder removed right after a close
        failed with "Directory not empty" while a repack wrote a pack into .git).

        Not while this thread holds the repo's locks: housekeeping waits for the erasure gate,
        so a forget that closes its repo under the gate waited out housekeeping's 60 s lock
        timeout. They stay listed for a close made after the locks are let go."""
        if self.holds_lock():
            return
        while self.housekeepers:
            self.housekeepers.pop().wait()

    def housekeep(self, *, force: bool = False) -> None:
        """Pack the loose objects beside writers (:meth:`pack_objects`), then git gc (and with
        it pack-refs) under the repo lock; in the foreground (gc.autoDetach would run it on
        after the lock is released). With the objects packed first, gc --auto mostly finds
        nothing left to do: it packed ~2,000 objects under the lock before, and a server's
        writes waited for it (remember p99 25 s over a 10-minute run)."""
        with housekeeping_lock(self.root, shared=False, timeout=-1):
            self.pack_objects()
            with self.locked():
                self.git("-c", "gc.autoDetach=false", "gc", "--quiet", *([] if force else ["--auto"]))

    def pack_objects(self, timeout: float | None = None) -> None:
        """Loose objects reachable from any ref into a new pack (`git repack -d`), while writers
        go on: packing takes no ref lock and deletes only loose objects a pack now holds, so a
        write's new objects are never touched. Past MANY_PACKS, the packs are made one (-A:
        an object no ref reaches is kept loose, never dropped, in case a write racing the repack
        reuses it). Erasures are kept out (the gate, shared as a writer holds it): a repack
        reading an old pack while an erasure prunes could write erased objects back."""
        with self.beside_writers(timeout):
            packs = [p for p in os.listdir(os.path.join(self.repo.path, "objects", "pack")) if p.endswith(".pack")]
            # flush=False: a flush of git's index takes the write lock this work does without.
            self.git("repack", "-d", "-q", "-n", *(["-A"] if len(packs) > MANY_PACKS else []), flush=False)
