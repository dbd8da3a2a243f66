"""Held writes: a write the gate did not trust sits on a ``review/<id>`` branch of its own,
carrying everything it asked for, until a person approves or rejects it (ops/review.py)."""
from __future__ import annotations

import datetime as _dt
import re


from ..errors import BadInput
from ..model.note import Note, new_id, parse_note
from ..policy.gate import AGENT, HUMAN
from ..results import ReviewItem, WriteResult
from ..storage import sync_ops
from ..storage.gitstore import GitStore
from ..storage.trailers import Trailers, parse_trailers
from .state import RepoState

REVIEW_PREFIX = "review/"
REVIEW_TRAILER = "Memory-Review"  # on the approve or reject commit that closed a hold
# The ids hold() makes: the last ten characters of a lowercased ULID (Crockford base32).
HOLD_ID = re.compile(r"[0-9a-z]{10}")
MOVED_FROM = "Memory-Moved-From"  # on a move's commit (and its hold): the path the note left


def decisions(store: GitStore) -> dict[str, set[str]]:
    """review id -> the decisions this history holds for it (``approve``, ``reject``), from the
    commits that closed holds (their Memory-Review trailer)."""
    out: dict[str, set[str]] = {}
    for _commit, message in sync_ops.messages_with(store, f"{REVIEW_TRAILER}:"):
        trailers = parse_trailers(message)
        for line in message.splitlines():
            if line.startswith(REVIEW_TRAILER + ":"):
                out.setdefault(line.split(":", 1)[1].strip(), set()).add(trailers.get("op", ""))
    return out


def closed_ids(store: GitStore) -> set[str]:
    """Holds this history closed: an approve or reject commit names each. Sync and review go
    by this, so a hold closed in one clone is closed in all, whatever happened to any local
    branch or state."""
    return set(decisions(store))


def hold(repo: RepoState, user: str, path: str, note: Note, reason: str, when: _dt.datetime, *, channel: str,
         new_key: bool, expect_version: str | None, claimed_source: str | None,
         moved_from: tuple[str, str] | None = None) -> WriteResult:
    """Hold a write on a ``review/<id>`` branch. ``moved_from`` (path, version): the write is a
    move of that note, and its hold commit is the move itself (the old path gone), so the
    review's diff shows what approving it does."""
    review_id = new_id().lower()[-10:]
    branch = f"refs/heads/{REVIEW_PREFIX}{review_id}"
    base = repo.store.head()
    if base is None:  # mdmem init always commits: only a repo made by hand gets here
        raise BadInput(f"{repo.root}: no commit yet, so nothing to hold a write against; use mdmem init")
    # Everything the write asked for is kept with it, so approving it replays the same write.
    extra = [("Memory-Hold-Reason", reason), ("Memory-Channel", channel)]
    if new_key:
        extra.append(("Memory-New-Key", "true"))
    if expect_version:
        extra.append(("Memory-Expect-Version", expect_version))
    if claimed_source:
        extra.append(("Memory-Claimed-Source", claimed_source))
    changes: dict[str, bytes | None] = {path: note.dumps().encode()}
    if moved_from is not None:
        extra += [(MOVED_FROM, moved_from[0]), ("Memory-Moved-Version", moved_from[1])]
        changes[moved_from[0]] = None
    trailers = Trailers("hold", user, note.source, extra=tuple(extra))
    message = f"hold {note.kind} {note.subject}/{note.key or path.rsplit('/', 1)[-1]}\n\n{trailers.render()}"
    # The held commit sits on main's tip in a branch of its own, out of the work tree.
    repo.store.create_branch(REVIEW_PREFIX + review_id, base)
    commit = repo.store.commit(changes, message, actor=user, when=when,
                               branch=branch, worktree=False)
    return WriteResult("held", path, commit=commit, review_id=review_id, reason=reason, note_id=note.id)


def review_item(repo: RepoState, review_id: str) -> ReviewItem | None:
    """The held write on ``review/<review_id>``, or None if there is no such hold."""
    tip = repo.store.branch_commit(REVIEW_PREFIX + review_id)
    if tip is None or parse_trailers(tip.message).get("op") != "hold" or not tip.notes:
        return None
    path, blob = next(iter(tip.notes.items()))
    note = parse_note(path, repo.store.read_blob(blob))
    t = parse_trailers(tip.message)
    # The writer is who made the hold commit (its author identity), not what its trailer says.
    # A hold fetched from a remote may have been made by anyone with plain git: an identity
    # that maps to no declared person is no writer at all (approve refuses it).
    author = repo.config.committer(tip.author_email) or ""
    actor = t.get("actor", "")
    writer = author
    channel = AGENT if t.get("channel") == AGENT and author == actor else HUMAN
    # The held commit sits on main's tip of its day: its parent holds the version it was made on.
    base = repo.store.blob_id(path, f"{tip.commit}^")
    head = repo.store.head()
    now = repo.store.blob_id(path, head) if head else None
    return ReviewItem(review_id, path, note, writer, t.get("hold-reason", ""), tip.commit, channel=channel,
                      new_key=t.get("new-key") == "true", expect_version=t.get("expect-version") or None,
                      claimed_source=t.get("claimed-source") or None, base_version=base,
                      changed_since=now if now != base else None,
                      moved_from=t.get("moved-from") or None, moved_version=t.get("moved-version") or None)
