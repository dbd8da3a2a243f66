"""Cross-process file locks whose timeout is an mdmem error (LockTimeout), not filelock's."""
from __future__ import annotations

from typing import Any

from filelock import FileLock, Timeout

from ..errors import LockTimeout


class Lock(FileLock):
    """A :class:`filelock.FileLock` that raises :class:`LockTimeout`, naming the lock file."""

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().acquire(*args, **kwargs)
        except Timeout:
            waited = kwargs.get("timeout", args[0] if args else self.timeout)
            raise LockTimeout(f"{self.lock_file}: another process held this lock for "
                              f"{waited:.0f}s; try again") from None
