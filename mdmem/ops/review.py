"""A person's decisions on held writes (ops/holds.py): list them, approve one (committed
through the gate's other checks, replaying what it asked for), reject one (audited)."""
from __future__ import annotations

import json

from ..errors import NotFound, Refused
from ..model import layout
from ..model.clock import TimeLike, format_time, resolve_now
from ..policy import gate
from ..policy.access import require_user
from ..results import ReviewItem, WriteResult
from ..storage.gitstore import Trailers
from . import write
from .holds import REVIEW_PREFIX, review_item
from .state import RepoState

REVIEW_AUDIT_PATH = "audit/reviews.jsonl"


def review_list(repo: RepoState, *, as_user: str) -> list[ReviewItem]:
    user = require_user(as_user)
    items = []
    for name in repo.store.branches(REVIEW_PREFIX):
        item = review_item(repo, name[len(REVIEW_PREFIX):])
        if item and repo.access.may_read_root(user, layout.parse_path(item.path).root):
            items.append(item)
    return items


def review_or_missing(repo: RepoState, user: str, review_id: str) -> ReviewItem:
    item = review_item(repo, review_id)
    if item is None or not repo.access.may_read_root(user, layout.parse_path(item.path).root):
        raise NotFound(f"review {review_id}: no held write with that id visible to {user}")
    return item


def approvers(repo: RepoState, review_id: str, *, as_user: str) -> list[str]:
    """Who may approve the held write ``review_id`` (a second person; see policy.gate)."""
    user = require_user(as_user)
    item = review_or_missing(repo, user, review_id)
    root = layout.parse_path(item.path).root
    return gate.approvers(item.actor, item.channel, self_approve=repo.config.self_approve, root=root,
                          readers=repo.access.readers_of_root(root))


def approve(repo: RepoState, review_id: str, *, as_user: str, new_key: bool = False, override: bool = False,
            now: TimeLike = None) -> WriteResult:
    """A person approves a held write: it is committed to main through the gate's other checks,
    with the arguments it was held with (new_key, expect_version). Not the writer's own
    (unless ``[review] self_approve``); the MCP server offers no way to approve."""
    user = require_user(as_user)
    item = review_or_missing(repo, user, review_id)
    root = layout.parse_path(item.path).root
    if item.actor not in repo.access.writers_of_root(root):
        raise Refused(f"review {review_id}: its commit was made by {item.actor or 'no declared person'}, who may not "
                      f"write {root} (a hold made with plain git, or fetched from a remote); reject it")
    gate.check_approver(user, item.actor, item.channel, self_approve=repo.config.self_approve, root=root,
                        readers=repo.access.readers_of_root(root), review_id=review_id)
    gate.check_unchanged_since_hold(item.path, item.base_version, item.changed_since, override=override)
    contract = repo.contracts.resolve(item.note.kind)
    when = resolve_now(now)

    def prepare_now() -> write.Pending:
        pending = write.prepare(repo, user, item.path, item.note, contract, new_key=new_key or item.new_key,
                                expect_version=item.expect_version, now=when)
        extra = [("Memory-Approved-By", user), ("Memory-Review", review_id)]
        if item.claimed_source:
            extra.append(("Memory-Claimed-Source", item.claimed_source))
        pending.extra_trailers = tuple(extra)
        return pending

    result = write.commit_pending(repo, item.actor or user, when, prepare_now, op="approve", evidence=(item.commit,))
    repo.store.delete_branch(REVIEW_PREFIX + review_id)
    return result


def reject(repo: RepoState, review_id: str, *, as_user: str, now: TimeLike = None) -> ReviewItem:
    """Drop a held write. The audit log records who rejected which review and when (never
    the content), in the same kind of commit as every other change."""
    user = require_user(as_user)
    item = review_or_missing(repo, user, review_id)
    root = layout.parse_path(item.path).root
    repo.access.check_write(user, root)
    when = resolve_now(now)
    record = {"op": "reject", "review_id": review_id, "actor": user, "at": format_time(when), "root": root,
              "held_commit": item.commit}
    with repo.store.locked():
        head = repo.store.head()
        log = (repo.store.read_at(REVIEW_AUDIT_PATH, head) if head else None) or b""
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        message = (f"reject review {review_id}\n\n"
                   + Trailers("reject", user, "user", (item.commit,), (("Memory-Review", review_id),)).render())
        repo.store.commit({REVIEW_AUDIT_PATH: log + line}, message, actor=user, when=when)
        repo.store.delete_branch(REVIEW_PREFIX + review_id)
    return item
