"""mdmem forget (--subject S | --owner U | --path P | --text T)... [--dry-run] [--force] [--push]
mdmem forget --resume"""
from __future__ import annotations

import sys

from ..erasure.receipt import remotes_not_erased
from ..errors import BadInput, Incomplete, NotFound, Refused
from ..model.text import escape_controls
from ..repo import MemoryRepo
from .context import add_common, is_workspace, open_repo


def register(sub) -> None:
    p = sub.add_parser("forget", help="erase notes from history and every copy (irreversible)")
    p.add_argument("--subject")
    p.add_argument("--owner", help="erase a person: their private root, notes about them, their identity")
    p.add_argument("--path", action="append", dest="paths", default=[])
    p.add_argument("--text", action="append", dest="texts", default=[],
                   help="scrub this exact text everywhere (it must be distinctive)")
    p.add_argument("--no-scrub", action="store_true", help="remove the notes but leave copies quoted elsewhere")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument("--force", action="store_true", help="carry out a plan that changes many files")
    p.add_argument("--push", action="store_true", help="force-push the rewritten refs to every remote")
    p.add_argument("--resume", action="store_true", help="finish an erasure a crash interrupted")
    add_common(p)
    p.set_defaults(run=run)


def _open(ctx) -> MemoryRepo:
    """The repo without finishing the interrupted erasure on open: --resume does it and says so."""
    path = getattr(ctx.args, "repo", None) or ctx.env.get("MDMEM_REPO")
    settings = {**ctx.settings(), "user_config": ctx.user_config(), "finish_erasure": False}
    return open_repo(path, ctx.cwd, settings)[0]


def run(ctx) -> int:
    a = ctx.args
    if a.resume:
        if a.subject or a.owner or a.paths or a.texts:
            raise BadInput("forget --resume: finishes the interrupted erasure; give no targets with it")
        opened = _open(ctx)
        if is_workspace(opened):
            finished = opened.finish_pending()
            ctx.emit({"finished": finished}, f"finished {len(finished)} interrupted operation(s)")
            return 0
        out = opened.finish_erasure()
        if out is None:
            raise NotFound("forget --resume: no interrupted erasure in this repository")
        _print_receipt(ctx, out.to_dict(), resumed=True)
        return 0
    repo = ctx.repo()
    user = ctx.user
    if a.push and not ctx.json:
        print("warning: --push force-pushes rewritten history; everyone else must re-clone or `mdmem sync`",
              file=sys.stderr)
    paths = [ctx.note_path(p, repo.root) for p in a.paths] if a.paths else None
    if is_workspace(repo):
        return _forget_in_workspace(ctx, repo, paths)
    out = repo.forget(as_user=user, subject=a.subject, owner=a.owner, paths=paths,
                      texts=a.texts or None, dry_run=a.dry_run, push=a.push, scrub=not a.no_scrub,
                      force=a.force, now=ctx.now)
    if a.dry_run:
        _print_plan(ctx, out.to_dict())
        return 0
    _print_receipt(ctx, out.to_dict())
    # Erased here but not on a remote that still serves the erased objects: not a success.
    return Incomplete.exit_code if remotes_not_erased(out.remotes) else 0


def _forget_in_workspace(ctx, ws, paths) -> int:
    """Each repository's plan or receipt under its root; the ones not erased, named with why."""
    a = ctx.args
    out = ws.forget(as_user=ctx.user, subject=a.subject, owner=a.owner, paths=paths, texts=a.texts or None,
                    dry_run=a.dry_run, push=a.push, scrub=not a.no_scrub, force=a.force, now=ctx.now)
    data = out.to_dict()
    if ctx.json:
        ctx.emit(data)
    else:
        for root, done in data["receipts"].items():
            print(f"== {root}")
            (_print_plan if a.dry_run else _print_receipt)(ctx, done)
        for root in data["nothing"]:
            print(f"== {root}: nothing to erase")
        for root, why in data["skipped"].items():
            print(f"== {root}: NOT ERASED: {why}")
    return _workspace_exit(out, dry_run=a.dry_run)


def _workspace_exit(out, *, dry_run: bool) -> int:
    """As one repository's forget: refused (3) when every repository it concerns refused;
    incomplete (11) when one was not erased (refused, unreadable, failing) and it is not that, or
    a remote still serves the erased objects; not found (6) when nothing matched anywhere."""
    if out.skipped:
        everywhere_refused = not out.receipts and not out.nothing and set(out.skipped) == set(out.refused)
        return Refused.exit_code if everywhere_refused else Incomplete.exit_code
    if not out.receipts:
        return NotFound.exit_code
    if not dry_run and any(remotes_not_erased(r.remotes) for r in out.receipts.values()):
        return Incomplete.exit_code
    return 0


def _shown(path: str) -> str:
    """A committed file's name on one line: a newline in it must not fake a line of the plan."""
    return escape_controls(path, newlines=False)


def _print_plan(ctx, out: dict) -> None:
    lines = [f"plan (nothing changed): {len(out['notes'])} note(s), {out['versions']} version(s), "
             f"{out['commits_to_rewrite']} commit(s) to rewrite (up to {out['commits_with_new_ids']} with new ids, "
             f"with those after them), {out['commit_messages_to_rewrite']} message(s), "
             f"{out['identities_pseudonymised']} identit(y/ies) pseudonymised"]
    lines += [f"  erase  {_shown(p)}" for p in out["notes"] + out["other_files_erased"]]
    lines += [f"  scrub  {_shown(c['path'])}  ({c['replacements']} replacement(s) in {c['versions']} version(s))"
              for c in out["copies_to_scrub"]]
    lines += [f"  keep   {_shown(c['path'])}: {c['why']}" for c in out["not_scrubbed"]]
    lines += [f"  {s['stash']}  {s['action']}: {s['why']}" for s in out["stashes"]]
    lines += [f"  worktree {w['path']}  {w['action']}: {w['why']}" for w in out["worktrees"]]
    lines += [f"  local  {_shown(f['path'])}  {f['action']}: {f['why']}" for f in out["local_files"]]
    lines += [f"  ref    {r['ref']}  deleted: {r['why']}" for r in out["refs_deleted"]]
    lines += [f"  ref    {r}  renamed (its name holds erased text)" for r in out["refs_renamed"]]
    lines += [f"  mention (not erased; needs an eraser)  {_shown(p)}" for p in out["mentions_outside_your_roots"]]
    if out["needs_force"]:
        lines.append("this plan changes many files: run it with --force once you have checked the list")
    ctx.emit(out, "\n".join(lines))


def _print_receipt(ctx, out: dict, resumed: bool = False) -> None:
    c = out["counts"]
    text = (("resumed an interrupted erasure: " if resumed else "")
            + f"erased {c['notes']} note(s), {c['versions']} version(s); rewrote {c['commits_rewritten']} "
            f"commit(s); scrubbed {c['copies_scrubbed']} copy(ies); purged {c['index_entries']} index "
            f"entries, {c['vectors']} vectors, {c['cache_entries']} cache entries\n"
            f"receipt {out['id']} in audit/erasures.jsonl; HEAD {(out['old_head'] or '')[:10]} -> "
            f"{(out['new_head'] or '')[:10]}")
    touched = {"local_files": "local file(s) scrubbed or deleted", "stashes": "stash entr(y/ies) rewritten",
               "worktree_files_scrubbed": "file(s) scrubbed in linked worktrees",
               "review_branches": "held review branch(es) dropped"}
    extra = [f"{c[k]} {what}" for k, what in touched.items() if c.get(k)]
    if extra:
        text += "\n  also: " + "; ".join(extra)
    for m in out["mentions"]:
        text += f"\n  review mention: {m['path']}: {m['line']}"
    for name, status in out["remotes"].items():
        text += f"\n  remote {name}: {status}"
    ctx.emit(out, text)
