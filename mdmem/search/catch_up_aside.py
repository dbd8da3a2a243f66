"""A long-lived server's index catch-up to disk, in a process of its own.

A server's writes go into its index's in-memory segment (search/note_index.py, RECENT_MAX
notes). The recall that found it full wrote them all to a Whoosh segment under the index
mutex: 150-220 ms at 10,000 notes with MiniLM (Whoosh's add_document and commit), and every
recall queued behind it; two such stalls in a 2-minute run were the server's recall p99. Here,
once half of it is held, a child process catches the index on disk up to HEAD, as another
process's catch-up (a CLI write's) would; the server's next recall sees state.json move, opens
the new searcher and keeps in memory only the notes written since (~10 ms).

The child runs no rebuild (a catch-up that would be one is left to the server, as before) and
nothing while an erasure runs (it holds the erasure gate as a writer does). A child killed
mid-way leaves what any killed catch-up leaves: the next one finishes it.

The child is ``python -I -m mdmem.ops.index_catch_up ROOT MODEL_ID BACKEND``.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ..storage.background import start_in_background

# How long a close waits for a child still catching up (it takes about a second); past that it
# is left to finish on its own, as a CLI call leaves housekeeping.
WAIT_SECONDS = 30.0
RETRY_SECONDS = 60.0


class CatchUpAside:
    """Starts the child (never two at once) for the repository at ``root``, whose index is
    ``model_id``'s, made with the embedder ``backend`` (mdmem.toml's [embedder] backend, or the
    override the server was started with)."""

    def __init__(self, root: Path, model_id: str, backend: str) -> None:
        self.argv = [sys.executable, "-I", "-m", "mdmem.ops.index_catch_up", str(root), model_id, backend]
        self._proc: subprocess.Popen | None = None
        self._started_at = 0.0
        self.started = 0  # children started (measured by tests)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """A child, unless one runs, or the last one did nothing or failed less than
        RETRY_SECONDS ago (then each recall from half full to full would start another; the
        server's own catch-up at RECENT_MAX goes on as before)."""
        if self.running():
            return
        if (self._proc is not None and self._proc.returncode != 0
                and time.monotonic() - self._started_at < RETRY_SECONDS):
            return
        self._started_at = time.monotonic()
        self._proc = start_in_background(self.argv)
        self.started += 1

    def wait(self, timeout: float = WAIT_SECONDS) -> None:
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
