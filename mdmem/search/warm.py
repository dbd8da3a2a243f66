"""A long-lived process's search caches, warmed in the background.

A question's words met for the first time by a process cost ~100 ns a posting: the long list
read from the big segment's file (postings.py), checked, and its BM25F weights computed
(bm25.py). At 100,000 notes a first-time question touching five such words took 12-17 ms where
the same question took 3-5 ms once they were kept: the whole p95 of recall (on the
benchmark's 100k fixture: p95 12-13 ms without, 4.4-4.8 with every long list warmed, p50
3.7-5.8 -> 2.3-3.2).

So a process that will live (the MCP server, the daemon: :meth:`NoteIndex.keep_warm`) keeps
every long list (up to bm25.WARM_POSTINGS_MAX postings, longest first) in its caches: the
big segments' postings (per reader: they outlive the searchers a write makes), then the
weights of the current searcher as the last reader sees them (BM25F's statistics are each
reader's: bm25.Visible; a pass before any question keeps postings only). A one-shot CLI call
never warms (one question cannot repay it).

- Every pass works a list at a time under the index's mutex (~1 ms a list of 50,000 read
  and weighed), so a recall waits at most one list and never runs beside the pass: a first
  version read the files outside the mutex, beside the first questions, and made them slower,
  not faster (b2b p50 4.3 -> 8.7-9.4 ms at 100k): the pass's Python steps between its numpy
  calls held the GIL, and a recall waiting for it waited out the interpreter's 5 ms switch
  interval.
- The first pass, :meth:`Warmer.warm_now`, runs when the process starts (the daemon before it
  listens, the MCP server once its first catch-up is done).
- Later passes, for a searcher a write or a catch-up made anew, run on a thread of their own
  once the index has been idle WARM_IDLE_SECONDS, and stop at once when a call comes
  (``last_used`` moved).

At 100k notes of the bench's fixture a pass is ~0.4 s of CPU and ~50 MB (9 bytes a kept
posting, 8 a weight); at 10k, ~40 ms.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from . import bm25, fulltext

WARM_IDLE_SECONDS = 0.5  # a later pass waits for this long without a call
POLL_SECONDS = 0.25  # how often the thread looks for a new searcher or an idle index


class Warmer:
    """The warming thread of one NoteIndex (started by :meth:`start`, ended by :meth:`stop`)."""

    def __init__(self, index: Any):
        self._index = weakref.ref(index)  # the thread never keeps a closed index alive
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warmed: Any = None  # (weakref to the last searcher fully warmed, the reader's roots then)
        self.passes = 0  # completed passes (measured by tests)
        self.postings_warmed = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mdmem-warm", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """The thread ends at its next step (within one list). Not joined: the caller may hold
        the index's mutex (a forget's reset), which the thread may be waiting for."""
        self._stop.set()
        self._thread = None

    def warm_now(self) -> None:
        """A whole pass over the current searcher (opened if it is not), in this thread."""
        index = self._index()
        if index is None:
            return
        try:
            with index.mutex:
                searcher = index.searcher()
                index.table()  # the first recall made it: ~25 ms at 10k notes
            if self._pass(index, searcher, since=None):
                self._warmed = (weakref.ref(searcher), index.reader_roots)
                self.passes += 1
        except Exception:  # noqa: BLE001 -- a cache: the daemon or server starts all the same, and recall
            pass           # opens (or rebuilds) the index itself
        try:
            index.warm_embedder()
        except Exception:  # noqa: BLE001 -- the first recall loads the model (and reports what fails)
            pass

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if not self._idle_pass():
                return

    def _idle_pass(self) -> bool:
        """A pass if the index is idle and its searcher not warmed yet; False once it is gone."""
        index = self._index()
        if index is None:
            return False
        since = index.last_used
        searcher = index.open_searcher()
        roots = index.reader_roots
        if (searcher is None or time.monotonic() - since < WARM_IDLE_SECONDS
                or (self._warmed is not None and self._warmed[0]() is searcher and self._warmed[1] == roots)):
            return True
        try:
            if self._pass(index, searcher, since=since):
                self._warmed = (weakref.ref(searcher), roots)
                self.passes += 1
        except Exception:  # noqa: BLE001 -- a cache: a reader closed under the pass, a file replaced
            pass
        return True

    def _pass(self, index: Any, searcher: Any, *, since: float | None) -> bool:
        """Warm ``searcher``, a list at a time under the index's mutex; False if it stopped being
        the current one, the index was used since ``since`` (None: a pass asked for), or the
        warmer was stopped."""
        mutex = index.mutex

        def interrupted() -> bool:
            return (self._stop.is_set() or index.open_searcher() is not searcher
                    or (since is not None and (index.last_used != since or index.wanting)))

        def give_way() -> None:
            # A call waiting for the mutex gets it first: Python's locks favour the thread that
            # just let go, and a recall waited out most of a pass. An idle pass
            # stops instead (interrupted). The GIL is let go first, so a call wanting it can get
            # as far as asking for the mutex (held() counts it).
            time.sleep(0)
            while index.wanting and since is None and not self._stop.is_set():
                time.sleep(0.0005)

        with mutex:
            lists = bm25.long_lists(searcher, fulltext.FIELD_BOOSTS, bm25.WARM_POSTINGS_MAX,
                                    fulltext.PRUNE_SHARE_BM25_ONLY)
        for reader, field, text in lists:
            give_way()
            with mutex:
                if interrupted():
                    return False
                self.postings_warmed += bm25.warm_postings(reader, field, text)
        roots = index.reader_roots
        if roots is None:
            return True  # no question asked yet: whose weights to keep is not known
        with mutex:
            if interrupted():
                return False
            stats = bm25.Visible(searcher, index.table().visible(list(roots)), roots)
        for _reader, field, text in lists:
            give_way()
            with mutex:
                if interrupted():
                    return False
                stats.weights(field, text, fulltext.FIELD_BOOSTS[field], fulltext.B, fulltext.K1, warm=True)
        return True
