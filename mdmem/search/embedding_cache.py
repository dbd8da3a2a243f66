"""The embedding cache: vectors by a hash of model and text, never by note id, so a rebuild
or a renamed note pays nothing for text it has embedded before. SQLite under ``.mdmem/``
with secure_delete on, so a purged row's bytes are overwritten rather than left in free
pages. (The current notes' vectors live in the full-text index, see doctable.)
"""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np


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


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA secure_delete=ON")
    db.execute("PRAGMA journal_mode=DELETE")
    return db


class EmbeddingCache:
    def __init__(self, path: Path):
        self.path = path
        self.db = _connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, model TEXT, vec BLOB)")

    def get_many(self, keys: list[str]) -> dict[str, np.ndarray]:
        out = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            rows = self.db.execute(f"SELECT key, vec FROM cache WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            out.update({k: np.frombuffer(v, dtype=np.float32) for k, v in rows})
        return out

    def put_many(self, model_id: str, items: dict[str, np.ndarray]) -> None:
        with _Tx(self.db):
            self.db.executemany("INSERT OR REPLACE INTO cache VALUES (?, ?, ?)",
                                [(k, model_id, v.astype(np.float32).tobytes()) for k, v in items.items()])

    def purge(self, keys: list[str]) -> int:
        n = 0
        with _Tx(self.db):
            for k in keys:
                n += self.db.execute("DELETE FROM cache WHERE key = ?", (k,)).rowcount
        self.db.execute("VACUUM")
        return n

    def close(self) -> None:
        self.db.close()
