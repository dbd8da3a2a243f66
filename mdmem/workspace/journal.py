"""Operations that change several scope repositories, journaled so a crash is finished repo by repo.

Each repository's own change is atomic (a commit by compare-and-swap; an erasure with its own
journal in that repository's .git). What can be cut short is the sequence: a write of notes for
three roots that committed in one, or an erasure that rewrote two repositories of five. Before
the first repository is touched the whole operation is written here (the arguments, and for each
repository its branch tip before); each repository done is marked. The next command that opens
the workspace finishes the rest (Workspace.finish_pending), repository by repository: a
repository whose tip moved since the journal was written did its part (the workspace lock keeps
every other writer of this workspace out meanwhile), one whose tip did not still has it to do.

The journal of a write holds the notes' text until it is done: it sits in the workspace's own
hidden folder (mode 0600), on the machine of the person who could read every one of those
repositories anyway, and is removed when the operation ends.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import JOURNAL_DIR


@dataclass
class Pending:
    """One multi-repository operation under way: ``op`` (``remember_many`` or ``forget``), its
    arguments, each repository's tip before (``before``: root -> commit or None) and the roots done."""

    id: str
    op: str
    user: str
    args: dict[str, Any]
    before: dict[str, str | None]
    done: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, "user": self.user, "args": self.args, "before": self.before,
                "done": self.done}


def folder(workspace: Path) -> Path:
    return workspace / JOURNAL_DIR


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out, default=str)  # times and paths as text: what remember takes back
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def start_op(workspace: Path, op: str, user: str, args: dict[str, Any], before: dict[str, str | None]) -> Pending:
    """Write the journal of an operation before any repository changes."""
    base = folder(workspace)
    base.mkdir(mode=0o700, exist_ok=True)
    pending = Pending(id=secrets.token_hex(6), op=op, user=user, args=args, before=before)
    _write(base / f"{pending.id}.json", pending.to_dict())
    return pending


def mark_done(workspace: Path, pending: Pending, root: str) -> None:
    pending.done.append(root)
    _write(folder(workspace) / f"{pending.id}.json", pending.to_dict())


def finish_op(workspace: Path, pending: Pending) -> None:
    (folder(workspace) / f"{pending.id}.json").unlink(missing_ok=True)


def pending_ops(workspace: Path) -> list[Pending]:
    """The operations a crash cut short, oldest first."""
    base = folder(workspace)
    if not base.is_dir():
        return []
    out = []
    for path in sorted(base.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(Pending(id=data["id"], op=data["op"], user=data["user"], args=data["args"],
                               before=data["before"], done=list(data.get("done", []))))
        except (ValueError, KeyError, OSError):
            continue  # a journal cut short while written (its .tmp) never started anything
    return out
