"""Per-scope consolidation: a deterministic digest of one root's live notes on one subject.

Inputs come from one scope root only, so a private note can never feed a team summary;
the gate checks the derived scope again when the digest is written.
"""
from __future__ import annotations

from ..storage.worktree import StoredNote

_ORDER = {"profile": 0, "procedure": 1, "decision": 2, "fact": 3, "working": 4, "episode": 5}


def build_digest(subject: str, root: str, inputs: list[StoredNote]) -> str:
    ordered = sorted(inputs, key=lambda s: (_ORDER.get(s.note.kind, 9), s.note.key or "", s.path))
    lines = [f"Digest of {subject} in {root}: {len(ordered)} live note(s)."]
    for s in ordered:
        label = f"{s.note.kind} {s.note.key}" if s.note.key else s.note.kind
        lines.append(f"- {label}: {s.note.first_line()}")
    return "\n".join(lines)
