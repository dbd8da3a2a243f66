"""Whose turn it is on one server: a recall holding the search index goes before a write in the
same process (NoteIndex.give_way), for a few milliseconds at most, never for ever and never
against the thread's own hold."""
import threading
import time

from conftest import team_fact


def held_by_another_thread(index):
    entered, leave = threading.Event(), threading.Event()

    def holder():
        with index.held():
            entered.set()
            leave.wait(10)
    thread = threading.Thread(target=holder)
    thread.start()
    assert entered.wait(10)
    return leave, thread


def waited(fn) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def test_a_write_gives_way_to_a_recall_holding_the_index_for_its_bound_at_most(repo):
    team_fact(repo, "Billing deploys on Tuesdays")
    repo.recall("billing", as_user="bob")
    index = repo.index
    assert waited(lambda: index.give_way(at_most=1.0)) < 0.1  # nobody holds it
    leave, thread = held_by_another_thread(index)
    try:
        assert 0.18 <= waited(lambda: index.give_way(at_most=0.2)) < 1.0  # held throughout: its bound
        threading.Timer(0.1, leave.set).start()
        assert 0.05 <= waited(lambda: index.give_way(at_most=5.0)) < 2.0  # let go: at once
    finally:
        leave.set()
        thread.join(10)
    with index.held():
        assert waited(lambda: index.give_way(at_most=1.0)) < 0.1  # its own hold: no wait


def test_every_write_gives_way_before_its_draft_its_views_and_its_commit(repo, monkeypatch):
    """A remember asks at three points, and finishes while a recall holds the index all along
    (each wait bounded, so a long hold delays a write by a few bounds, never blocks it)."""
    team_fact(repo, "Billing deploys on Tuesdays")
    repo.recall("billing", as_user="bob")
    index = repo.index
    asked = []
    real = index.give_way
    monkeypatch.setattr(index, "give_way", lambda: asked.append(1) or real(at_most=0.05))
    leave, thread = held_by_another_thread(index)
    try:
        took = waited(lambda: team_fact(repo, "The ledger closes at noon", key="ledger.close", new_key=True))
    finally:
        leave.set()
        thread.join(10)
    assert len(asked) == 3 and took >= 0.15
    assert any("noon" in h.text for h in repo.recall("ledger closes", as_user="bob"))
