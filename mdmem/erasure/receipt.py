"""The erasure receipt: one line in ``audit/erasures.jsonl``, committed with the regenerated
views. It records the targets as given (a person as their pseudonym), counts and the commits
the rewrite made, never an erased text, path or key, and no id of anything erased: an old
commit or blob id is something anyone could ask a remote for, and a blob id is the hash of
the erased version, which confirms a guess at scrubbed text. Those ids are the eraser's own
(the returned receipt; erasure/erased.py keeps them in the clone); other clones derive them.
Also the mention scan: live notes that still name the person,
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
        line = json.dumps(published(receipt), sort_keys=True)
        message = f"forget: erasure receipt {receipt['id']}\n\n" + Trailers("forget", actor, "system:forget").render()
        store.commit({AUDIT_PATH: audit + line.encode() + b"\n"}, message, actor=actor, when=when)
    views = repo.fresh_view_changes()  # the views of the rewritten tree: views/fresh.py's one definition
    if views:
        message = "render MEMORY views after erasure\n\n" + Trailers("render", actor, "system:forget").render()
        store.commit(views, message, actor=actor, when=when)
    return str(store.head())


# What the eraser learns and nobody else may read: never in the committed line.
PRIVATE_FIELDS = ("old_head", "rewritten_commits", "erased_blobs", "mentions", "new_head")


def published(receipt: dict) -> dict:
    """The receipt as committed: everything but the erased ids (and the mention lines, text)."""
    return {k: v for k, v in receipt.items() if k not in PRIVATE_FIELDS}


def receipt_ids(text: str) -> set[str]:
    """The ids of the receipts an audit log holds."""
    ids = set()
    for line in text.splitlines():
        try:
            ids.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def erased_commit_ids(text: str) -> set[str]:
    """The commits erasures rewrote, as receipts written before they stopped carrying old ids
    listed them (a legacy audit log): a clone still holding one is stale."""
    return _receipt_ids(text, "rewritten_commits")


def erased_blob_ids(text: str) -> set[str]:
    """The note versions erasures removed or scrubbed, by blob id, as legacy receipts listed
    them (new receipts carry none: see the module's docstring)."""
    return _receipt_ids(text, "erased_blobs")


def _receipt_ids(text: str, field: str) -> set[str]:
    ids: set[str] = set()
    for line in text.splitlines():
        try:
            ids |= set(json.loads(line).get(field, []))
        except (ValueError, AttributeError, TypeError):
            continue
    return ids


# Hosts where nobody can run mdmem's guard: their own procedure removes what a push leaves.
HOSTED = {
    "github": "GitHub keeps unreachable objects and cached views: open a request with GitHub Support "
              "(docs.github.com, \"Removing sensitive data from a repository\") naming the repository and the "
              "rewritten history, and ask them to purge unreachable objects; check pull requests and forks too",
    "gitlab": "GitLab: Settings > Repository > Repository cleanup (upload filter-repo's commit-map), then "
              "Settings > General > Advanced > Housekeeping \"Prune unreachable objects\"",
    "forgejo": "Forgejo/Gitea: a site administrator runs \"Garbage collect all repositories\" (Site Administration "
               "> Maintenance) or `git gc --prune=now` with reflogs expired in the repository on the server",
}
HOSTED_NAMES = {"github.com": "github", "gitlab.com": "gitlab", "codeberg.org": "forgejo"}
CHECKED_IDS = 20  # erased ids asked for per remote (each one fetch)


def hosted(url: str) -> str | None:
    """Which code-hosting service a remote URL names (github, gitlab, forgejo), or None."""
    host = re.sub(r"^[a-z+]+://", "", url.lower()).split("@")[-1].split("/")[0].split(":")[0]
    if host in HOSTED_NAMES:
        return HOSTED_NAMES[host]
    if "gitlab" in host:
        return "gitlab"
    return "forgejo" if "forgejo" in host or "gitea" in host else None


def push(root, leases: dict[str, dict[str, str]], receipt: dict) -> dict:
    """Force-push to every remote, then ask each, as a fresh clone would, for erased ids by id.
    A remote says "erased" only when it serves none of them; one that still does is named with
    what must happen there (the guard's housekeeping, or the host's own purge)."""
    out = {}
    asked = ([receipt["old_head"]] if receipt.get("old_head") else []) + list(receipt.get("rewritten_commits", []))[:5]
    asked += list(receipt.get("erased_blobs", []))[:CHECKED_IDS]
    # A ref outside what the push replaces (refs/backup/*, refs/pull/*, ...) still on an erased
    # commit keeps the old history reachable: no prune removes it, so it is named.
    old = set(receipt.get("rewritten_commits", [])) | ({receipt["old_head"]} if receipt.get("old_head") else set())
    for name in ops.remotes(root):
        ok, err = ops.force_push_all(root, name, leases.get(name, {}))
        if not ok:
            out[name] = f"NOT erased there: push failed: {err}"
            continue
        out[name] = remote_status(root, name, list(dict.fromkeys(asked)), old)
    return out


def remote_status(root, name: str, asked: list[str], old: set[str]) -> str:
    """What remote ``name`` serves of an erasure pushed to it: asked, as a fresh clone would,
    for ``asked`` (erased commit and blob ids) by id, and whether a ref there still points at
    an ``old`` commit. "erased: ..." only when it serves none; otherwise "NOT erased ..." with
    what must happen there (the guard's housekeeping, or the host's own purge)."""
    service = next((found for url in ops.configured_urls(root, name) if (found := hosted(url))), None)
    if service:
        # Such a host shows unreachable commits by id on its web pages whatever a fetch says.
        return f"NOT erased there yet: pushed (force); {HOSTED[service]}"
    served = ops.served_by(root, name, asked)
    holding = sorted(ref for ref, oid in ops.remote_refs(root, name).items() if oid in old)
    if holding:
        return (f"NOT erased there: pushed (force), but {', '.join(holding[:5])} there still point(s) at "
                f"erased history; delete them (`git push {name} --delete <ref>`), then expire the remote's "
                "reflogs and run `git gc --prune=now` there, and check again with prove-gone")
    if served:
        return (f"NOT erased there: pushed (force), but it still serves {len(served)} of {len(asked)} erased "
                "object(s) asked for by id; install `mdmem guard` on it (its hook expires reflogs and prunes "
                "when a receipt arrives), or expire its reflogs and run `git gc --prune=now` there")
    return (f"erased: pushed (force); it serves none of the {len(asked)} erased object(s) asked for by id"
            if asked else "erased: pushed (force); nothing erased to ask it for")


def remotes_not_erased(remotes: dict[str, str]) -> list[str]:
    """The remotes a receipt's push left holding erased objects (or could not check)."""
    return sorted(name for name, status in remotes.items() if status.startswith("NOT erased"))


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
