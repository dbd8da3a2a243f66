"""A long-lived process's search caches, warmed (search/warm.py): what is warmed is exactly what a
question would have kept (scores and order as Whoosh's own, deleted documents left out, the
answers of a process that never warmed), kept compact, and warmed again when idle after a write;
a call stops an idle pass; closing the index ends its thread."""
from __future__ import annotations

import random
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


T0 = "2026-10-01T09:00:00Z"


T2 = "2026-10-20T09:00:00Z"


TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol"]}


class CountingMutex:
    """The index's mutex, counting in lists instead of milliseconds: how many times the warming
    thread took it (``taken_by_pass``) and, for each wait of another thread, how many of those
    fell between its asking and its having it (``waits``). ``warming`` is the pass's thread, or
    None for any thread but the one that made this (the test's)."""

    def __init__(self, real, warming: threading.Thread | None) -> None:
        self.real, self.warming, self.main = real, warming, threading.current_thread()
        self.taken_by_pass = 0
        self.waits: list[int] = []

    def _is_pass(self) -> bool:
        me = threading.current_thread()
        return me is self.warming if self.warming is not None else me is not self.main

    def acquire(self, *args, **kw) -> bool:
        if self._is_pass():
            got = self.real.acquire(*args, **kw)
            self.taken_by_pass += 1
            return got
        before = self.taken_by_pass
        got = self.real.acquire(*args, **kw)
        self.waits.append(self.taken_by_pass - before)
        return got

    def release(self) -> None:
        self.real.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _many_lists_repo(tmp_path) -> MemoryRepo:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(150)]
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem")
    items = [dict(text=" ".join(rng.choice(vocab) for _ in range(30)), kind="fact", subject="service:billing",
                  key=f"k{i}", scope="team", team="payments") for i in range(300)]
    repo.remember_many(items, as_user="bob", now=T0, new_key=True)
    repo.reindex(rebuild=True)
    repo.close()
    return MemoryRepo.open(tmp_path / "mem")


def test_a_recall_waits_at_most_one_list_for_the_warming_pass(tmp_path, small_lists, monkeypatch):  # noqa: F811
    """warm.py: "every pass works a list at a time under the index's mutex, so a recall waits
    at most one list". The pass re-takes the mutex at once for its next list while it holds the
    GIL (Python's locks are not fair): a thread waiting for the mutex is woken, finds it taken
    again, and waits for many lists. Here each list costs ~2 ms of Python (a list of ~20,000
    postings at 100k notes, the pass's own steps); another thread asking for the mutex during the
    pass waited tens to hundreds of ms: a recall in the daemon or the MCP server, arriving while
    a pass runs, waits for most of the pass, not for one list (an idle pass only learns of the
    recall once the recall has the mutex: last_used is moved under it)."""
    repo = _many_lists_repo(tmp_path)
    try:
        repo.recall("w1 w2", as_user="bob", now=T2)
        index = repo.index
        one_list = 0.002
        real = bm25.warm_postings

        def slow(*args):  # a longer list: ~2 ms of work holding the GIL, as decoding and checks do
            end = time.perf_counter() + one_list
            while time.perf_counter() < end:
                pass
            return real(*args)

        monkeypatch.setattr(bm25, "warm_postings", slow)
        index.reopen()
        repo.recall("w5 w6", as_user="bob", now=T2)
        warmer = warm.Warmer(index)
        thread = threading.Thread(target=warmer.warm_now)
        mutex = index.mutex = CountingMutex(index.mutex, thread)
        thread.start()
        # A recall asks every 2 ms; each wait is counted in lists: how many times the pass took
        # the mutex between the recall asking for it (announced, as held() does) and having it.
        time.sleep(0.005)
        while thread.is_alive():
            with index.held():  # as a recall or catch-up takes it
                pass
            time.sleep(0.002)
        thread.join()
        assert mutex.taken_by_pass > 20  # the pass is long: ~150 lists
        assert warmer.passes == 1 and warmer.postings_warmed > 0
        assert mutex.waits, "no recall asked for the mutex during the pass"
        assert max(mutex.waits) <= 1, (f"a recall waited while the pass took {max(mutex.waits)} lists; at most the "
                                       f"one under way ({len(mutex.waits)} waits in a pass of {mutex.taken_by_pass})")
    finally:
        repo.close()


def _secret_repo(root) -> MemoryRepo:
    repo = MemoryRepo.init(root, teams=TEAMS, now=T0, as_user="mdmem")
    team = {"codename": "The vendor codename is quagga",
            "ledger": "The ledger tool we run for the month end close is zorilla"}
    for key, text in team.items():
        repo.remember(text, as_user="bob", kind="fact", subject="service:billing", key=key, scope="team",
                      team="payments", now=T0, new_key=True)
    for i in range(8):
        repo.remember(f"Alice private: quagga quagga deal note {i}", as_user="alice", kind="fact",
                      subject="user:alice", key=f"q{i}", scope="private", new_key=True, now=T0)
    return repo


def _scores(hits):
    return [(h.path, h.score, h.bm25) for h in hits]


def test_keep_warm_for_one_user_during_anothers_recall_does_not_give_her_statistics_to_him(tmp_path):
    """Recall takes its reader's visible mask from its local ``roots`` but names it in the
    searcher's caches by ``self.index.reader_roots``, a shared attribute read again later in the
    call; RepoState.keep_warm(as_user=) writes that attribute without the index's mutex. A long-
    lived process (an app serving several people through one MemoryRepo; the MCP server's start
    runs keep_warm beside its first tool calls) that calls keep_warm(as_user="bob") while alice's
    recall runs gets alice's statistics (document frequencies over her private notes) kept under
    bob's key: bob's next recall scores his team notes with counts of alice's private notes, an
    oracle on what she keeps. The key must be the roots the mask was made from."""
    cold = _secret_repo(tmp_path / "cold")
    expected = _scores(cold.recall("quagga zorilla", as_user="bob", now=T2))
    cold.close()
    repo = _secret_repo(tmp_path / "warm")
    repo.close()
    repo = MemoryRepo.open(tmp_path / "warm")
    try:
        bob_roots = tuple(sorted(repo.access.readable_roots("bob")))
        index = repo.index
        real_sync = index.sync
        other = []

        def sync_meanwhile_keep_warm(*a, **kw):
            if not other:  # another thread asks to keep bob's caches warm while alice's recall runs
                other.append(threading.Thread(target=repo.keep_warm, kwargs={"as_user": "bob"}))
                other[0].start()
                deadline = time.monotonic() + 5
                while index.reader_roots != bob_roots and time.monotonic() < deadline:
                    time.sleep(0.001)
            return real_sync(*a, **kw)

        index.sync = sync_meanwhile_keep_warm
        repo.recall("quagga zorilla", as_user="alice", now=T2)
        other[0].join(10)
        del index.sync
        got = _scores(repo.recall("quagga zorilla", as_user="bob", now=T2))
        assert got == expected, (got, expected)
    finally:
        repo.close()


@pytest.mark.xfail(strict=True, reason="open: a write makes no new searcher until the next catch-up, "
                   "so the idle thread has nothing new to warm")
def test_a_long_lived_process_rewarms_after_its_own_write_once_idle(tmp_path, small_lists):  # noqa: F811
    """warm.py: later passes run "for a searcher a write or a catch-up made anew ... once the
    index has been idle WARM_IDLE_SECONDS". A write does not make the searcher anew: the index
    learns of it at the next recall's catch-up, so the thread sees nothing new and never warms
    while idle. The first recall after every write (in a long-lived MemoryRepo that keeps warm;
    in the daemon, which catches up with other processes' writes only when called; the MCP server's
    watcher may catch up by itself) meets a new searcher with none of its BM25F weights kept, the cold cost warming exists to remove (at 3,000 notes:
    19-20 ms against 13-14 ms warmed), and only then does the thread warm."""
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem")
    topics = ["billing deploys", "refunds for marketplace orders", "postgres failover", "webhook retries"]
    for i in range(24):
        repo.remember(f"Note {i}: {topics[i % 4]} follow rule {i % 5} of the ledger codename plan", as_user="bob",
                      kind="fact", subject="service:billing", key=f"rule.n{i}", scope="team", team="payments",
                      now=T0, new_key=True)
    repo.reindex(rebuild=True)
    repo.close()
    repo = MemoryRepo.open(tmp_path / "mem")
    try:
        repo.keep_warm(as_user="dana")
        repo.recall("ledger codename plan", as_user="dana", now=T2)
        time.sleep(4 * warm.WARM_IDLE_SECONDS)
        before = repo.index.warm_passes
        assert before >= 1
        repo.remember("Note new: billing deploys follow the ledger codename plan", as_user="bob", kind="fact",
                      subject="service:billing", key="rule.new", scope="team", team="payments", now=T2,
                      new_key=True)
        time.sleep(4 * warm.WARM_IDLE_SECONDS)
        assert repo.index.warm_passes > before, "no pass in 2 s of idle after a write"
    finally:
        repo.close()


def test_a_recall_stops_an_idle_warming_pass_instead_of_waiting_it_out(tmp_path, small_lists, monkeypatch):  # noqa: F811
    """warm.py: later passes "stop at once when a call comes (last_used moved)". A recall moves
    last_used inside the index's mutex, and it cannot get the mutex while the pass re-takes it
    list after list (the same unfairness as the test above): the idle pass runs to its end and the
    recall waits for all of it. Seen: a recall of ~10 ms took ~250 ms, and the pass it should
    have stopped was counted complete. At 100k notes a pass is ~0.4 s of CPU: a daemon's or MCP
    server's recall arriving 0.5 s after the last one waits out a whole pass."""
    repo = _many_lists_repo(tmp_path)
    index = repo.index
    real = bm25.warm_postings

    def slow(*args):  # a longer list: ~2 ms of work holding the GIL
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        return real(*args)

    monkeypatch.setattr(bm25, "warm_postings", slow)
    # Counted in lists, not milliseconds: how many times the warming thread took the mutex while
    # this thread's recall waited for it (announced); a recall that stops the pass waits for at
    # most the list under way, however loaded the machine.
    mutex = index.mutex = CountingMutex(index.mutex, None)
    try:
        repo.keep_warm(as_user="bob")
        asked = 0
        for _ in range(6):
            repo.recall("w1 w2", as_user="bob", now=T2)
            index.reopen()  # a new searcher and readers, as a catch-up after another process's write makes
            repo.recall("w3", as_user="bob", now=T2)
            time.sleep(warm.WARM_IDLE_SECONDS + warm.POLL_SECONDS + 0.05)  # idle: a pass has begun
            asked = len(mutex.waits)
            repo.recall("w1 w2", as_user="bob", now=T2)
            assert len(mutex.waits) > asked
            assert max(mutex.waits[asked:]) <= 1, (f"a recall waited while an idle pass took "
                                                   f"{max(mutex.waits[asked:])} lists")
        assert mutex.taken_by_pass > 0  # the passes ran beside the recalls
    finally:
        repo.close()


def test_a_long_lived_process_loads_its_model_before_the_first_question(repo, monkeypatch):
    """keep_warm loads the local model and runs it once: the first recall loaded it (~190 ms of
    MiniLM with every recall behind it waiting), and no write was embedded ahead before that."""
    from mdmem.search import embedders

    monkeypatch.setattr(embedders, "_MINILM", None)  # a process that has not loaded it
    team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
    repo.close()
    fresh = MemoryRepo.open(repo.root)
    try:
        assert fresh.index.embedder is not None and not fresh.index.embedder.ready
        fresh.keep_warm()
        assert fresh.index.embedder.ready
    finally:
        fresh.close()
