"""A running server lets go of erased text by re-executing itself in place, as the daemon exits:
once an erasure ends in its repository, the process finishes what it was asked, hands its
connection over (the client's pipes over stdio, the listening socket over HTTP) and replaces
itself with a fresh copy of the same command (same pid). Dropping caches was not enough: the
memory a process freed still held copies of the erased text until it exited.

What the fresh process takes over comes in one environment variable it reads and removes at
start (:func:`taken_over`); descriptors named there are inherited across the exec."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from ..storage.erasures_seen import ErasureFollower

HANDOVER_ENV = "MDMEM_SERVE_HANDOVER"


class RestartOnErasure:
    """Whether an erasure ended in the served repositories since the server started: looked at
    before each request the server takes (one stat) and once a second by :meth:`watch`, for a
    server nobody calls. ``on_due`` is called once, on the thread that saw it."""

    def __init__(self, roots: Iterable[Path], on_due: Callable[[], None] = lambda: None, *,
                 since_ns: int | None = None):
        # since_ns: when this process began (started_ns): an erasure that ended while it was
        # starting or opening the repository is one to restart for.
        self.follower = ErasureFollower(roots, since_ns)
        self.due = threading.Event()
        self.on_due = on_due
        self._telling = threading.Lock()

    def look(self) -> bool:
        """True once an erasure has ended (and from then on); never before ``on_due`` has
        returned, whichever thread runs it (a call waits for the caches it drops)."""
        if not self.due.is_set() and self.follower.ended():
            self._seen()
        if not self.due.is_set():
            return False
        with self._telling:
            return True

    def quiet(self) -> bool:
        """True while no erasure has ended and none is being told: a stat per repository, no
        lock, no wait -- for an event loop, before each request. When it says False, run
        :meth:`look` on a thread (it may wait for ``on_due``)."""
        return not self.due.is_set() and not self.follower.moved()

    def watch(self, stop: threading.Event, seconds: float = 1.0) -> threading.Thread:
        return self.follower.watch(stop, self._seen, seconds)

    def _seen(self) -> None:
        with self._telling:
            if not self.due.is_set():
                self.due.set()
                self.on_due()


def reexec(handover: dict[str, Any], inherit: Iterable[int] = ()) -> NoReturn:
    """Replace this process with a fresh run of the command that started it (sys.orig_argv:
    the interpreter's own arguments too, so ``python -m mdmem.cli.main`` and the ``mdmem``
    script both come back as they were), passing ``handover`` and the descriptors ``inherit``
    (every other one Python opened is close-on-exec). Standard output is flushed first."""
    for fd in inherit:
        os.set_inheritable(fd, True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    # When this image began: prove-gone (erasure/processes.py) vouches for a process whose image
    # is younger than the last erasure.
    env = {**os.environ, HANDOVER_ENV: json.dumps({**handover, "since_ns": time.time_ns()})}
    os.execve(sys.executable, sys.orig_argv, env)


def started_ns(handover: dict[str, Any]) -> int:
    """When this server began, for RestartOnErasure: the moment the process it replaced handed
    over (an erasure ending during the exec is not missed), else now (call it before opening
    the repository)."""
    since = handover.get("since_ns")
    return since if isinstance(since, int) else time.time_ns()


def taken_over() -> dict[str, Any]:
    """What the process this one replaced handed over ({} on a fresh start). Read once: it
    leaves the environment, so no child of this process takes it for its own."""
    raw = os.environ.pop(HANDOVER_ENV, None)
    if not raw:
        return {}
    try:
        out = json.loads(raw)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}
