"""Embedding a write's notes while it commits, for the recall that follows it.

The recall after a write embedded the new note first (~11 ms of MiniLM on a ~60-word note,
more under load) before it could search. An agent writes, thinks for seconds, then recalls:
here the write hands its notes' texts to one worker thread before it commits (render of the
views, tree edit, git's index: 10-25 ms at 10k notes), which embeds them on the other core
(onnxruntime and the HTTP embedders release the GIL) while the commit is made and the caller
goes on; the index's catch-up takes the vectors it finds instead of embedding again (waiting
for one still being made). Started after the commit instead, the catch-up
waited 9-17 ms for it: write until searchable at 10k MiniLM notes, p50 of 20, quiet machine,
53-59 -> 38 ms; remember itself unchanged (25-28 ms).

What a worker makes is only ever a guess: it is keyed by the embedding cache's key (model and
exact text), so a vector is used only for the very text the catch-up embeds; a note edited
again, a failed embedding -- the catch-up just embeds as before. Nothing is written anywhere
from the worker thread (the cache's SQLite connection stays on the caller's), and at most
MAX_KEYS vectors wait in memory.

Only an embedder already made and ready is used: a one-shot CLI write never loads the model
for a recall that will not come in its process.

A bulk import (ops/write.remember_many) is the exception: its own catch-up embeds every note
it wrote, so each committed batch's texts are handed over at once (:meth:`EmbedAhead.start_bulk`,
no limit, the model loaded if need be) and embedded while the import writes the next batches,
reads its notes back and builds their documents: the writing is one core of Python, the other
core was idle (a 10k MiniLM import took ~15 s longer than a cold rebuild of the same notes).
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

from ..errors import NoteInvalid
from ..model.layout import is_note_path
from ..model.note import parse_note
from ..results import ProgressCallback
from ..storage.locks import renew_after_fork
from .embedding_cache import cache_key
from .fulltext import embedding_texts

# A write of more notes than this is a bulk import: its catch-up embeds in batches with progress.
MAX_NOTES = 8
MAX_WRITES = 8  # writes embedded ahead and not yet taken (a process that never recalls)
MAX_KEYS = 64


class EmbedAhead:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._coming: list[tuple[frozenset[str], Future]] = []  # a write's keys; its future: key -> vector
        self._bulk: list[tuple[int, Future]] = []  # a bulk import's batches: (texts, its future)
        self._bulk_failed = threading.Event()  # a batch of this import failed: the rest are not tried
        self._ready: OrderedDict[str, np.ndarray] = OrderedDict()
        self._pool: ThreadPoolExecutor | None = None
        self._query_pool: ThreadPoolExecutor | None = None
        renew_after_fork(self)

    def renew_after_fork(self) -> None:
        """In a forked child the worker threads are not there: what they were making is dropped."""
        self._lock = threading.Lock()
        self._coming, self._ready, self._pool, self._query_pool = [], OrderedDict(), None, None
        self._bulk, self._bulk_failed = [], threading.Event()

    def query(self, embedder, text: str) -> Future:
        """A recall's question embedded on a thread of its own (never behind a note being
        embedded ahead) while the caller catches the index up and runs the BM25F half: the
        future's result is ``embedder.embed_query(text)``."""
        with self._lock:
            if self._query_pool is None:
                self._query_pool = ThreadPoolExecutor(1, thread_name_prefix="mdmem-embed-query")
            future = self._query_pool.submit(embedder.embed_query, text)
        # Hand the GIL over now: the worker takes it to tokenise and enter onnxruntime (which
        # releases it) at once, instead of waiting out a switch interval (5 ms) behind the
        # caller's Python. Its result needs the GIL only when the caller waits for it.
        time.sleep(0)
        return future

    def start(self, embedder, changes: dict[str, bytes | None]) -> None:
        """Embed the notes among ``changes`` (path -> bytes) on the worker, if ``embedder`` is
        ready and they are few."""
        notes = [(p, d) for p, d in changes.items() if d is not None and is_note_path(p)]
        if not notes or len(notes) > MAX_NOTES or embedder is None or not getattr(embedder, "ready", False):
            return
        # Parsed here (~0.5 ms a note): the worker then holds the GIL only for moments, so the
        # caller never waits a switch interval (5 ms) behind a YAML parse on the worker.
        self.start_texts(embedder, _texts(embedder.model_id, notes))

    def start_texts(self, embedder, texts: dict[str, str]) -> None:
        """Embed ``texts`` (cache key -> text, see :func:`note_texts`) on the worker, if
        ``embedder`` is ready."""
        if embedder is None or not getattr(embedder, "ready", False):
            return
        with self._lock:
            # Not again what is being made or was made (the write handed its notes over
            # before committing, then again once committed).
            made = set(self._ready).union(*(keys for keys, _ in self._coming))
            texts = {k: t for k, t in texts.items() if k not in made}
            if not texts:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="mdmem-embed-ahead")
            self._coming.append((frozenset(texts), self._pool.submit(_embed, embedder, texts)))
            del self._coming[:-MAX_WRITES]

    def start_bulk(self, embedder, texts: dict[str, str]) -> None:
        """Embed a bulk import's batch (cache key -> text) on the worker, whatever its size;
        kept until the next :meth:`take` (which waits for all of them) or :meth:`drop_bulk`."""
        with self._lock:
            # Not again what an ordinary write's hand-over is making (a batch of <= MAX_NOTES,
            # committed with an embedder ready) or has made: the catch-up takes those too.
            made = set(self._ready).union(*(keys for keys, _ in self._coming))
            texts = {k: t for k, t in texts.items() if k not in made}
            if not texts or embedder is None:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="mdmem-embed-ahead")
            if not self._bulk:
                self._bulk_failed = threading.Event()
            self._bulk.append((len(texts), self._pool.submit(_embed_bulk, embedder, texts, self._bulk_failed)))

    def drop_bulk(self) -> None:
        """The import stopped before its catch-up: batches not started are cancelled, the
        vectors made are let go (the one being embedded finishes on the worker)."""
        with self._lock:
            bulk, self._bulk = self._bulk, []
        for _, batch in bulk:
            batch.cancel()

    def settle(self, keys: set[str], timeout: float) -> set[str]:
        """Wait, up to ``timeout`` seconds, for the writes still embedding any of ``keys``
        (taking nothing: :meth:`take` does); the keys no write is still embedding."""
        with self._lock:
            making = [(made, future) for made, future in self._coming if made & keys and not future.done()]
        if making:
            wait([future for _, future in making], timeout=timeout)
        return keys.difference(*(made for made, future in making if not future.done()))

    def take(self, keys: list[str], progress: ProgressCallback | None = None,
             what: str = "embedding") -> dict[str, np.ndarray]:
        """The vectors made ahead for ``keys`` (waiting for the writes still embedding one of
        them, and for a bulk import's batches: ``progress(done, total, what)`` as they finish)."""
        wanted = set(keys)
        out: dict[str, np.ndarray] = {}
        with self._lock:
            bulk, self._bulk = self._bulk, []
        total, done = sum(n for n, _ in bulk), 0
        for n, batch in bulk:
            try:
                vectors = batch.result()
            except Exception:  # noqa: BLE001 -- a guess that failed: the catch-up embeds itself
                vectors = {}
            # Only what was asked for: the rest of a bulk batch is not kept (no MAX_KEYS
            # window of thousands, and not evicting the ordinary writes' vectors).
            out.update((k, v) for k, v in vectors.items() if k in wanted)
            done += n
            if progress is not None:
                progress(done, total, what)
        with self._lock:
            # Only the writes that make a wanted text, and those already made: a write still
            # being embedded that this catch-up does not need is not waited for (a recall
            # after one write waited 12-28 ms, index held, for the next write's vectors).
            coming, left = [], []
            for write in self._coming:
                (coming if write[0] & wanted or write[1].done() else left).append(write)
            self._coming = left
        for _, batch in coming:
            try:
                vectors = batch.result()
            except Exception:  # noqa: BLE001 -- a guess that failed: the catch-up embeds itself
                continue
            with self._lock:
                self._ready.update(vectors)
                while len(self._ready) > MAX_KEYS:
                    self._ready.popitem(last=False)
        with self._lock:
            out.update({k: self._ready.pop(k) for k in keys if k in self._ready})
        return out

    def close(self) -> None:
        """Wait for the worker (a vector half made at interpreter exit is not left running)."""
        with self._lock:
            pools, self._pool, self._query_pool = (self._pool, self._query_pool), None, None
            self._coming, self._ready, self._bulk = [], OrderedDict(), []
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


def note_texts(model_id: str, notes) -> dict[str, str]:
    """cache key -> text, for every text the catch-up will embed for these notes."""
    return {cache_key(model_id, text): text for note in notes
            for text in embedding_texts(note.key or "", note.text, note.context or "")}


def _texts(model_id: str, notes: list[tuple[str, bytes]]) -> dict[str, str]:
    parsed = []
    for path, data in notes:
        try:
            parsed.append(parse_note(path, data))
        except NoteInvalid:
            continue
    return note_texts(model_id, parsed)


def _embed_bulk(embedder, texts: dict[str, str], failed: threading.Event) -> dict[str, np.ndarray]:
    """A bulk batch; after one failed (an embedding server down: each try may wait out its
    timeout) the rest are not tried, and the catch-up, embedding itself, reports the error."""
    if failed.is_set():
        return {}
    try:
        return _embed(embedder, texts)
    except BaseException:
        failed.set()
        raise


def _embed(embedder, texts: dict[str, str]) -> dict[str, np.ndarray]:
    return dict(zip(texts, embedder.embed_documents(list(texts.values()))))
