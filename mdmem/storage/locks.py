"""Cross-process file locks (flock) whose timeout is an mdmem error (LockTimeout).

Our own, not filelock's: filelock 4 runs ~740 Python calls for one acquire and release (fork
bookkeeping, singletons, a soft-lock fallback), ~0.5-0.6 ms measured at 100k notes, which every
write paid once; an flock of an existing file here costs ~20 us (session 14)."""
from __future__ import annotations

import fcntl
import os
import shutil
import time
import weakref
from pathlib import Path
from typing import Any

from ..errors import LockTimeout


def lock_folder(path: Path) -> Path:
    """The folder for lock files (``.git/mdmem/locks``), made if missing. A file where it or the
    cache folder above it belongs is removed first: everything under the cache folder is disposable."""
    for folder in (path.parent, path):
        if os.path.lexists(folder) and not folder.is_dir():
            os.unlink(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Lock:
    """An exclusive lock on ``lock_file`` between processes (flock on a file made if missing).

    ``timeout`` (seconds; negative waits for ever) is the default of :meth:`acquire`, which
    polls every ``poll_interval`` and raises :class:`LockTimeout` naming the file. Nested
    acquires of one Lock count (released by as many releases). Two Lock objects on one file
    exclude each other, in one process too. A child forked while a Lock was held never unlocks
    it: the child's copy only closes its descriptor (an flock belongs to the open file, which
    parent and child share; unlocking it in the child would free the parent's lock)."""

    def __init__(self, lock_file: str | os.PathLike, timeout: float = -1) -> None:
        self.lock_file = str(lock_file)
        self.timeout = timeout
        self._fd: int | None = None
        self._pid = 0
        self._count = 0

    @property
    def is_locked(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    def acquire(self, timeout: float | None = None, poll_interval: float = 0.05) -> "Lock":
        if timeout is None:
            timeout = self.timeout
        if self.is_locked:
            self._count += 1
            return self
        self._forget_inherited()
        lock_file = Path(self.lock_file)
        if lock_file.is_dir() and not lock_file.is_symlink():
            shutil.rmtree(lock_file, ignore_errors=True)  # a folder where the lock file belongs: a cache to drop
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if 0 <= timeout and deadline <= time.monotonic():
                        raise LockTimeout(f"{self.lock_file}: another process held this lock for "
                                          f"{timeout:.0f}s; try again") from None
                    time.sleep(poll_interval)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid, self._count = fd, os.getpid(), 1
        return self

    def release(self) -> None:
        if not self.is_locked:
            self._forget_inherited()
            return
        self._count -= 1
        if self._count > 0:
            return
        fd, self._fd = self._fd, None
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _forget_inherited(self) -> None:
        """A descriptor inherited across a fork: closed here, never unlocked (the parent's)."""
        if self._fd is not None and self._pid != os.getpid():
            fd, self._fd, self._count = self._fd, None, 0
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def open_files() -> set[str] | None:
    """Every file some process on this machine has open (from /proc), or None where /proc
    cannot tell. Only called when a leftover is found (a git lock file, a temporary file),
    which is rare: it reads every process's fd table."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    out: set[str] = set()
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        fd_dir = proc / pid / "fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    out.add(os.readlink(fd_dir / fd))
                except OSError:
                    continue
        except OSError:
            continue  # gone, or not ours to look at
    return out


# --- forks ------------------------------------------------------------------------------
_RENEWED_AFTER_FORK: weakref.WeakSet = weakref.WeakSet()


def renew_after_fork(obj: Any) -> None:
    """Have ``obj.renew_after_fork()`` called in a child process right after a fork (it has
    one thread then). A thread lock that another thread held at the fork stays locked for
    ever in the child's copy, and a thread pool's threads are not in the child: a program
    that forks while mdmem works in a thread (multiprocessing's "fork", preloading servers)
    would wait out every lock timeout in the child (attack 7, F2)."""
    _RENEWED_AFTER_FORK.add(obj)


def _renew_in_child() -> None:
    for obj in list(_RENEWED_AFTER_FORK):
        obj.renew_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_in_child)
