"""The vector store (current notes' vectors by path) and the embedding cache (vectors by
a hash of model and text, never by note id). Both are SQLite files under ``.mdmem/`` with
secure_delete on, so a purged row's bytes are overwritten rather than left in free pages.
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


class VectorStore:
    """path -> vector for the current notes, with the fields the visibility and liveness
    filters need, loaded into numpy arrays so the filter runs before ranking."""

    _COLS = "path, root, kind, subject, valid_from, valid_until, expires_at"

    def __init__(self, path: Path):
        self.path = path
        self.db = _connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS vectors (path TEXT PRIMARY KEY, root TEXT, kind TEXT, "
                        "subject TEXT, valid_from INTEGER, valid_until INTEGER, expires_at INTEGER, model TEXT, "
                        "key TEXT, vec BLOB)")
        self._loaded = False

    def upsert(self, model_id: str, rows: list[tuple[dict, str, np.ndarray]]) -> None:
        """rows: (the note's index document, its cache key, its vector)."""
        with _Tx(self.db):
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(d["path"], d["root"], d["kind"], d["subject"], d["valid_from"], d["valid_until"],
                  d["expires_at"], model_id, k, v.astype(np.float32).tobytes()) for d, k, v in rows])
        self._loaded = False

    def delete(self, paths) -> int:
        n = 0
        with _Tx(self.db):
            for p in paths:
                n += self.db.execute("DELETE FROM vectors WHERE path = ?", (p,)).rowcount
        self._loaded = False
        return n

    def paths(self) -> set[str]:
        return {p for (p,) in self.db.execute("SELECT path FROM vectors")}

    def _load(self) -> None:
        rows = self.db.execute(f"SELECT {self._COLS}, vec FROM vectors ORDER BY path").fetchall()
        self._paths = [r[0] for r in rows]
        self._row = {p: i for i, p in enumerate(self._paths)}
        # Roots, kinds and subjects as integer codes, so the filters are fast numpy compares.
        self._codes: dict[str, dict[str, int]] = {}
        self._cols: dict[str, np.ndarray] = {}
        for col, i in (("root", 1), ("kind", 2), ("subject", 3)):
            codes = self._codes[col] = {}
            self._cols[col] = np.array([codes.setdefault(r[i], len(codes)) for r in rows], dtype=np.int32)
        self._times = np.array([r[4:7] for r in rows], dtype=np.int64).reshape(-1, 3)
        self._matrix = (np.vstack([np.frombuffer(r[7], dtype=np.float32) for r in rows])
                        if rows else np.zeros((0, 1), dtype=np.float32))
        self._loaded = True

    def _match(self, col: str, values: list[str]) -> np.ndarray:
        codes = [self._codes[col][v] for v in values if v in self._codes[col]]
        return np.isin(self._cols[col], np.array(codes, dtype=np.int32))

    def search(self, query: np.ndarray, *, roots: list[str], at: int, kinds: list[str] | None = None,
               subject: str | None = None, limit: int = 50) -> list[tuple[str, float]]:
        """Top ``limit`` (path, cosine) among vectors the filters allow, filtered first."""
        if not self._loaded:
            self._load()
        if not self._paths or self._matrix.shape[1] != query.shape[0]:
            return []
        mask = self._match("root", roots)
        if kinds:
            mask &= self._match("kind", kinds)
        if subject:
            mask &= self._match("subject", [subject])
        t = self._times
        mask &= (t[:, 0] <= at) & (t[:, 1] > at) & (t[:, 2] > at)
        idx = np.flatnonzero(mask)
        if not len(idx):
            return []
        sims = self._matrix[idx] @ query if len(idx) < len(self._paths) // 2 else (self._matrix @ query)[idx]
        top = np.argpartition(-sims, limit)[:limit] if len(sims) > limit else np.arange(len(sims))
        top = top[np.argsort(-sims[top])]
        return [(self._paths[idx[i]], float(sims[i])) for i in top]

    def cosines(self, query: np.ndarray, paths: list[str]) -> dict[str, float]:
        if not self._loaded:
            self._load()
        rows = [(p, self._row[p]) for p in paths if p in self._row]
        if not rows or self._matrix.shape[1] != query.shape[0]:
            return {}
        sims = self._matrix[[r for _, r in rows]] @ query
        return {p: float(x) for (p, _), x in zip(rows, sims)}

    def close(self) -> None:
        self.db.close()
