"""Per-scope consolidation: a deterministic digest of one root's live notes on one subject.

Inputs come from one scope root only, so a private note can never feed a team summary;
the gate checks the derived scope again when the digest is written.
"""
from __future__ import annotations

from ..errors import NotFound, Refused
from ..model import layout
from ..model.clock import TimeLike, resolve_now
from ..policy.access import require_user
from ..policy.gate import SYSTEM
from ..results import WriteResult
from ..storage.worktree import StoredNote, scan_notes
from . import read, write
from .state import RepoState

DIGEST_SLACK = 4096  # the frontmatter and the closing line
_ORDER = {"profile": 0, "procedure": 1, "decision": 2, "fact": 3, "working": 4, "episode": 5}


def build_digest(subject: str, root: str, inputs: list[StoredNote],
                 max_bytes: int | None = None) -> tuple[str, list[StoredNote]]:
    """The digest's text and the notes it lists. Past ``max_bytes`` (a digest is a note, and a
    note has a size limit) the rest are counted, not listed: a large subject still gets a
    digest (2,600 facts made it 400 KB and consolidate refused)."""
    ordered = sorted(inputs, key=lambda s: (_ORDER.get(s.note.kind, 9), s.note.key or "", s.path))
    lines = [f"Digest of {subject} in {root}: {len(ordered)} live note(s)."]
    listed: list[StoredNote] = []
    budget = None if max_bytes is None else max_bytes - DIGEST_SLACK - len(lines[0])
    for s in ordered:
        label = f"{s.note.kind} {s.note.key}" if s.note.key else s.note.kind
        line = f"- {label}: {s.note.first_line()}"
        cost = len(line.encode()) + 1 + len(s.note.id) + 3  # the line, and the id in derived_from
        if budget is not None:
            if cost > budget:
                lines.append(f"- ... and {len(ordered) - len(listed)} more note(s), not listed: a digest is at most "
                             f"{max_bytes:,} bytes; consolidate a narrower subject (like {subject}:<part>)")
                break
            budget -= cost
        lines.append(line)
        listed.append(s)
    return "\n".join(lines), listed


def consolidate(repo: RepoState, *, as_user: str, subject: str, scope: str | None = None, team: str | None = None,
                now: TimeLike = None) -> WriteResult:
    """A deterministic digest of one scope's live notes about one subject, written as the
    subject's summary through the gate."""
    scope = layout.default_scope(scope, team)
    user = require_user(as_user)
    when = resolve_now(now)
    root = read.root_for(user, scope, team, None)
    if not repo.access.may_read_root(user, root):
        raise Refused(f"consolidate: {user} may not read {root}")
    inputs = [s for s in scan_notes(repo.root, repo.contracts, f"{root}/{layout.subject_dir(subject)}",
                                    max_bytes=repo.config.note_max_bytes)[0]
              if s.note.is_live(when) and s.note.kind != "summary" and s.note.subject == subject]
    # A note verify flags (no permitted writer committed it) must not reach a digest that
    # mdmem's own trusted source then carries into views and startup.
    untrusted = repo.trust.flags()
    inputs = [s for s in inputs if s.path not in untrusted]
    if not inputs:
        raise NotFound(f"consolidate: no live notes about {subject} in {root}")
    text, listed = build_digest(subject, root, inputs, max_bytes=repo.config.note_max_bytes)
    return write.remember(repo, text, as_user=user, kind="summary", subject=subject, scope=scope, team=team,
                          source="system:consolidate", derived_from=[s.note.id for s in listed], now=when,
                          channel=SYSTEM)
