"""A write's notes are embedded on a worker thread after it commits (search/embed_ahead.py):
the next recall's catch-up takes that vector instead of embedding the note again; the vector
is the one the catch-up would have made; a process that has not embedded anything (a CLI
write) starts no worker; closing the repo leaves no worker thread."""
import json
import threading
import time

import numpy as np
import pytest
from conftest import team_fact
from embed_server import EmbedServer, vector

from mdmem.config import EmbedderConfig, UserConfig
from mdmem.errors import GitFailed
from mdmem.ops import write

CODE = "zebra-forty-two"


def use_server(repo, server):
    repo.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
    repo.user_config = UserConfig(embedder_url=server.url)


def documents_with(server, word):
    """The document texts sent to the server that contain ``word``."""
    return [t for r in list(server.requests) for t in (r["payload"].get("input") or [])
            if word in t and t.startswith("search_document:")]


def workers():
    """The embedding worker threads alive (ahead and query), of every repo object: a test
    compares with those alive before it (a repo another test left open has its own)."""
    return [t for t in threading.enumerate() if t.name.startswith(("mdmem-embed-ahead", "mdmem-embed-query"))]


def test_a_written_note_is_embedded_ahead_and_the_recall_takes_that_vector(repo):
    before = workers()
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        repo.recall("when does billing deploy", as_user="bob")  # this process now embeds
        team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True)
        deadline = time.monotonic() + 10
        while not documents_with(server, CODE) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(documents_with(server, CODE)) == 1  # embedded with no recall asking yet
        hits = repo.recall(f"which note names {CODE}?", as_user="bob", k=3)
        assert hits and CODE in hits[0].text
        assert len(documents_with(server, CODE)) == 1  # the catch-up did not embed it again
        # ... and ranked it by the vector the server gives that text
        text = documents_with(server, CODE)[0]
        query = repo.index.embedder.embed_query(f"which note names {CODE}?")
        doc = np.asarray(vector(text), dtype=np.float32)
        assert abs(hits[0].cosine - float(query @ (doc / np.linalg.norm(doc)))) <= 5e-5  # hits round to 4 places
        repo.close()
        assert not set(workers()) - set(before)  # none of this repo's left


def asked_first(server, real, asked: list):
    """``real`` (a store method) run only once the server was asked for CODE's vector (at most
    5 s later); ``asked`` gets whether it had been by then."""
    def waiting(*args, **kwargs):
        deadline = time.monotonic() + 5
        while not documents_with(server, CODE) and time.monotonic() < deadline:
            time.sleep(0.01)
        asked.append(bool(documents_with(server, CODE)))
        return real(*args, **kwargs)
    return waiting


def test_an_approved_note_is_embedded_while_its_commit_is_made(repo, monkeypatch):
    """Every commit of notes hands them over before it is made (RepoState.committing): the
    worker embeds on the other core while git writes, not after."""
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        held = team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True,
                         source="tool:scraper")
        repo.recall("when does billing deploy", as_user="bob")  # this process now embeds
        repo.index.embedder.local = True  # as MiniLM is: texts never leave the machine
        asked: list = []
        monkeypatch.setattr(repo.store, "commit", asked_first(server, repo.store.commit, asked))
        repo.approve(held.review_id, as_user="dana", new_key=True)
        assert asked == [True]
        hits = repo.recall(f"which note names {CODE}?", as_user="bob", k=3)
        assert hits and CODE in hits[0].text
        assert len(documents_with(server, CODE)) == 1  # not again once committed, nor by the catch-up
        repo.close()


def test_a_remembered_note_is_embedding_before_the_write_takes_the_lock(repo, monkeypatch):
    """remember hands the note over as soon as it passed its checks (RepoState.writing), before
    the lock, the gate's reads and the views; the commit then hands nothing again."""
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        repo.recall("when does billing deploy", as_user="bob")  # this process now embeds
        repo.index.embedder.local = True  # as MiniLM is: texts never leave the machine
        locked, asked = repo.store.locked, []
        monkeypatch.setattr(repo.store, "locked", asked_first(server, locked, asked))
        team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True)
        monkeypatch.setattr(repo.store, "locked", locked)
        assert asked and asked[0]
        assert CODE in repo.recall(f"which note names {CODE}?", as_user="bob", k=3)[0].text
        assert len(documents_with(server, CODE)) == 1
        repo.close()


def test_a_servers_embedder_gets_a_text_only_once_it_is_committed(repo, monkeypatch):
    """Texts for an embedding server (Ollama, OpenAI) are handed over after the commit, not
    before: a write that fails to commit sends nothing to a third party."""
    secret = "zebra-forty-two-secret"
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        repo.recall("when does billing deploy", as_user="bob")  # this process now embeds
        assert repo.index.embedder.local is False

        def failing_commit(*args, **kwargs):
            time.sleep(0.2)  # git writing; the worker would have sent the text by now
            raise GitFailed("commit failed (a full disk, a bad signing key)")

        monkeypatch.setattr(repo.store, "commit", failing_commit)
        with pytest.raises(GitFailed):
            team_fact(repo, f"The ledger codename is {secret}", key="ledger.codename", new_key=True)
        time.sleep(0.3)
        assert documents_with(server, secret) == []
        monkeypatch.undo()
        team_fact(repo, f"The ledger codename is {secret}", key="ledger.codename", new_key=True)
        deadline = time.monotonic() + 10
        while not documents_with(server, secret) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(documents_with(server, secret)) == 1  # once committed: embedded ahead as before
        repo.close()


def test_a_held_write_is_not_embedded_ahead(repo):
    """A write held for review is not searchable: nothing of it is embedded ahead either."""
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        repo.recall("when does billing deploy", as_user="bob")  # this process now embeds
        r = team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True,
                      source="tool:scraper")
        assert r.status == "held"
        time.sleep(0.3)
        assert documents_with(server, CODE) == []
        assert not any(CODE in h.text for h in repo.recall(f"which note names {CODE}?", as_user="bob", k=3))
        repo.close()


def test_a_process_that_has_not_embedded_starts_no_worker(repo):
    before = workers()
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True)
        time.sleep(0.3)
        assert documents_with(server, CODE) == [] and not set(workers()) - set(before)
        assert CODE in repo.recall(f"which note names {CODE}?", as_user="bob", k=3)[0].text  # embedded then
        repo.close()


def test_a_bulk_import_embeds_each_committed_batch_while_it_writes_the_next(repo):
    """remember_many hands each committed batch's texts to the worker: embedded while the
    import writes on (a 10k MiniLM import took ~15 s longer than a rebuild of its notes), each
    text once; held and refused items are not embedded; the vectors are the ones the index uses."""
    before = workers()
    from conftest import T0

    with EmbedServer() as server:
        use_server(repo, server)
        items = [dict(text=f"Service {i} pages the on-call after {i + 3} failed health checks", kind="fact",
                      subject=f"service:svc{i % 7}", key=f"pager.{i}", scope="team", team="payments", new_key=True)
                 for i in range(25)]
        items[3]["source"] = "web:https://example.com"  # held for review
        items[4]["team"] = "search"  # bob is not in search: refused
        embedded_while_writing = []

        def progress(done, total, what):
            if what == "writing notes" and not embedded_while_writing:  # the first batch is committed
                deadline = time.monotonic() + 10
                while len(documents_with(server, "health checks")) < 9 and time.monotonic() < deadline:
                    time.sleep(0.01)
                embedded_while_writing.append(len(documents_with(server, "health checks")))

        result = write.remember_many(repo, items, as_user="bob", batch_size=10, progress=progress, now=T0,
                                     embed_ahead=True)
        assert [h["line"] for h in result.held] == [4] and [r["line"] for r in result.refused] == [5]
        assert len(result.committed) == 23
        # The first batch (items 1-11 but 4, held, and 5, refused): its 9 committed notes
        # embedded before the next batch is written.
        assert embedded_while_writing == [9]
        texts = documents_with(server, "health checks")
        assert len(texts) == len(set(texts)) == 23  # each committed note once, by the import
        assert not [t for t in texts if "Service 3 " in t or "Service 4 " in t]
        assert result.index["embedded"] == 23  # the catch-up's own count of notes it needed vectors for
        question = "whom does service 17 page after failed health checks?"
        hits = [h for h in repo.recall(question, as_user="dana", k=3, now=T0) if h.key == "pager.17"]
        assert hits
        assert len(documents_with(server, "health checks")) == 23  # the recall embedded nothing again
        text = [t for t in texts if "Service 17 " in t][0]
        query = repo.index.embedder.embed_query(question)
        doc = np.asarray(vector(text), dtype=np.float32)
        assert abs(hits[0].cosine - float(query @ (doc / np.linalg.norm(doc)))) <= 5e-5
        repo.close()
        assert not set(workers()) - set(before)  # none of this repo's left


def test_a_bulk_import_whose_embedder_fails_ahead_embeds_in_its_catch_up(repo):
    """What the worker makes is a guess: a batch it could not embed (the server down a moment)
    is embedded by the import's own catch-up, and the import still ends searchable. After one
    batch failed the worker tries no more (each try at a dead server may wait out a timeout)."""
    from conftest import T0

    with EmbedServer(models=()) as server:  # every model refused while the import writes
        use_server(repo, server)
        items = [dict(text=f"Queue {i} drains within {i + 2} minutes after a deploy", kind="fact",
                      subject="service:queue", key=f"drain.{i}", scope="team", team="payments", new_key=True)
                 for i in range(12)]

        tried_ahead = []

        def progress(done, total, what):
            if what == "writing notes" and done == len(items):
                seen, quiet_since = -1, time.monotonic()
                while time.monotonic() - quiet_since < 1.0:  # the worker has done what it will do
                    if len(server.requests) != seen:
                        seen, quiet_since = len(server.requests), time.monotonic()
                    time.sleep(0.02)
                tried_ahead.append(len(server.requests))
                server.models.add("nomic-embed-text")  # back before the catch-up

        result = write.remember_many(repo, items, as_user="bob", batch_size=5, progress=progress, now=T0,
                                     embed_ahead=True)
        assert tried_ahead == [1]  # three batches committed; the first failed, the others were not tried
        assert len(result.committed) == 12 and result.index["embedded"] == 12
        hits = repo.recall("how fast does queue 7 drain after a deploy?", as_user="dana", k=12, now=T0)
        assert "drain.7" in {h.key for h in hits} and all(h.cosine is not None for h in hits)
        repo.close()


def test_a_small_import_embeds_nothing_ahead_by_default(repo):
    """Embedding while writing is for big imports with a core to spare (on a busy machine it
    made them slower): a small one embeds in its catch-up only, as before."""
    from conftest import T0

    with EmbedServer() as server:
        use_server(repo, server)
        items = [dict(text=f"Cache {i} expires after {i + 5} minutes", kind="fact", subject="service:cache",
                      key=f"ttl.{i}", scope="team", team="payments", new_key=True) for i in range(12)]
        during = []

        def progress(done, total, what):
            if what == "writing notes" and done == len(items):
                time.sleep(0.5)
                during.append(len(documents_with(server, "expires after")))

        result = repo.remember_many(items, as_user="bob", batch_size=5, progress=progress, now=T0)
        assert during == [0] and len(result.committed) == 12
        assert len(documents_with(server, "expires after")) == 12  # then, by the catch-up
        repo.close()


def test_a_recall_refused_for_bad_input_sends_no_question(repo):
    """The question goes to a server embedder only once the recall's input is known good (it is
    embedded on a thread beside the catch-up)."""
    from mdmem.errors import BadInput

    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
        repo.recall("when does billing deploy", as_user="bob")
        with pytest.raises(BadInput):
            repo.recall("zqxv private question", as_user="bob", at="not a time")
        time.sleep(0.2)
        assert not [r for r in list(server.requests) if "zqxv" in json.dumps(r["payload"])]
        repo.close()


class _HeldEmbedder:
    """A local embedder whose texts containing "held" wait for ``release``; ``made``: a text
    without it was embedded."""
    local, ready, model_id = True, True, "held-test"

    def __init__(self):
        self.release, self.made = threading.Event(), threading.Event()

    def embed_documents(self, texts):
        if any("held" in t for t in texts):
            assert self.release.wait(10)
        else:
            self.made.set()
        return np.ones((len(texts), 4), dtype=np.float32)

    def embed_query(self, text):
        return np.ones(4, dtype=np.float32) / 2


def test_a_catch_up_waits_only_for_the_writes_whose_vectors_it_takes():
    """A recall after one write takes that write's vectors without waiting for another write
    still being embedded (it waited, with the index held, for every write under way)."""
    from mdmem.search.embed_ahead import EmbedAhead

    ahead, embedder = EmbedAhead(), _HeldEmbedder()
    try:
        ahead.start_texts(embedder, {"k-done": "a note already written"})
        assert embedder.made.wait(10)
        ahead.start_texts(embedder, {"k-held": "a held note still being embedded"})
        taken: list = []
        taker = threading.Thread(target=lambda: taken.append(ahead.take(["k-done"])))
        taker.start()
        taker.join(5)
        assert taken and list(taken[0]) == ["k-done"]  # not behind the held write
        embedder.release.set()
        assert list(ahead.take(["k-held"])) == ["k-held"]  # and that one is still there to take
    finally:
        embedder.release.set()
        ahead.close()


def test_a_recall_waits_for_a_written_notes_vector_without_holding_the_index(repo):
    """The recall after a write waits for that note's vector (still being made ahead) before it
    takes the index mutex (NoteIndex.settle_vectors): other recalls go on meanwhile, where they
    queued behind a catch-up waiting for it (20-28 ms a time under load); then it finds the note."""
    embedder = _HeldEmbedder()
    team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window")
    repo.index._embedder = embedder
    for _ in range(2):  # the index built with this embedder, and the calls that walk the tree
        repo.recall("billing deploys", as_user="bob")
    team_fact(repo, "The held ledger codename is zebra", key="ledger.codename", new_key=True)
    answers: list = []
    recall = threading.Thread(target=lambda: answers.append(repo.recall("ledger codename zebra", as_user="bob")))
    try:
        recall.start()
        time.sleep(0.3)
        assert recall.is_alive()  # waiting for the vector...
        assert repo.index.mutex.acquire(blocking=False)  # ... without the index
        repo.index.mutex.release()
    finally:
        embedder.release.set()
        recall.join(10)
    assert answers and any("zebra" in h.text for h in answers[0])
