"""Cross-process file locks whose timeout is an mdmem error (LockTimeout), not filelock's."""
from __future__ import annotations

import os
import shutil
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
