"""The guard on a shared bare remote. Its pre-receive hook refuses pushes bringing erased
history back (erased commits, erased note versions under new commits, receipts dropped from the
append-only audit log); when an erasure arrives (a new receipt over rewritten history) it records
what only the old history held, in files of the bare repository's own that no push changes and
no fetch reads (receipts carry no erased id). Its post-receive hook then expires the server's
reflogs and prunes, so nothing erased is served by id any more."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..erasure.forget import AUDIT_PATH, erased_blob_ids, erased_commit_ids
from ..erasure.receipt import receipt_ids
from ..errors import BadInput
from ..storage.queries import (blobs_at, changed_paths_at, files_at, folders_at, is_ancestor_at, merge_base_at,
                               note_blobs_only_in_at, run_git_at)


GUARD_MEMORY = "mdmem-guard-erasures.jsonl"  # in the bare repo's own folder: no push can change it
GUARD_ERASED = "mdmem-guard-erased-ids"  # the ids erasures removed here, one a line: no fetch can read it
GUARD_PENDING = "mdmem-guard-housekeeping"  # an erasure arrived: the post-receive hook prunes
GUARD_CHAINED = "pre-receive.before-mdmem"  # a pre-receive hook the server had, run first
GUARD_MARKER = "# Installed by `mdmem guard`"


def _guard_hook(hooks: Path, name: str, what: str, command: str) -> Path:
    """Write mdmem's ``name`` hook; a hook of that name the server had is kept as
    ``<name>.before-mdmem`` and runs first (its refusal stands)."""
    hook = hooks / name
    previous = hook.with_name(f"{name}.before-mdmem")
    if hook.exists() and GUARD_MARKER not in hook.read_text(errors="replace"):
        if previous.exists():
            raise BadInput(f"guard: {hook} and {previous} both exist and neither is mdmem's; merge them by hand "
                           "(nothing changed)")
        hook.rename(previous)  # the server's own hook (branch protection...) keeps running, first
    hook.write_text("#!/bin/sh\n" + GUARD_MARKER + f": {what}.\n"
                    "refs=$(cat)\n"
                    f'if [ -x "$(dirname "$0")/{previous.name}" ]; then\n'
                    f'  printf \'%s\\n\' "$refs" | "$(dirname "$0")/{previous.name}" || exit $?\n'
                    "fi\n"
                    f'printf \'%s\\n\' "$refs" | exec {shlex.quote(sys.executable)} -I -m mdmem.cli.main '
                    f'guard {command} "$PWD"\n')
    hook.chmod(0o755)
    return hook


def install_guard(bare: str | None) -> Path:
    """A pre-receive hook refusing pushes that bring erased history back, and a post-receive
    hook that makes an arriving erasure complete on the server: reflogs expired and the
    erased objects pruned, so nobody can fetch them by id."""
    if not bare:
        raise BadInput("guard: give the path of the bare repository to protect")
    path = Path(bare)
    if run_git_at(path, "rev-parse", "--is-bare-repository", check=False).strip() != "true":
        raise BadInput(f"{path}: not a bare git repository")
    hooks = path / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    for name in ("pre-receive", "post-receive"):
        previous = hooks / f"{name}.before-mdmem"
        if (hooks / name).exists() and previous.exists() and \
                GUARD_MARKER not in (hooks / name).read_text(errors="replace"):
            raise BadInput(f"guard: {hooks / name} and {previous} both exist and neither is mdmem's; merge them by "
                           "hand (nothing changed)")
    hook = _guard_hook(hooks, "pre-receive", "refuse pushes that bring erased history back", "--check")
    _guard_hook(hooks, "post-receive", "finish an erasure that arrived (expire reflogs, prune)", "--after")
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


def _erased_here(bare: str | Path) -> set[str]:
    path = Path(bare) / GUARD_ERASED
    return set(path.read_text().split()) if path.exists() else set()


def check_push(bare: str, refs_text: str) -> list[str]:
    """For each pushed ref: the erased commits its new history would contain, the erased note
    versions it would bring back under new commit ids, and receipts it would drop from the
    audit log (append-only). A push that brings a new receipt over history it rewrites is an
    erasure arriving: the objects only the old history held are recorded here (the server
    derives them itself: receipts carry no erased id) and pruned after the push."""
    memory = Path(bare) / GUARD_MEMORY
    here = (memory.read_text() if memory.exists() else "") + "\n" + _audits(bare, ("refs/heads/main", "HEAD"))
    erased = _erased_here(bare)
    problems = []
    arriving = []
    removed: set[str] = set()
    main = run_git_at(bare, "symbolic-ref", "-q", "HEAD", check=False).strip() or "refs/heads/main"
    tips = {parts[2]: parts[1] for parts in map(str.split, refs_text.splitlines())
            if len(parts) == 3 and set(parts[1]) != {"0"}}
    # The branch whose mdmem.toml says what this repository holds: HEAD's, else main, else any.
    current_main = next((tip for ref in (main, "refs/heads/main")
                         if (tip := run_git_at(bare, "rev-parse", "-q", "--verify", ref, check=False).strip())),
                        None) or run_git_at(bare, "for-each-ref", "--count=1", "--format=%(objectname)",
                                            "refs/heads/", check=False).strip() or None
    for line in refs_text.splitlines():
        parts = line.split()
        if len(parts) != 3 or set(parts[1]) == {"0"}:
            continue
        old, new, ref = parts
        pushed = run_git_at(bare, "show", f"{new}:{AUDIT_PATH}", check=False)
        arriving.append(pushed)
        if set(old) != {"0"}:
            before = run_git_at(bare, "show", f"{old}:{AUDIT_PATH}", check=False)
            kept = set(pushed.splitlines())
            dropped = [ln for ln in before.splitlines() if ln.strip() and ln not in kept]
            if dropped:
                problems.append(f"{ref} removes {len(dropped)} erasure receipt(s) from {AUDIT_PATH}; the audit log "
                                "is append-only")
                continue
            rewrites = not is_ancestor_at(bare, old, new)
            if rewrites and receipt_ids(pushed) - receipt_ids(before) - receipt_ids(here):
                # The commits and note versions only the old history held (views are derived:
                # the same render may come again).
                removed |= set(run_git_at(bare, "rev-list", old, f"^{new}", check=False).split())
                removed |= note_blobs_only_in_at(bare, old, new)
        audit = here + "\n" + pushed
        found = sorted(set(run_git_at(bare, "rev-list", new, check=False).split())
                       & (erased_commit_ids(audit) | erased))
        if found:
            problems.append(f"{ref} contains {len(found)} erased commit(s) (first {found[0][:10]}); "
                            "re-clone instead of pushing an old clone")
            continue
        strays = _stray_roots(bare, new, current_main)
        if strays:
            problems += [f"{ref}: {why}" for why in strays]
            continue
        if ref == main:
            forged = _forged_views(bare, None if set(old) == {"0"} else old, new)
        else:
            # Another ref (a hold, a tag, a branch): only the view files it changes from the main
            # branch's history are judged. History is not judged commit by commit (an erasure
            # rewrites old views without rendering them again, and a hold is one note on such a
            # commit); what such a ref must not bring is view text main's history never held.
            main_tip = tips.get(main) or run_git_at(bare, "rev-parse", "-q", "--verify", main, check=False).strip()
            forged = _forged_views(bare, merge_base_at(bare, new, main_tip) if main_tip else None, new,
                                   views_only=True)
        if forged:
            problems += [f"{ref}: {why}" for why in forged]
            continue
        listing = run_git_at(bare, "rev-list", "--objects", new, check=False)
        objects = {ln.split(" ", 1)[0] for ln in listing.splitlines()}
        back = objects & (erased_blob_ids(audit) | erased)
        if back:
            problems.append(f"{ref} brings back {len(back)} erased note version(s) under new commits (a rebase or "
                            "cherry-pick of erased history); re-clone and re-apply only your own changes")
    if not problems:
        _remember_erasures(bare, "\n".join(arriving))
        if removed:
            with open(Path(bare) / GUARD_ERASED, "a") as f:
                f.write("".join(oid + "\n" for oid in sorted(removed - erased)))
            (Path(bare) / GUARD_PENDING).write_text("erasure arrived\n")
    return problems


def _stray_roots(bare: str | Path, commit: str, current_main: str | None) -> list[str]:
    """In a scope repository, the folders of other roots than its own at ``commit``: such a note
    (pushed past the hooks with --no-verify, under any address) would reach every reader of
    this repository. The scope root is the one the repository declares now (main's mdmem.toml;
    the pushed one's on a first push), not one a push may change along with its notes."""
    from ..config import CONFIG_NAME, Config
    from ..errors import MdmemError
    from ..policy.access import Access
    from ..views.fresh import SCOPES

    text = run_git_at(bare, "show", f"{current_main or commit}:{CONFIG_NAME}", check=False)
    try:
        access = Access.of(Config.parse(text.encode(), where=CONFIG_NAME)) if text else None
    except MdmemError:
        return []  # an unreadable mdmem.toml is refused by the view check (_forged_views)
    if access is None or access.scope_root is None:
        return []
    roots = {f"{scope}/{name}" for scope in SCOPES for name in folders_at(bare, commit, scope)}
    # And every commit the push brings: a note added then deleted within one push stayed in the
    # history every clone fetches.
    added = run_git_at(bare, "log", "--format=", "--name-only", "--no-renames", commit, "--not", "--all",
                       check=False)
    roots |= {"/".join(path.split("/")[:2]) for path in added.splitlines() if path.startswith(SCOPES)
              and path.count("/") >= 2}
    return [f"{root}/: {access.not_held(root)}; move its files there and push again"
            for root in sorted(roots) if not access.holds(root)]


def _forged_views(bare: str | Path, old: str | None, commit: str, *, views_only: bool = False) -> list[str]:
    """Why the views at ``commit`` are not what agents may read first: each view file mdmem
    writes that differs from a fresh render of the commit. The root guide is a function of the
    commit's mdmem.toml alone; a scope view must be the render of some of its root's notes
    there (views/authentic.py says why not all: each clone leaves out notes it does not trust).
    A view written by hand (an injected instruction, pushed past the hooks with --no-verify)
    is refused. Only the roots changed since ``old`` are rendered (a new ref, or a changed
    mdmem.toml, renders every root); ``views_only``: only the views changed since ``old``."""
    from ..config import CONFIG_NAME, Config
    from ..errors import MdmemError
    from ..views.authentic import unrendered_views
    from ..views.fresh import SCOPES, is_view_path, touched_roots
    from ..views.render import VIEW_NAME, render_root

    changed = changed_paths_at(bare, old, commit) if old else None
    config_text = run_git_at(bare, "show", f"{commit}:{CONFIG_NAME}", check=False)
    unreadable = f"no {CONFIG_NAME}"
    config = None
    if config_text:
        try:
            config = Config.parse(config_text.encode(), where=CONFIG_NAME)
        except MdmemError as e:
            unreadable = f"an unreadable {CONFIG_NAME} ({e})"
    if config is None:
        # Views are judged against the commit's configuration; without one none can be, and a view
        # that arrives with it (deleted or broken in the same push) would reach every fresh clone's
        # agents unjudged. A history holding no view (not a memory repository's) is not refused.
        present = files_at(bare, commit, [VIEW_NAME, *SCOPES])
        views = sorted(p for p in present if is_view_path(p) and (changed is None or p in changed))
        return [f"{path} arrives with {unreadable} at its commit, so it cannot be judged a render; fix "
                f"{CONFIG_NAME} and run `mdmem render`, then push again" for path in views]
    why = "(a view written by hand tells agents what no note says); run `mdmem render` and push again"
    problems = _view_lookalikes(bare, commit, changed)
    if views_only and changed is not None:
        changed = {path for path in changed if is_view_path(path)}
    if (changed is None or VIEW_NAME in changed or (CONFIG_NAME in changed and not views_only)) and \
            run_git_at(bare, "show", f"{commit}:{VIEW_NAME}", check=False) != render_root(config):
        problems.append(f"{VIEW_NAME} differs from a fresh render of its commit's {CONFIG_NAME} {why}")
    if changed is None or (CONFIG_NAME in changed and not views_only):
        roots = {f"team/{t}" for t in config.teams}
        roots |= {f"{scope}/{name}" for scope in SCOPES for name in folders_at(bare, commit, scope)}
    else:
        roots = touched_roots(changed)
    files = files_at(bare, commit, sorted(roots))
    for path in unrendered_views(config, roots, files, lambda oids: blobs_at(bare, oids)):
        problems.append(f"{path} differs from a fresh render of its commit's notes {why}")
    return problems


def _view_lookalikes(bare: str | Path, commit: str, changed: set[str] | None) -> list[str]:
    """Paths that name a view but for letter case (``team/payments/memory.md``,
    ``Team/payments/MEMORY.md``): on a case-insensitive file system (macOS, Windows) a clone's
    checkout writes one over the view itself, and agents there read text nobody rendered. Only the
    paths changed since the last judged commit (every path on a new ref)."""
    from ..views.fresh import is_view_path

    paths = changed if changed is not None else set(
        run_git_at(bare, "ls-tree", "-r", "-z", "--name-only", "--full-tree", commit, check=False).split("\0"))
    alike = sorted(p for p in paths if p and not is_view_path(p) and is_view_path(_view_case(p)))
    present = files_at(bare, commit, alike) if alike else {}
    return [f"{path} differs only in letter case from a view's path: a case-insensitive checkout writes it over "
            "that view; rename or remove it, then push again" for path in sorted(present)]


def _view_case(path: str) -> str:
    """``path`` with the letters a view's path fixes (scope folder, file name) as a view has them."""
    parts = path.split("/")
    if parts[-1].casefold() == "memory.md":
        parts[-1] = "MEMORY.md"
    if len(parts) == 3 and parts[0].casefold() in ("team", "private"):
        parts[0] = parts[0].casefold()
    return "/".join(parts)


def after_push(bare: str) -> bool:
    """(post-receive) An erasure arrived: expire every reflog and prune what no ref reaches, so
    the erased objects are gone from the server, not only unreferenced (git serves any object
    it has to a fetch that names its id). True when it ran."""
    pending = Path(bare) / GUARD_PENDING
    if not pending.exists():
        return False
    run_git_at(bare, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all", check=False)
    for keep in (Path(bare) / "objects" / "pack").glob("*.keep"):
        keep.unlink(missing_ok=True)  # a kept pack would keep erased objects
    run_git_at(bare, "gc", "--prune=now", "--quiet", check=False)
    pending.unlink(missing_ok=True)
    return True
