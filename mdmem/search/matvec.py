"""The notes' vectors times a question's vector, on the calling thread and one helper.

A recall compares the question with every allowed note's vector: one pass over the whole
matrix (10,000 x 384 float32 = 15 MB; 150 MB at 100,000). The pass is bound by memory, not
arithmetic: on a 2-core AVX2 machine, 10,400 vectors took 1.9-2.6 ms on one
thread once the question's embedding had pushed them out of the cache, and 1.4-1.5 ms read as
two halves on two threads. In a 10k MiniLM recall the pass came after the question's
embedding, ~3 ms of ~11.

The product is numpy's einsum, not BLAS. OpenBLAS's own threads spin while they wait for work
(4.7 ms of CPU and 13 ms of wall for what one thread did in 0.74 ms, on the machine under
load), and its thread count is one process-wide setting that only the thread that set it can
put back (OpenBLAS 0.3.31: a limit restored from another thread was ignored and left BLAS on
one thread for good). einsum's own loop runs on the calling thread without the GIL,
as fast as one BLAS thread when the vectors come from memory (1.7-1.9 against 1.8-2.1 ms) and a
little slower from cache (1.35 against 1.1 ms); and each row's value is computed the same way
whatever the rows around it (for a row-major matrix, which is what the index holds), so a
note's cosine does not depend on its segment's size or on how the rows were cut.

The helper is an ordinary thread that sleeps between products, and the work is cut into chunks
that the caller and the helper take in turn: a helper that is not scheduled in time (a busy
machine) leaves its chunks to the caller, which never waits for a chunk nobody has started. The
worst case is one thread's pass plus the hand-over (~50 us).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..storage.locks import renew_after_fork

# Below this many rows one thread does it all: the hand-over costs more than half of the pass.
SPLIT_ROWS = 4096
# Rows a chunk (~1.5 MB of 384-wide float32): small enough that the caller and the helper end
# close together, large enough that numpy's per-call cost (~5 us) is nothing beside it.
CHUNK_ROWS = 1024


def product(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query`` (one value a row), the rows shared with the helper thread when there
    are many."""
    out = np.empty(len(matrix), dtype=np.result_type(matrix, query))
    if len(matrix) < SPLIT_ROWS:
        return _rows(matrix, query, out)
    job = _Job(matrix, query, out)
    _HELPER.lend(job)
    job.run(helper=False)
    job.finish()
    return out


def _rows(matrix: np.ndarray, query: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.einsum("ij,j->i", matrix, query, out=out)


class _Job:
    """One product cut into chunks; ``run`` takes chunks until none are left."""

    def __init__(self, matrix: np.ndarray, query: np.ndarray, out: np.ndarray):
        self.matrix, self.query, self.out = matrix, query, out
        starts = range(0, len(matrix), CHUNK_ROWS)
        self._todo = [(s, min(s + CHUNK_ROWS, len(matrix))) for s in reversed(starts)]  # popped from the end
        self._lock = threading.Lock()
        self._helper_took = 0
        self._helper_done = threading.Event()
        self._helper_error: BaseException | None = None

    def _next(self, helper: bool) -> tuple[int, int] | None:
        with self._lock:
            if not self._todo:
                return None
            self._helper_took += helper
            return self._todo.pop()

    def run(self, helper: bool) -> None:
        try:
            while (chunk := self._next(helper)) is not None:
                start, end = chunk
                _rows(self.matrix[start:end], self.query, self.out[start:end])
        except BaseException as e:  # noqa: BLE001 -- handed to the caller, raised there
            if not helper:
                raise
            self._helper_error = e
        finally:
            if helper:
                self._helper_done.set()

    def finish(self) -> None:
        """Once the caller's own run found nothing left: wait for the chunks the helper took
        (if it took none, it is not waited for: it will find the list empty)."""
        with self._lock:
            took = self._helper_took
        if took:
            self._helper_done.wait()
            if self._helper_error is not None:
                raise self._helper_error


class _Helper:
    """The one helper thread of the process, started at the first large product."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        renew_after_fork(self)

    def renew_after_fork(self) -> None:
        """A forked child has no helper thread: it starts its own when it needs one."""
        self._lock = threading.Lock()
        self._pool = None

    def lend(self, job: _Job) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="mdmem-matvec")
            self._pool.submit(job.run, True)


_HELPER = _Helper()
