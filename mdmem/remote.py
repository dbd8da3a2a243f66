"""Team sync through an ordinary git remote, and the guard that keeps erased history out.

The erasure record (audit/erasures.jsonl) keeps the ids of rewritten commits, never their
content. A stale clone still has those commits; sync refuses to merge or push from it,
and the pre-receive guard on the shared remote refuses any push that contains them.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .erasure.forget import AUDIT_PATH, erased_commit_ids
from .errors import BadInput, Refused
from .storage.queries import run_git_at


def sync(repo, *, remote: str = "origin", push: bool = False) -> dict:
    store = repo.store
    if remote not in store.remotes():
        raise BadInput(f"--remote: no remote {remote!r}; add one with git remote add")
    with store.locked():
        store.fetch(remote)
        branch = store.branch_ref().removeprefix("refs/heads/")
        theirs = f"{remote}/{branch}"
        erased = erased_commit_ids(store.show_file(theirs, AUDIT_PATH))
        erased |= erased_commit_ids(store.show_file("HEAD", AUDIT_PATH))
        mine = sorted(store.commit_ids("--all") & erased)
        if mine:
            raise Refused(f"sync: this clone holds {len(mine)} commit(s) that were erased on the remote "
                          f"(first {mine[0][:10]}); re-clone, or reset to {theirs} after saving your own notes")
        base = store.merge_base("HEAD", theirs)
        head = store.head()
        their_head = store.rev_parse(theirs)
        if base == their_head:
            status = "ahead"
        elif base == head:
            store.fast_forward(theirs)
            status = "fast-forwarded"
        else:
            store.rebase_onto(theirs)
            status = "rebased"
        if push:
            store.push(remote, f"HEAD:refs/heads/{branch}")
    repo.reset_caches()
    # Whatever arrived is verified at once: notes no permitted writer committed are flagged
    # (kept out of views and startup, marked in recall) before anyone reads them.
    untrusted = repo.verify()["untrusted"]
    return {"status": status, "detail": f"{branch} now at {repo.store.head()[:10]}", "untrusted": untrusted}


def install_guard(bare: str | None) -> Path:
    if not bare:
        raise BadInput("guard: give the path of the bare repository to protect")
    path = Path(bare)
    if run_git_at(path, "rev-parse", "--is-bare-repository", check=False).strip() != "true":
        raise BadInput(f"{path}: not a bare git repository")
    hook = path / "hooks" / "pre-receive"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\n# Installed by `mdmem guard`: refuse pushes that bring erased history back.\n"
                    f"exec {shlex.quote(sys.executable)} -m mdmem.cli.main guard --check \"$PWD\"\n")
    hook.chmod(0o755)
    return hook


def check_push(bare: str, refs_text: str) -> list[str]:
    """For each pushed ref, the erased commits its new history would contain."""
    erased = set()
    for ref in ("refs/heads/main", "HEAD"):
        erased |= erased_commit_ids(run_git_at(bare, "show", f"{ref}:{AUDIT_PATH}", check=False))
    problems = []
    for line in refs_text.splitlines():
        parts = line.split()
        if len(parts) != 3 or set(parts[1]) == {"0"}:
            continue
        old, new, ref = parts
        erased |= erased_commit_ids(run_git_at(bare, "show", f"{new}:{AUDIT_PATH}", check=False))
        found = sorted(set(run_git_at(bare, "rev-list", new, check=False).split()) & erased)
        if found:
            problems.append(f"{ref} contains {len(found)} erased commit(s) (first {found[0][:10]}); "
                            "re-clone instead of pushing an old clone")
    return problems
