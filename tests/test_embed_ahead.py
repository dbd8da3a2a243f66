"""A write's notes are embedded on a worker thread after it commits (search/embed_ahead.py):
the next recall's catch-up takes that vector instead of embedding the note again; the vector
is the one the catch-up would have made; a process that has not embedded anything (a CLI
write) starts no worker; closing the repo leaves no worker thread."""
import threading
import time

import numpy as np
from conftest import team_fact
from embed_server import EmbedServer, vector

from mdmem.config import EmbedderConfig, UserConfig

CODE = "zebra-forty-two"


def use_server(repo, server):
    repo.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
    repo.user_config = UserConfig(embedder_url=server.url)


def documents_with(server, word):
    """The document texts sent to the server that contain ``word``."""
    return [t for r in list(server.requests) for t in (r["payload"].get("input") or [])
            if word in t and t.startswith("search_document:")]


def workers():
    return [t for t in threading.enumerate() if t.name.startswith("mdmem-embed-ahead")]


def test_a_written_note_is_embedded_ahead_and_the_recall_takes_that_vector(repo):
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
        assert workers() == []


def test_a_process_that_has_not_embedded_starts_no_worker(repo):
    before = workers()
    with EmbedServer() as server:
        use_server(repo, server)
        team_fact(repo, f"The ledger codename is {CODE} since March", key="ledger.codename", new_key=True)
        time.sleep(0.3)
        assert documents_with(server, CODE) == [] and workers() == before
        assert CODE in repo.recall(f"which note names {CODE}?", as_user="bob", k=3)[0].text  # embedded then
        repo.close()
