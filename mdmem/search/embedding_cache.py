"""The embedding cache: vectors by a hash of model and text, never by note id, so a rebuild
or a renamed note pays nothing for text it has embedded before. SQLite under ``.git/mdmem/``
with secure_delete on, so a purged row's bytes are overwritten rather than left in free
pages. (The current notes' vectors live in the full-text index, see doctable.)
"""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np

from ..cache import is_corrupt, move_aside, open_sqlite


def cache_key(model_id: str, text: str) -> str:
    return hashlib.sha256(f"{model_id}\x00{text}".encode()).hexdigest()


class _Tx:
    """One explicit transaction (autocommit mode would commit, and sync, every row)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, *rest):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def _setup(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA secure_delete=ON")
    db.execute("PRAGMA journal_mode=DELETE")
    # No fsync per transaction: each write's vectors cost ~59 ms of fsyncs on the loaded
    # test machine (half of a MiniLM write-until-searchable). A kill still leaves a
    # consistent file (the rollback journal is in the OS's cache); only a power loss could
    # damage it, and a damaged cache is moved aside and refilled (it is disposable).
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, model TEXT, vec BLOB)")
    db.execute("SELECT key, model, vec FROM cache LIMIT 1").fetchall()  # our columns, or not ours


class EmbeddingCache:
    def __init__(self, path: Path):
        self.path = path
        self.db = open_sqlite(path, _setup)

    def _reset(self, exc: BaseException) -> None:
        """The file is damaged: aside with it, and go on with an empty cache."""
        self.db.close()
        move_aside(self.path, str(exc))
        self.db = open_sqlite(self.path, _setup)

    def get_many(self, keys: list[str]) -> dict[str, np.ndarray]:
        try:
            return self._get_many(keys)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            self._reset(exc)
            return {}  # a cache miss costs an embedding, nothing more

    def _get_many(self, keys: list[str]) -> dict[str, np.ndarray]:
        out = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            rows = self.db.execute(f"SELECT key, vec FROM cache WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            for k, v in rows:
                if isinstance(v, bytes) and len(v) % 4 == 0 and v:
                    out[k] = np.frombuffer(v, dtype=np.float32)
        return out

    def put_many(self, model_id: str, items: dict[str, np.ndarray]) -> None:
        rows = [(k, model_id, v.astype(np.float32).tobytes()) for k, v in items.items()]
        try:
            with _Tx(self.db):
                self.db.executemany("INSERT OR REPLACE INTO cache VALUES (?, ?, ?)", rows)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            self._reset(exc)
            with _Tx(self.db):
                self.db.executemany("INSERT OR REPLACE INTO cache VALUES (?, ?, ?)", rows)

    def purge(self, keys: list[str]) -> int:
        n = 0
        with _Tx(self.db):
            for k in keys:
                n += self.db.execute("DELETE FROM cache WHERE key = ?", (k,)).rowcount
        self.db.execute("VACUUM")
        return n

    def keys(self) -> list[tuple[str, str]]:
        """(key, model) of every entry."""
        return list(self.db.execute("SELECT key, model FROM cache"))

    def models(self) -> list[str]:
        return [m for (m,) in self.db.execute("SELECT DISTINCT model FROM cache")]

    def retain(self, keep: set[str]) -> int:
        """Drop every entry whose key is not in ``keep`` (after an erasure: keep only what
        current history still holds), then VACUUM so freed pages keep no old vectors."""
        drop = [k for k, _ in self.keys() if k not in keep]
        with _Tx(self.db):
            self.db.executemany("DELETE FROM cache WHERE key = ?", [(k,) for k in drop])
        self.db.execute("VACUUM")
        return len(drop)

    def close(self) -> None:
        self.db.close()
