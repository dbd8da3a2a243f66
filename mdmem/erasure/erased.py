"""Which commits and blobs erasures removed, as THIS clone knows them: never committed.

A committed list of erased ids would be an oracle and a fetch list: a blob id is the hash of
the erased version (the scrubbed note with a guess put back confirms the guess), and any
reader could ask a remote for the id before it prunes. So the committed receipt carries no
old id; each clone keeps its own record here, in its git folder where no push or fetch
reaches: the erasing clone writes what its rewrite removed, and a clone that meets someone
else's erasure derives it from the old history it holds and the new one (:func:`derive`).
The guard keeps the same kind of record on the server (remote/guard.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..storage.gitdir import common_git_dir

RECORD = "mdmem-erased.jsonl"


def _path(root: Path) -> Path:
    return common_git_dir(Path(root)) / RECORD


def record(root: Path, receipt_id: str, *, commits, blobs) -> None:
    """Append what one erasure removed (appended again by a resumed job: reading unions them)."""
    path = _path(root)
    line = json.dumps({"receipt": receipt_id, "commits": sorted(commits), "blobs": sorted(blobs)}, sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _read(root: Path, field: str) -> set[str]:
    try:
        text = _path(root).read_text(encoding="utf-8")
    except OSError:
        return set()
    out: set[str] = set()
    for line in text.splitlines():
        try:
            value = json.loads(line).get(field, [])
            out |= {value} if isinstance(value, str) else set(value)
        except (ValueError, AttributeError, TypeError):
            continue
    return out


def commit_ids(root: Path) -> set[str]:
    """Commits erasures rewrote away, as this clone knows them."""
    return _read(root, "commits")


def blob_ids(root: Path) -> set[str]:
    """Versions (blob ids) erasures removed or scrubbed, as this clone knows them."""
    return _read(root, "blobs")


def receipts(root: Path) -> set[str]:
    """The receipts whose erased ids this clone has recorded."""
    return _read(root, "receipt")


def known_commits(root: Path, audit: str) -> set[str]:
    """Every erased commit this clone knows: its own record and any a legacy receipt listed."""
    from .receipt import erased_commit_ids
    return commit_ids(root) | erased_commit_ids(audit)


def known_blobs(root: Path, audit: str) -> set[str]:
    """Every erased note version (blob id) this clone knows: its record and legacy receipts'."""
    from .receipt import erased_blob_ids
    return blob_ids(root) | erased_blob_ids(audit)
