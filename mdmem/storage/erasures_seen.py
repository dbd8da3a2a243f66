"""How a process that keeps a repository open learns that an erasure ended there: the erasure's
done stamp (gitdir.erasure_done_path, rewritten by erasure/journal.Journal.finished) moved
since it last looked. One stat a look. The one follower every long-lived holder uses: a
GitStore reopens what libgit2 kept of the old history (GitStore.follow_erasures), a running
MCP server re-executes itself (mcp/reexec.py), the daemon exits (cli/daemon.py)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .gitdir import erasure_done_path, file_stamp


class ErasureFollower:
    """The done stamps of one or more repositories (a workspace's server follows each mount)
    as they were at the last look."""

    def __init__(self, roots: Iterable[Path], since_ns: int | None = None):
        """``since_ns``: when the holder began (before it opened anything): an erasure that
        ended after that, while it was opening, counts as one seen at the first look -- the
        holder may have read the old history before the stamp moved."""
        self.paths = [erasure_done_path(Path(root)) for root in roots]
        self.stamps = [file_stamp(path) for path in self.paths]
        if since_ns is not None:
            self.stamps = [None if stamp is not None and stamp[1] >= since_ns else stamp for stamp in self.stamps]
        self._lock = threading.Lock()

    def moved(self) -> bool:
        """Whether a done stamp differs from the last look's, without recording it: one stat per
        repository, never waiting on a lock (an event loop asks it before every request)."""
        return [file_stamp(path) for path in self.paths] != self.stamps

    def ended(self) -> bool:
        """Whether an erasure ended in any of the repositories since the last look (True once
        per erasure: the look records what it saw)."""
        now = [file_stamp(path) for path in self.paths]
        with self._lock:
            if now == self.stamps:
                return False
            self.stamps = now
            return True

    def watch(self, stop: threading.Event, on_ended: Callable[[], None], seconds: float = 1.0) -> threading.Thread:
        """Look every ``seconds`` until ``stop`` is set, calling ``on_ended`` (on this thread)
        for each erasure seen: a holder nobody calls learns of it too."""
        def loop() -> None:
            while not stop.wait(seconds):
                try:
                    if self.ended():
                        on_ended()
                except Exception:  # noqa: BLE001 -- a look that failed is tried again next time
                    pass

        thread = threading.Thread(target=loop, name="mdmem-erasure-follower", daemon=True)
        thread.start()
        return thread
