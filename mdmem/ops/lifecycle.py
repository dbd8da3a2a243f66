"""A note's end and its place: retiring it (no longer true from a time), sweeping expired notes
away, moving it to another key (one commit: the old path goes, the new one comes, history
follows it)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BadInput, Conflict, Refused
from ..model.clock import TimeLike, format_time, parse_time, resolve_write_time
from ..policy import gate
from ..policy.access import require_user
from ..results import SweepResult, WriteResult
from ..storage.trailers import Trailers
from ..storage.worktree import scan_notes
from ..model import layout
from . import holds, read, write
from .holds import MOVED_FROM
from .state import RepoState


def retire(repo: RepoState, *, as_user: str, path: str, valid_until: TimeLike = None,
           expect_version: str | None = None, now: TimeLike = None, channel: str = gate.HUMAN,
           source: str | None = None) -> WriteResult:
    """Mark a note as no longer true from ``valid_until`` (default now). Over the agent channel
    the gate judges the retirement like the agent's write of that note (its kind, its root):
    trusted, it is committed with the agent named; else it is held for a person's review."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    end = parse_time(valid_until, field="valid_until") if valid_until is not None else when
    if channel not in gate.CHANNELS:
        raise BadInput(f"channel: {channel!r}; use {gate.HUMAN!r} or {gate.AGENT!r}")
    if channel == gate.AGENT and not (source and gate.is_agent_source(source)):
        raise BadInput(f"source: a retirement over the agent channel is recorded as agent:<name>, not {source!r}")

    def prepare_now() -> write.Pending:
        stored = read.visible_stored(repo, user, path)
        repo.access.check_write(user, stored.root)
        gate.check_expected_version(path, expect_version, stored.version)
        if stored.note.valid_until is not None and stored.note.valid_until <= end:
            raise BadInput(f"{path}: already ended at {format_time(stored.note.valid_until)}")
        if stored.note.valid_from is not None and end < stored.note.valid_from:
            raise BadInput(f"valid_until: {format_time(end)} is before the note's valid_from "
                           f"{format_time(stored.note.valid_from)}; give a time at or after it")
        pending = write.Pending(path, stored.note.evolve(valid_until=end), "retire", stored.version)
        if source is not None:
            pending.extra_trailers = (("Memory-Acting-Source", source),)
        return pending

    if channel == gate.AGENT and source is not None:
        with repo.store.locked():
            pending = prepare_now()
            verdict = agent_verdict(repo, source, pending.note.kind, path)
            if not verdict.trusted:
                return holds.hold(repo, user, path, pending.note, verdict.reason, when, channel=channel,
                                  new_key=False, expect_version=pending.superseded, claimed_source=None)
    return write.commit_pending(repo, user, when, prepare_now)


def agent_verdict(repo: RepoState, source: str, kind: str, path: str) -> gate.Provenance:
    """The gate's judgement of an agent's change to the note at ``path`` (retire, move), as of
    the repository's trust settings."""
    trust = repo.config.trust
    return gate.judge_source(source, repo.contracts.resolve(kind), trust.sources, trust.agent_kinds,
                             root=layout.root_of(path), agent_team_kinds=trust.agent_team_kinds)


def move(repo: RepoState, *, as_user: str, path: str, key: str, expect_version: str | None = None,
         extra: Mapping[str, Any] | None = None, now: TimeLike = None, channel: str = gate.HUMAN,
         source: str | None = None) -> WriteResult:
    """Move the keyed note at ``path`` to ``key`` (same root, subject and kind; the same note:
    its id, text and fields, with ``extra`` fields set): one commit that removes the old path
    and adds the new one, so `git log --follow` and ``history`` of the new path show every
    version before the move. Over the agent channel the gate judges it like the agent's write
    of that note: trusted, committed with the agent named; else held, the hold being the move."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    if channel not in gate.CHANNELS:
        raise BadInput(f"channel: {channel!r}; use {gate.HUMAN!r} or {gate.AGENT!r}")
    if channel == gate.AGENT and not (source and gate.is_agent_source(source)):
        raise BadInput(f"source: a move over the agent channel is recorded as agent:<name>, not {source!r}")
    layout.check_key(key)
    fields = write.check_extra(extra)

    def prepare_now() -> write.Pending:
        stored = read.visible_stored(repo, user, path)
        repo.access.check_write(user, stored.root)
        gate.check_expected_version(path, expect_version, stored.version)
        head = repo.store.blob_id(path)  # a person's edit is not moved unseen
        gate.check_clean(path, repo.store.worktree_blob_id(path, expect=head), head)
        contract = repo.contracts.resolve(stored.note.kind)
        if not contract.keyed or contract.name == "summary":
            raise BadInput(f"{path}: a {contract.name} note is not moved to another key (only keyed notes are)")
        note = stored.note.evolve(key=key, extra={**stored.note.extra, **fields})
        target = read.path_for(stored.root, contract, note.subject, key, when, note.text)
        if target == path:
            raise BadInput(f"key: {path} is already at key {key!r}")
        if read.read(repo, target) is not None or repo.store.blob_id(target) is not None:
            raise Conflict(f"{target}: a note is already there; move to another key, or retire that one first")
        # new_key: the mover names the key it wants; the old key leaves the folder in the same commit.
        pending = write.prepare(repo, user, target, note, contract, new_key=True, expect_version=None, now=when,
                                op="move")
        pending.moved_from = path
        pending.superseded = stored.version
        pending.extra_trailers = ((MOVED_FROM, path),) + ((("Memory-Acting-Source", source),) if source else ())
        return pending

    if channel == gate.AGENT and source is not None:
        with repo.store.locked():
            pending = prepare_now()
            verdict = agent_verdict(repo, source, pending.note.kind, path)
            if not verdict.trusted:
                return holds.hold(repo, user, pending.path, pending.note, verdict.reason, when, channel=channel,
                                  new_key=True, expect_version=None, claimed_source=None,
                                  moved_from=(path, pending.superseded or ""))
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
