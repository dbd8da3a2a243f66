"""The notes' vectors times a question's vector, shared with a helper thread (search/matvec.py):
one thread's product whatever the helper does, and a caller that never
waits for a helper that has not started."""
from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

from mdmem.search import matvec


def vectors(rows: int, dim: int = 48, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, dim)).astype(np.float32), rng.standard_normal(dim).astype(np.float32)


@pytest.mark.parametrize("rows", [1, 100, matvec.SPLIT_ROWS - 1, matvec.SPLIT_ROWS, matvec.SPLIT_ROWS + 1,
                                  3 * matvec.CHUNK_ROWS + 7, 10_400])
def test_the_product_equals_one_threads_product(rows):
    matrix, query = vectors(rows, 384)
    got = matvec.product(matrix, query)
    assert got.dtype == np.float32 and got.shape == (rows,)
    np.testing.assert_allclose(got, matrix.astype(np.float64) @ query.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_both_threads_take_chunks_of_a_large_product(monkeypatch):
    real = matvec._rows
    names: set[str] = set()

    def recording(*args, **kwargs):
        names.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(matvec, "_rows", recording)
    matrix, query = vectors(40 * matvec.CHUNK_ROWS, 384)
    for _ in range(30):
        matvec.product(matrix, query)
        if any(n.startswith("mdmem-matvec") for n in names):
            break
    assert any(n.startswith("mdmem-matvec") for n in names), names


def test_a_helper_that_is_not_scheduled_leaves_every_chunk_to_the_caller(monkeypatch):
    """A busy machine: the helper starts only after the caller is done. The caller must not
    wait for it (it would wait out the helper's 5 s here) and the product must be whole."""
    returned = threading.Event()
    helper_ran = threading.Event()

    def late_lend(job):
        def late():
            returned.wait(5)
            job.run(helper=True)
            helper_ran.set()
        threading.Thread(target=late, daemon=True).start()

    monkeypatch.setattr(matvec._HELPER, "lend", late_lend)
    matrix, query = vectors(5 * matvec.CHUNK_ROWS)
    got = matvec.product(matrix, query)
    assert not helper_ran.is_set()  # the caller did not wait for the helper to start
    returned.set()
    assert helper_ran.wait(5)
    np.testing.assert_array_equal(got, np.einsum("ij,j->i", matrix, query))


def test_an_error_in_the_helpers_chunk_reaches_the_caller(monkeypatch):
    real = matvec._rows

    def failing_in_helper(*args, **kwargs):
        if threading.current_thread().name.startswith("mdmem-matvec"):
            raise MemoryError("helper chunk")
        return real(*args, **kwargs)

    monkeypatch.setattr(matvec, "_rows", failing_in_helper)
    matrix, query = vectors(200 * matvec.CHUNK_ROWS, 8)
    for _ in range(30):  # until the helper has taken a chunk
        try:
            got = matvec.product(matrix, query)
        except MemoryError as e:
            assert "helper chunk" in str(e)
            return
        np.testing.assert_array_equal(got, np.einsum("ij,j->i", matrix, query))  # the caller did it all
    pytest.skip("the helper never took a chunk in 30 products")


def test_a_rows_value_does_not_depend_on_the_rows_around_it():
    """A note's cosine is the same whether its segment is scanned whole (in chunks, on two
    threads), gathered, or alone: a ranking never changes with a segment's size."""
    matrix, query = vectors(3 * matvec.SPLIT_ROWS + 5, 384)
    whole = matvec.product(matrix, query)
    picked = np.array([0, 1, 1023, 1024, 4097, len(matrix) - 1])
    np.testing.assert_array_equal(matvec.product(matrix[picked], query), whole[picked])
    for row in picked:
        np.testing.assert_array_equal(matvec.product(matrix[row:row + 1], query), whole[row:row + 1])


def _in_child(queue) -> None:
    matrix, query = vectors(3 * matvec.SPLIT_ROWS)
    queue.put(bool(np.array_equal(matvec.product(matrix, query), np.einsum("ij,j->i", matrix, query))))


def test_a_forked_child_gets_a_helper_of_its_own():
    matrix, query = vectors(3 * matvec.SPLIT_ROWS)
    matvec.product(matrix, query)  # the parent's helper thread exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(queue,))
    child.start()
    child.join(30)
    assert child.exitcode == 0, "the child hung or failed"
    assert queue.get(timeout=5) is True
