"""A long-lived process's search caches, warmed (search/warm.py): what is warmed is exactly what a
question would have kept (scores and order as Whoosh's own, deleted documents left out, the
answers of a process that never warmed), kept compact, and warmed again when idle after a write;
a call stops an idle pass; closing the index ends its thread."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import T1, team_fact
from test_index_bm25 import corpus_index, rank_as_whoosh
from test_long_postings import answers, filled, small_lists  # noqa: F401 -- small_lists is a fixture

from mdmem import MemoryRepo
from mdmem.search import bm25, fulltext, postings, warm


def exact_answers(repo) -> list:
    """Each question's hits with their exact scores (answers() rounds them)."""
    from test_long_postings import QUESTIONS

    return [[(h.path, h.text, h.score) for h in repo.recall(q, as_user="dana", k=6, now=T1)] for q in QUESTIONS]


@pytest.mark.parametrize("seed", range(6))
def test_warmed_lists_score_and_rank_as_whoosh_does(seed, tmp_path, small_lists):  # noqa: F811
    ix, rng = corpus_index(seed, segments=1 + seed % 3, deletions=seed % 3 * 7)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        for leaf, _ in s.leaf_searchers():
            reader = leaf.reader()
            path = postings.write(tmp_path, reader, fulltext.FIELD_BOOSTS)
            reader.__dict__["_mdmem_long"] = postings.LongPostings(
                path, reader.doc_count_all(), reader.segment().segment_id(), 1 << 30)
        lists = bm25.long_lists(s, fulltext.FIELD_BOOSTS, bm25.WARM_POSTINGS_MAX, fulltext.PRUNE_SHARE_BM25_ONLY)
        assert lists
        lock = threading.RLock()
        kept = 0
        for reader, field, text in lists:
            with lock:
                kept += bm25.warm_postings(reader, field, text)
        assert kept
        # Kept as the caches keep lists: int32 docnums, float32 frequencies, length bytes.
        for leaf, _ in s.leaf_searchers():
            for found in leaf.reader().__dict__.get("_mdmem_postings", bm25._Kept()).lists.values():
                ids, tf, lengths = found or (np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.uint8))
                assert (ids.dtype, tf.dtype, lengths.dtype) == (np.int32, np.float32, np.uint8)
        assert rank_as_whoosh(s, rng, 8)


def test_a_warmed_process_answers_as_one_that_never_warmed(tmp_path, small_lists):  # noqa: F811
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    team_fact(repo, "Note 0: billing deploys only after the freeze lifts", key="rule.n0", now=T1)
    repo.close()
    cold = MemoryRepo.open(repo.root)
    expected = exact_answers(cold)
    cold.close()
    warmed = MemoryRepo.open(repo.root)
    try:
        warmed.keep_warm(as_user="dana")  # whose statistics to keep: dana's, as the MCP server says
        assert warmed.index.warm_passes == 1
        weights = warmed.index.open_searcher().__dict__.get("_mdmem_weights")
        assert weights is not None and len(weights.lists) > 3, "no weights were warmed"
        readers = [leaf.reader() for leaf, _ in warmed.index.open_searcher().leaf_searchers()]
        kept = sum(len(r.__dict__.get("_mdmem_postings", bm25._Kept()).lists) for r in readers)
        assert kept, "nothing was warmed"
        assert exact_answers(warmed) == expected
    finally:
        warmed.close()


def test_an_idle_process_warms_the_searcher_a_write_made(tmp_path, small_lists, monkeypatch):  # noqa: F811
    monkeypatch.setattr(warm, "WARM_IDLE_SECONDS", 0.2)
    monkeypatch.setattr(warm, "POLL_SECONDS", 0.05)
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    try:
        repo.keep_warm()
        first = repo.index.open_searcher()
        assert repo.index.warm_passes == 1
        team_fact(repo, "Note 3: webhook retries wait for the ledger codename freeze", key="rule.n3", now=T1)
        before = answers(repo)  # the catch-up: notes in memory, a new searcher
        assert repo.index.open_searcher() is not first
        deadline = time.monotonic() + 10
        while repo.index.warm_passes < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert repo.index.warm_passes == 2  # warmed once idle
        weights = repo.index.open_searcher().__dict__.get("_mdmem_weights")
        assert weights is not None and weights.lists
        assert answers(repo) == before
    finally:
        repo.close()


def test_a_call_stops_an_idle_pass_and_closing_ends_the_thread(tmp_path, small_lists):  # noqa: F811
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    repo.keep_warm()
    warmer = repo.index._warmer
    searcher = repo.index.open_searcher()
    since = repo.index.last_used
    repo.index.sync()  # a call came after the pass began
    assert warmer._pass(repo.index, searcher, since=since) is False
    thread = warmer._thread
    assert thread is not None and thread.is_alive()
    repo.close()
    thread.join(5)  # it ends at its next step (close does not wait: it may hold the mutex)
    assert not thread.is_alive()


def test_an_index_made_anew_after_a_forget_is_kept_warm_too(tmp_path, small_lists, monkeypatch):  # noqa: F811
    """A forget resets every cache of the process (the MCP server's, with the delete capability):
    the index it opens next is warmed when idle, and the reset does not wait for the thread."""
    monkeypatch.setattr(warm, "WARM_IDLE_SECONDS", 0.2)
    monkeypatch.setattr(warm, "POLL_SECONDS", 0.05)
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    r = repo.remember("Bob's locker code is 4471", as_user="bob", kind="profile", subject="user:bob", key="locker",
                      scope="private")
    try:
        repo.keep_warm()
        old = repo.index
        t = time.monotonic()
        repo.forget(as_user="bob", paths=[r.path])
        assert time.monotonic() - t < 30
        assert repo.index is not old and old._warmer is None
        answers(repo)
        deadline = time.monotonic() + 10
        while repo.index.warm_passes < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert repo.index.warm_passes == 1
    finally:
        repo.close()


def test_a_one_shot_process_does_not_warm(tmp_path, small_lists):  # noqa: F811
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    repo.recall("billing deploys", as_user="dana")
    try:
        assert repo.index.warm_passes == 0
        assert not [t for t in threading.enumerate() if t.name == "mdmem-warm"]
    finally:
        repo.close()


def test_a_warm_that_fails_never_stops_the_process_starting(tmp_path, small_lists, monkeypatch):  # noqa: F811
    """keep_warm runs where the daemon and the MCP server start: a pass that fails (a reader closed
    under it, a file that cannot be read) leaves the caches cold, and everything else working."""
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)

    def broken(*args, **kwargs):
        raise RuntimeError("a reader closed under the pass")

    monkeypatch.setattr(bm25, "warm_postings", broken)
    try:
        repo.keep_warm()
        assert repo.index.warm_passes == 0
        assert answers(repo)
    finally:
        repo.close()
