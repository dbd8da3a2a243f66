"""Cross-process file locks (flock) whose timeout is an mdmem error (LockTimeout).

Our own, not filelock's: filelock 4 runs ~740 Python calls for one acquire and release (fork
bookkeeping, singletons, a soft-lock fallback), ~0.5-0.6 ms measured at 100k notes, which every
write paid once; an flock of an existing file here costs ~20 us."""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from ..errors import LockTimeout


def lock_folder(path: Path) -> Path:
    """The folder for lock files (``.git/mdmem-locks``, gitdir.locks_dir), made if missing.
    Anything else at its path (a file, a link) is removed first: the path is mdmem's own, and a
    link would send the lock files elsewhere."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    except (FileNotFoundError, IsADirectoryError):
        pass  # gone, or a folder again: another process is at it too
    try:
        os.mkdir(path)
    except (FileExistsError, FileNotFoundError):
        pass  # made, or removed, by another process meanwhile: the lock's open tries again
    return Path(path)


class Lock:
    """An exclusive lock on ``lock_file`` between processes (flock on a file made if missing).

    ``timeout`` (seconds; negative waits for ever) is the default of :meth:`acquire`, which
    polls every ``poll_interval`` and raises :class:`LockTimeout` naming the file. Nested
    acquires of one Lock count (released by as many releases). Two Lock objects on one file
    exclude each other, in one process too. ``shared``: any number of shared holders at once,
    none while an exclusive one holds it (the erasure gate, gitdir.erasure_lock_path).

    Forks: an flock belongs to the open file, which parent and child share. A child closes
    every descriptor a Lock has open, held or still waited on, as it starts (never unlocking:
    that would free the parent's lock), so a writer killed mid-write frees the lock even while
    a worker it forked lives on; and the child's copy of the Lock is not held.

    The lock's path is mdmem's own (``.git/mdmem-locks/``, beside the disposable cache folder,
    never in it): whatever is there that is not a regular file (a folder, a link, a FIFO) is
    removed, never followed; a file replaced while we waited for it is opened again (two
    writers must lock the same file)."""

    def __init__(self, lock_file: str | os.PathLike, timeout: float = -1, *, shared: bool = False) -> None:
        self.lock_file = str(lock_file)
        self._mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        self._folder, self._name = os.path.split(self.lock_file)
        self.timeout = timeout
        self._fd: int | None = None
        self._pid = 0  # the process holding it: a forked child's copy is not held
        self._depth = 0

    @property
    def is_locked(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    def acquire(self, timeout: float | None = None, poll_interval: float = 0.05) -> "Lock":
        if timeout is None:
            timeout = self.timeout
        if self.is_locked:
            self._depth += 1
            return self
        self._fd = None  # a copy forked while held: its descriptor is closed already (never reuse the number)
        deadline = time.monotonic() + timeout
        while True:
            folder, fd = self._open()
            try:
                ours = self._wait(fd, deadline, timeout, poll_interval) and self._still_ours(folder, fd)
            except BaseException:
                _close(fd)
                raise
            finally:
                os.close(folder)
            if ours:
                break
            _close(fd)  # replaced while we waited: lock the file that is there now
        self._fd, self._pid, self._depth = fd, os.getpid(), 1
        return self

    def release(self) -> None:
        if not self.is_locked:
            self._fd = None
            return
        self._depth -= 1
        if self._depth > 0:
            return
        fd, self._fd = self._fd, None
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            _close(fd)

    def _open(self) -> tuple[int, int]:
        """(the lock folder, the lock file) opened, neither through a link: the folder by
        itself (O_DIRECTORY|O_NOFOLLOW), the file inside that very folder (a folder swapped
        for a link meanwhile cannot send it elsewhere)."""
        for _ in range(_OPEN_TRIES):
            try:
                folder = os.open(self._folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:  # gone, a file, or a link (ELOOP, ENOTDIR) where the folder belongs
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise
                lock_folder(Path(self._folder))
                continue
            try:
                # Registered as it opens, under the lock a fork waits for: a child never keeps a
                # descriptor of ours, even one a thread is still waiting on.
                with _FDS_LOCK:
                    fd = os.open(self._name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644,
                                 dir_fd=folder)
                    _FDS.add(fd)
            except OSError as exc:  # ELOOP: a link; EISDIR: a folder; ENXIO: a socket; ENOENT: folder gone
                os.close(folder)
                if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOENT):
                    raise
                _remove(self.lock_file)
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return folder, fd
            _close(fd)  # a FIFO or a device node
            os.close(folder)
            _remove(self.lock_file)
        raise LockTimeout(f"{self.lock_file}: something keeps replacing this lock file or its folder; try again")

    def _wait(self, fd: int, deadline: float, timeout: float, poll_interval: float) -> bool:
        while True:
            try:
                fcntl.flock(fd, self._mode | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if 0 <= timeout and deadline <= time.monotonic():
                    raise LockTimeout(f"{self.lock_file}: another process held this lock for "
                                      f"{timeout:.0f}s; try again") from None
                time.sleep(poll_interval)

    def _still_ours(self, folder: int, fd: int) -> bool:
        """Whether the path still names the folder we opened (not a link to another) and the
        file in it we locked."""
        try:
            here_folder = os.stat(self._folder or ".", follow_symlinks=False)
            here = os.stat(self._name, dir_fd=folder, follow_symlinks=False)
        except OSError:  # gone, or a file where the folder was: open again
            return False
        return (_identity(here_folder) == _identity(os.fstat(folder))
                and _identity(here) == _identity(os.fstat(fd)))

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def leave_turnstile(turnstile: Lock) -> None:
    """A turnstile held alone (see :func:`pass_turnstile`) let go: its file goes first, so those
    passing find none to wait on, and those waiting wake as it is let go."""
    try:
        os.unlink(turnstile.lock_file)
    except OSError:
        pass
    turnstile.release()


def pass_turnstile(path: str, timeout: float, poll_interval: float = 0.05) -> None:
    """Wait while someone holds the lock file at ``path`` alone, without ever making it: no file
    (the common case, one failed open) means nobody is waiting there. The holder removes the
    file before it lets go, so writers pay one stat-like open until an erasure waits
    (gitdir.erasure_turnstile_path; a Lock cycle here was ~30-90 us on every write). Anything
    but a regular file at the path is not waited on (the holder's Lock removes it); a FIFO is
    opened without blocking. LockTimeout names the file."""
    with _FDS_LOCK:  # registered: a child forked meanwhile closes it (see _after_fork_in_child)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return  # none there (or a link, or its folder gone): nobody waits
        _FDS.add(fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return  # free, or its holder let go (the file is gone by then): never held past here
            except BlockingIOError:
                if 0 <= timeout and deadline <= time.monotonic():
                    raise LockTimeout(f"{path}: held for {timeout:.0f}s; try again") from None
                time.sleep(poll_interval)
    finally:
        _close(fd)  # closing drops the shared lock taken above


_OPEN_TRIES = 20
_FDS: set[int] = set()  # every descriptor a Lock has open here, held or waited on
_FDS_LOCK = threading.Lock()  # taken around a fork: no descriptor is half registered in it


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _close(fd: int) -> None:
    with _FDS_LOCK:
        _FDS.discard(fd)
        os.close(fd)


def _remove(path: str) -> None:
    """Whatever is at a lock's path (not a regular file): a cache entry to drop."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _after_fork_in_child() -> None:
    # The child has one thread; the parent's thread that forked held _FDS_LOCK (taken before
    # the fork), so it is made anew. Every descriptor is closed, never unlocked: an flock
    # belongs to the open file parent and child share, and unlocking would free the parent's.
    global _FDS_LOCK
    _FDS_LOCK = threading.Lock()
    for fd in list(_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _FDS.clear()


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
    would wait out every lock timeout in the child."""
    _RENEWED_AFTER_FORK.add(obj)


def _renew_in_child() -> None:
    for obj in list(_RENEWED_AFTER_FORK):
        obj.renew_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_in_child)
    os.register_at_fork(before=lambda: _FDS_LOCK.acquire(), after_in_parent=lambda: _FDS_LOCK.release(),
                        after_in_child=_after_fork_in_child)
