"""Cross-process file locks whose timeout is an mdmem error (LockTimeout), not filelock's."""
from __future__ import annotations

import os
import shutil
import weakref
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import LockTimeout


def lock_folder(path: Path) -> Path:
    """The folder for lock files (``.git/mdmem/locks``), made if missing. A file where it or the
    cache folder above it belongs is removed first: everything under the cache folder is disposable."""
    for folder in (path.parent, path):
        if os.path.lexists(folder) and not folder.is_dir():
            os.unlink(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Lock(FileLock):
    """A :class:`filelock.FileLock` that raises :class:`LockTimeout`, naming the lock file."""

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        lock_file = Path(self.lock_file)
        if lock_file.is_dir() and not lock_file.is_symlink():
            shutil.rmtree(lock_file, ignore_errors=True)  # a folder where the lock file belongs: a cache to drop
        try:
            return super().acquire(*args, **kwargs)
        except Timeout:
            waited = kwargs.get("timeout", args[0] if args else self.timeout)
            raise LockTimeout(f"{self.lock_file}: another process held this lock for "
                              f"{waited:.0f}s; try again") from None


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
