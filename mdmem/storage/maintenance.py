"""Housekeeping a store asks for: gc --auto now and then, in a background process under the lock."""
from __future__ import annotations

import subprocess
import sys


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
        return subprocess.Popen([sys.executable, "-I", "-m", "mdmem.storage.housekeeping", str(self.root)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def housekeep(self, *, force: bool = False) -> None:
        """git gc (and with it pack-refs) under the repo lock; in the foreground (gc.autoDetach
        would run it on after the lock is released)."""
        with self.locked():
            self.git("-c", "gc.autoDetach=false", "gc", "--quiet", *([] if force else ["--auto"]))
