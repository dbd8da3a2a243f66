"""A person's decisions on held writes (ops/holds.py): list them, approve one (committed
through the gate's other checks, replaying what it asked for), reject one (audited)."""
from __future__ import annotations

import json

from ..errors import Conflict, MdmemError, NotFound, Refused
from ..model import layout
from ..model.clock import TimeLike, format_time, resolve_now
from ..policy import gate
from ..policy.access import require_user
from ..results import ReviewItem, WriteResult
from ..storage.trailers import Trailers
from . import write
from ..erasure.erased import known_commits
from ..erasure.receipt import AUDIT_PATH
from .holds import MOVED_FROM, REVIEW_PREFIX, closed_ids, review_item
from .state import RepoState

REVIEW_AUDIT_PATH = "audit/reviews.jsonl"


def review_list(repo: RepoState, *, as_user: str) -> list[ReviewItem]:
    """The open holds in roots the user may read. A branch that is no readable hold (made by
    hand, broken) is skipped, never the end of the list: one bad branch must not hide the rest."""
    user = require_user(as_user)
    items = []
    closed = closed_ids(repo.store)
    for name in repo.store.branches(REVIEW_PREFIX):
        review_id = name[len(REVIEW_PREFIX):]
        try:
            item = review_item(repo, review_id)
            root = layout.parse_path(item.path).root if item else None
        except MdmemError:
            continue
        if item and review_id not in closed and repo.access.may_read_root(user, root or ""):
            items.append(item)
    return items


def review_or_missing(repo: RepoState, user: str, review_id: str) -> ReviewItem:
    item = review_item(repo, review_id)
    if item is not None and review_id in closed_ids(repo.store):
        # Approved or rejected already (here, or in a clone whose decision came with sync).
        raise Refused(f"review {review_id}: already approved or rejected (a commit names it: "
                      f"git log --grep 'Memory-Review: {review_id}')")
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
    if repo.config.trust.require_signed and repo.trust.signer_of(item.commit) != item.actor:
        raise Refused(f"review {review_id}: under [trust] require_signed a hold needs a good signature by its writer "
                      f"{item.actor}, and this one has none (made or changed by hand); reject it")
    # The hold's note is replayed as written: the checks remember applies to a claimed writer
    # apply here too (a hold pushed by hand could say human:dana or system:consolidate), and
    # a hold on history an erasure took away is not brought back by approving it.
    gate.check_claimed_identity(item.note.source, item.actor, item.channel)
    if item.note.owner != item.actor:
        raise Refused(f"review {review_id}: its note says owner {item.note.owner!r}, but {item.actor!r} made it")
    if repo.store.parents(item.commit)[0] in known_commits(repo.root, repo.store.show_file("HEAD", AUDIT_PATH)):
        raise Refused(f"review {review_id}: it was held on history an erasure removed; reject it")
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
        if item.moved_from is not None:
            # A held move: the note it moves must still be the version the agent moved.
            stored = write.read_for_write(repo, item.moved_from)
            repo.access.check_write(user, layout.parse_path(item.moved_from).root)
            if stored is None or item.moved_version is None:
                raise Conflict(f"review {review_id}: it moves {item.moved_from}, which is "
                               f"{'gone' if stored is None else 'unnamed by version'}; reject it")
            gate.check_expected_version(item.moved_from, item.moved_version, stored.version)
            pending.moved_from = item.moved_from
            extra.append((MOVED_FROM, item.moved_from))
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
