"""The guard on a shared bare remote: a pre-receive hook that refuses pushes bringing erased
history back (erased commits, erased note versions under new commits, receipts dropped from the
append-only audit log). Erasures are known from every receipt the guard has seen, kept in a file of
the bare repository's own that no push can change."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..erasure.forget import AUDIT_PATH, erased_blob_ids, erased_commit_ids
from ..errors import BadInput
from ..storage.queries import run_git_at


GUARD_MEMORY = "mdmem-guard-erasures.jsonl"  # in the bare repo's own folder: no push can change it
GUARD_CHAINED = "pre-receive.before-mdmem"  # a pre-receive hook the server had, run first


def install_guard(bare: str | None) -> Path:
    if not bare:
        raise BadInput("guard: give the path of the bare repository to protect")
    path = Path(bare)
    if run_git_at(path, "rev-parse", "--is-bare-repository", check=False).strip() != "true":
        raise BadInput(f"{path}: not a bare git repository")
    hook = path / "hooks" / "pre-receive"
    hook.parent.mkdir(parents=True, exist_ok=True)
    marker = "# Installed by `mdmem guard`"
    previous = hook.with_name(GUARD_CHAINED)
    if hook.exists() and marker not in hook.read_text(errors="replace"):
        if previous.exists():
            raise BadInput(f"guard: {hook} and {previous} both exist and neither is mdmem's; merge them by hand "
                           "(nothing changed)")
        hook.rename(previous)  # the server's own hook (branch protection...) keeps running, first
    hook.write_text("#!/bin/sh\n" + marker + ": refuse pushes that bring erased history back.\n"
                    "refs=$(cat)\n"
                    f'if [ -x "$(dirname "$0")/{GUARD_CHAINED}" ]; then\n'
                    f'  printf \'%s\\n\' "$refs" | "$(dirname "$0")/{GUARD_CHAINED}" || exit $?\n'
                    "fi\n"
                    f'printf \'%s\\n\' "$refs" | exec {shlex.quote(sys.executable)} -I -m mdmem.cli.main '
                    'guard --check "$PWD"\n')
    hook.chmod(0o755)
    _remember_erasures(path, _audits(path, ("refs/heads/main", "HEAD")))
    return hook


def _audits(bare: str | Path, revs) -> str:
    return "\n".join(run_git_at(bare, "show", f"{rev}:{AUDIT_PATH}", check=False) for rev in revs)


def _remember_erasures(bare: str | Path, audit: str) -> None:
    """The guard keeps every receipt it has seen in a file of its own: a later commit that
    deletes or empties the audit log must not make it forget an erasure."""
    memory = Path(bare) / GUARD_MEMORY
    known = set(memory.read_text().splitlines()) if memory.exists() else set()
    new = [line for line in dict.fromkeys(audit.splitlines()) if line.strip().startswith("{") and line not in known]
    if new:
        with open(memory, "a") as f:
            f.write("".join(line + "\n" for line in new))


def check_push(bare: str, refs_text: str) -> list[str]:
    """For each pushed ref: the erased commits its new history would contain, the erased note
    versions (by blob id) it would bring back under new commit ids, and receipts it would drop
    from the audit log (append-only). Erasures are known from every receipt the guard has seen."""
    memory = Path(bare) / GUARD_MEMORY
    here = (memory.read_text() if memory.exists() else "") + "\n" + _audits(bare, ("refs/heads/main", "HEAD"))
    problems = []
    arriving = []
    for line in refs_text.splitlines():
        parts = line.split()
        if len(parts) != 3 or set(parts[1]) == {"0"}:
            continue
        old, new, ref = parts
        pushed = run_git_at(bare, "show", f"{new}:{AUDIT_PATH}", check=False)
        arriving.append(pushed)
        if set(old) != {"0"}:
            kept = set(pushed.splitlines())
            dropped = [ln for ln in run_git_at(bare, "show", f"{old}:{AUDIT_PATH}", check=False).splitlines()
                       if ln.strip() and ln not in kept]
            if dropped:
                problems.append(f"{ref} removes {len(dropped)} erasure receipt(s) from {AUDIT_PATH}; the audit log "
                                "is append-only")
                continue
        audit = here + "\n" + pushed
        found = sorted(set(run_git_at(bare, "rev-list", new, check=False).split()) & erased_commit_ids(audit))
        if found:
            problems.append(f"{ref} contains {len(found)} erased commit(s) (first {found[0][:10]}); "
                            "re-clone instead of pushing an old clone")
            continue
        listing = run_git_at(bare, "rev-list", "--objects", new, check=False)
        objects = {ln.split(" ", 1)[0] for ln in listing.splitlines()}
        back = objects & erased_blob_ids(audit)
        if back:
            problems.append(f"{ref} brings back {len(back)} erased note version(s) under new commits (a rebase or "
                            "cherry-pick of erased history); re-clone and re-apply only your own changes")
    if not problems:
        _remember_erasures(bare, "\n".join(arriving))
    return problems
