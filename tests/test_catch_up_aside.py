"""A long-lived server's index catch-up to disk in a process of its own (search/catch_up_aside.py,
ops/index_catch_up.py): started once the in-memory segment is half full, it moves the index on
disk to HEAD while recalls go on; the server's next recall takes it up and answers as before
(superseded text never found, every note found). A child for another model, or one that would
have to rebuild, does nothing."""
from __future__ import annotations

import asyncio
import json
import time

from conftest import PEOPLE, T0, TEAMS, team_fact
from http_server import data, running, session_calls

from mdmem import MemoryRepo
from mdmem.auth.static_tokens import TokenFile
from mdmem.ops import index_catch_up
from mdmem.search import note_index
from mdmem.search.catch_up_aside import CatchUpAside


def recorded(state_path) -> dict:
    """The index's state.json: what the index on disk reflects."""
    return json.loads(state_path.read_text(encoding="utf-8"))


def recorded_commit(repo) -> str | None:
    return recorded(repo.index.state_path).get("commit")


def paths(hits) -> set[str]:
    return {h.path for h in hits}


def test_a_half_full_segment_is_caught_up_on_disk_by_a_child_and_recall_answers_as_before(repo, monkeypatch):
    monkeypatch.setattr(note_index, "ASIDE_AT", 3)
    first = team_fact(repo, "The ledger export runs at noon", key="export.time")
    for _ in range(2):  # a process's first two catch-ups walk the work tree (on disk)
        repo.recall("ledger", as_user="alice", now=T0)
    on_disk = recorded_commit(repo)
    repo.catch_up_aside()
    aside = repo.index.aside
    assert aside is not None
    written = []
    for i in range(3):
        written.append(team_fact(repo, f"Kiwi rollout step {i} waits for the canary", key=f"kiwi.step{i}",
                                  new_key=True))
        assert paths(repo.recall("kiwi rollout canary", as_user="alice", now=T0, k=10)) == {w.path for w in written}
    assert aside.started == 1  # at the third note held in memory, not before
    aside.wait()
    assert not aside.running()
    head = repo.store.head()
    assert recorded_commit(repo) == head != on_disk  # the child moved the index on disk to HEAD
    # The server takes it up: a supersession after it is answered, the old text never found.
    team_fact(repo, "The ledger export runs at midnight", key="export.time")
    hits = repo.recall("ledger export", as_user="alice", now=T0, k=10)
    assert [h.text for h in hits if h.path == first.path] == ["The ledger export runs at midnight"]
    assert paths(repo.recall("kiwi rollout canary", as_user="alice", now=T0, k=10)) == {w.path for w in written}
    assert aside.started == 1  # one note held since: no second child
    repo.close()


def test_the_child_does_nothing_for_another_model_or_a_rebuild(repo):
    team_fact(repo, "The ledger export runs at noon", key="export.time")
    repo.reindex()
    before = recorded_commit(repo)
    team_fact(repo, "The ledger export runs at midnight", key="export.time")
    root, backend = str(repo.root), repo.config.embedder.backend
    model = repo.index.model_id
    repo.close()
    assert index_catch_up.main([root, "another-model", backend]) == 2
    assert recorded_commit(repo) == before
    state = repo.index.state_path
    saved = recorded(state)
    state.write_text(json.dumps({**saved, "schema": -1}), encoding="utf-8")  # a rebuild is due
    assert index_catch_up.main([root, model, backend]) == 2
    assert recorded(state)["schema"] == -1
    state.write_text(json.dumps(saved), encoding="utf-8")
    assert index_catch_up.main([root, model, backend]) == 0
    assert recorded_commit(repo) == repo.store.head() != before


def test_a_child_that_failed_is_not_started_again_at_every_recall(repo):
    """Between half full and full each recall asks for one: after a failure, not for a while."""
    aside = CatchUpAside(repo.root, "none", "no-such-backend")  # the child cannot open the repository
    aside.start()
    aside.wait()
    assert not aside.running()
    for _ in range(3):
        aside.start()
    assert aside.started == 1


def test_the_http_server_catches_its_index_up_on_disk_in_a_child(tmp_path):
    """Turned on by `mdmem serve --http`: after ASIDE_AT writes (fewer than the server itself
    would write to disk at), the index on disk is at HEAD, and the server answers from it."""
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.remember("The ledger export runs at noon", as_user="alice", kind="working", subject="task:ledger",
                  key="state", source="user")
    state = repo.index.state_path
    repo.close()
    tokens = TokenFile(tmp_path / "tokens.json")
    token = tokens.add("alice", "alice-bot", frozenset({"read", "write"}))[1]
    writes = [("remember", {"text": f"Kiwi rollout step {i} waits for the canary", "kind": "episode",
                            "subject": "task:kiwi", "key": f"step{i}"}) for i in range(note_index.ASIDE_AT)]
    with running(repo.root, tokens.path, "--rate", "0") as server:  # 100 calls at once
        # A process's first catch-ups walk the work tree (on disk, in the server): past them first.
        first = [("recall", {"query": "ledger", "k": 3})] * 3
        answers = asyncio.run(session_calls(server.url, token, [*first, *writes, ("recall", {"query": "kiwi", "k": 3})]))
        answers = answers[len(first):]
        assert all(data(a)["status"] == "committed" for a in answers[:-1]), data(answers[0])
        head = data(answers[-2])["commit"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and recorded(state).get("commit") != head:
            time.sleep(0.1)
        assert recorded(state).get("commit") == head
        answers = asyncio.run(session_calls(server.url, token, [
            ("remember", {"text": "The ledger export runs at midnight", "kind": "working", "subject": "task:ledger",
                          "key": "state"}),
            ("recall", {"query": "ledger export", "k": 5})]))
        assert data(answers[0])["status"] == "committed", data(answers[0])
        texts = [h["text"] for h in data(answers[1])["hits"]]
        assert any("midnight" in t for t in texts) and not any("noon" in t for t in texts), texts


def test_hand_edits_held_in_memory_do_not_start_a_child_at_every_write(repo, monkeypatch):
    """The child catches up to HEAD only: work-tree files the server holds in memory (hand edits
    its watch saw) never reach disk through it, so counting them started a child at every write
    that moved nothing (~0.5 s of CPU each)."""
    monkeypatch.setattr(note_index, "ASIDE_AT", 3)
    edited = [team_fact(repo, f"Walrus gauge {i} reads low", key=f"walrus{i}", new_key=True) for i in range(3)]
    for _ in range(2):  # a process's first two catch-ups walk the work tree (on disk)
        repo.recall("walrus", as_user="alice", now=T0)
    repo.catch_up_aside()
    aside = repo.index.aside
    for e in edited:
        full = repo.root / e.path
        full.write_text(full.read_text(encoding="utf-8").replace("reads low", "reads high"), encoding="utf-8")
    time.sleep(0.2)  # the kernel's events
    assert len(repo.recall("walrus gauge reads high", as_user="alice", now=T0, k=10)) == 3
    for i in range(5):
        team_fact(repo, f"Kiwi rollout step {i} waits for the canary", key=f"kiwi.step{i}", new_key=True)
        repo.recall("kiwi", as_user="alice", now=T0)
        aside.wait()
    assert aside.started == 1  # at the third write, not at the first and after each since
    repo.close()


def test_the_child_leaves_the_servers_deferred_write_journal_alone(repo):
    """A server defers git's index entries and lists them in its journal; the child repairing
    them took the write lock and walked HEAD's tree while the server's writes waited."""
    team_fact(repo, "The ledger export runs at noon", key="export.time")
    repo.reindex()
    model, backend = repo.index.model_id, repo.config.embedder.backend
    journal = repo.store.pending_path
    journal.write_text(journal.read_text(encoding="utf-8") if journal.exists() else "{}", encoding="utf-8")
    before = journal.read_bytes()
    assert index_catch_up.main([str(repo.root), model, backend]) == 0
    assert journal.exists() and journal.read_bytes() == before
    repo.close()
