"""A note's end: retiring it (no longer true from a time) and sweeping expired notes away."""
from __future__ import annotations

from ..errors import BadInput, Refused
from ..model.clock import TimeLike, format_time, parse_time, resolve_write_time
from ..policy import gate
from ..policy.access import require_user
from ..results import SweepResult, WriteResult
from ..storage.trailers import Trailers
from ..storage.worktree import scan_notes
from . import read, write
from .state import RepoState


def retire(repo: RepoState, *, as_user: str, path: str, valid_until: TimeLike = None,
           expect_version: str | None = None, now: TimeLike = None) -> WriteResult:
    """Mark a note as no longer true from ``valid_until`` (default now)."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    end = parse_time(valid_until, field="valid_until") if valid_until is not None else when

    def prepare_now() -> write.Pending:
        stored = read.visible_stored(repo, user, path)
        repo.access.check_write(user, stored.root)
        gate.check_expected_version(path, expect_version, stored.version)
        if stored.note.valid_until is not None and stored.note.valid_until <= end:
            raise BadInput(f"{path}: already ended at {format_time(stored.note.valid_until)}")
        if stored.note.valid_from is not None and end < stored.note.valid_from:
            raise BadInput(f"valid_until: {format_time(end)} is before the note's valid_from "
                           f"{format_time(stored.note.valid_from)}; give a time at or after it")
        return write.Pending(path, stored.note.evolve(valid_until=end), "retire", stored.version)

    return write.commit_pending(repo, user, when, prepare_now)


def sweep(repo: RepoState, *, as_user: str, now: TimeLike = None) -> SweepResult:
    """Remove expired notes the user may write, in one commit."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    with repo.store.locked():
        expired = []
        for root in repo.access.readable_roots(user):
            try:
                repo.access.check_write(user, root)
            except Refused:
                continue
            expired += [s for s in scan_notes(repo.root, repo.contracts, root,
                                              max_bytes=repo.config.note_max_bytes)[0]
                        if s.note.expires_at is not None and s.note.expires_at <= when]
        if not expired:
            return SweepResult(removed=[], commit=None)
        message = (f"sweep {len(expired)} expired note(s)\n\n"
                   + Trailers("expire", user, "system:sweep",
                              tuple(s.note.id for s in expired)).render())
        commit = write.commit_changes(repo, {s.path: None for s in expired}, message, actor=user, when=when)
        write.after_write(repo)
    return SweepResult(removed=[s.path for s in expired], commit=commit)
