"""What workspace operations return: results that span mounts, one entry per repository.
The to_dict rule is results.py's (every field always, times as ISO strings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..results import ErasurePlan, ErasureReceipt, ProofReport, Result


@dataclass(frozen=True)
class MountInfo(Result):
    """A mount as `mdmem workspace list` shows it. ``readable``/``writable``: what the repository's
    own mdmem.toml lets the workspace's person do there; ``problem``: why it cannot be opened."""

    root: str
    remote: str
    path: str
    head: str | None
    branch: str | None
    ahead: int | None
    behind: int | None
    dirty: list[str]
    readable: bool
    writable: bool
    problem: str | None = None


@dataclass(frozen=True)
class MountSync(Result):
    """One repository's sync: ``ok`` with mdmem.remote.sync's report, or the error that stopped it."""

    root: str
    remote: str
    ok: bool
    report: dict[str, Any] | None = None
    error: str | None = None
    error_kind: str | None = None


@dataclass(frozen=True)
class WorkspaceSync(Result):
    mounts: list[MountSync]

    @property
    def failed(self) -> list[MountSync]:
        return [m for m in self.mounts if not m.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"mounts": [m.to_dict() for m in self.mounts], "failed": [m.root for m in self.failed],
                "ok": not self.failed}


@dataclass(frozen=True)
class WorkspaceErasure(Result):
    """``forget`` across mounts: each repository's receipt (or plan, for a dry run), the repositories
    where nothing matched, and the ones not erased with why (not mounted, not permitted)."""

    receipts: dict[str, ErasureReceipt | ErasurePlan] = field(default_factory=dict)
    nothing: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # those of ``skipped`` the person may not erase


PASS, FAIL, INCOMPLETE = "PASS", "FAIL", "INCOMPLETE"


@dataclass(frozen=True)
class WorkspaceProof(Result):
    """``prove_gone`` across mounts: each readable repository's proof, and every repository it could
    not read, named with why. ``verdict``: FAIL when any proof failed or a workspace file (its
    MEMORY.md, a journal) holds a needle, else INCOMPLETE when any repository was not read, else
    PASS. ``passed`` only on PASS."""

    proofs: dict[str, ProofReport]
    unread: dict[str, str]
    verdict: str
    workspace_files: list[str] = field(default_factory=list)  # the workspace's own files still holding one

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_dict(self) -> dict[str, Any]:
        return {"proofs": {r: p.to_dict() for r, p in self.proofs.items()}, "unread": self.unread,
                "workspace_files": self.workspace_files, "verdict": self.verdict, "passed": self.passed}
