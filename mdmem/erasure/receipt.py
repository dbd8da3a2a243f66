"""The erasure receipt: one line in ``audit/erasures.jsonl``, committed with the regenerated
views. It records the targets as given (a person as their pseudonym), counts and the
rewritten commit ids (ids, not content: a stale clone cannot push them back), never an
erased text, path or key. Also the mention scan: live notes that still name the person,
for someone to review (a team fact may need rewriting, not deleting)."""
from __future__ import annotations

import datetime as _dt
import json
import re

from ..model import layout
from ..model.clock import format_time
from ..storage import history_ops as ops
from ..storage.trailers import Trailers
from .plan import Plan

AUDIT_PATH = layout.ERASURE_LOG


def receipt_id(when: _dt.datetime) -> str:
    """Unique even for two erasures in one second (a resumed job finds its own by this id)."""
    import secrets
    return f"erasure-{when:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def build(plan: Plan, *, rid: str, when: _dt.datetime, counts: dict, old_head: str | None, rewritten: list[str],
          erased_blobs: list[str], mentions: list[dict], attested: list[str]) -> dict:
    """``rewritten``: the old ids the rewrite replaced; ``attested``: the new commits it made
    (unsigned: the receipt's commit, signed by the eraser, stands in for their signatures)."""
    actor = plan.people.get(plan.as_user, plan.as_user)
    return {"id": rid, "actor": actor, "at": format_time(when),
            "targets": plan.targets_record(), "counts": counts, "old_head": old_head,
            "rewritten_commits": rewritten, "attested_commits": list(attested), "erased_blobs": erased_blobs,
            "mentions_for_review": [m["path"] for m in mentions], "remotes": {}}


def commit(repo, receipt: dict, plan: Plan, when: _dt.datetime) -> str:
    """The receipt in the audit log, then the regenerated views (once: a resumed job finding
    its receipt at HEAD does not write it again, and renders only what is still stale). The
    views come after the receipt because the receipt vouches for the commits the erasure
    rewrote (policy/verify.py): rendered before it, the erased person's team notes would be
    judged untrusted and left out."""
    store = repo.store
    head = store.head()
    audit = store.read_at(AUDIT_PATH, head) or b""
    actor = plan.people.get(plan.as_user, plan.as_user)
    if f'"id": "{receipt["id"]}"'.encode() not in audit:
        line = json.dumps({k: v for k, v in receipt.items() if k != "mentions"}, sort_keys=True)
        message = f"forget: erasure receipt {receipt['id']}\n\n" + Trailers("forget", actor, "system:forget").render()
        store.commit({AUDIT_PATH: audit + line.encode() + b"\n"}, message, actor=actor, when=when)
    views = repo.fresh_view_changes()  # the views of the rewritten tree: views/fresh.py's one definition
    if views:
        message = "render MEMORY views after erasure\n\n" + Trailers("render", actor, "system:forget").render()
        store.commit(views, message, actor=actor, when=when)
    return str(store.head())


def erased_commit_ids(text: str) -> set[str]:
    """The commits erasures rewrote: a clone still holding one is stale."""
    return _receipt_ids(text, "rewritten_commits")


def erased_blob_ids(text: str) -> set[str]:
    """The note versions erasures removed or scrubbed, by blob id. A blob id names content
    (never shows it; a note's random id and times make it unguessable): the same content
    coming back under new commit ids (a rebase or cherry-pick in an old clone) is caught."""
    return _receipt_ids(text, "erased_blobs")


def _receipt_ids(text: str, field: str) -> set[str]:
    ids: set[str] = set()
    for line in text.splitlines():
        try:
            ids |= set(json.loads(line).get(field, []))
        except (ValueError, AttributeError, TypeError):
            continue
    return ids


def push(root, leases: dict[str, dict[str, str]]) -> dict:
    out = {}
    for name in ops.remotes(root):
        ok, err = ops.force_push_all(root, name, leases.get(name, {}))
        out[name] = "pushed (force); the remote must still gc to drop the old objects" if ok else f"push failed: {err}"
    return out


def mention_scan(repo, plan: Plan) -> list[dict]:
    """Live notes that still mention the person, for a human to review (not deleted)."""
    names = set(plan.people)
    for person in list(names):
        names |= set(plan.aliases.get(person, ()))
    out = [{"path": p, "line": "(its subject is the person; only an eraser may erase it)"}
           for p in plan.mentions_outside]
    if not names:
        return out
    # Not \\b: a handle like "@asmith" starts with a non-word character.
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in sorted(names)) + r")(?!\w)", re.IGNORECASE)
    from ..storage.worktree import scan_notes
    listed = {m["path"] for m in out}
    for stored in scan_notes(repo.root, repo.contracts)[0]:
        if stored.path in listed:
            continue
        for line in stored.note.text.splitlines():
            if pattern.search(line):
                out.append({"path": stored.path, "line": line.strip()[:200]})
                break
    return out
