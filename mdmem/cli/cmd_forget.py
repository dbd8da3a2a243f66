"""mdmem forget (--subject S | --owner U | --path P | --text T)... [--dry-run] [--push]"""
from __future__ import annotations

import sys

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("forget", help="erase notes from history and every copy (irreversible)")
    p.add_argument("--subject")
    p.add_argument("--owner")
    p.add_argument("--path", action="append", dest="paths", default=[])
    p.add_argument("--text", action="append", dest="texts", default=[], help="scrub this exact text everywhere")
    p.add_argument("--no-scrub", action="store_true", help="remove the notes but leave copies quoted elsewhere")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument("--push", action="store_true", help="force-push the rewritten refs to every remote")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    repo = ctx.repo()
    if a.push and not ctx.json:
        print("warning: --push force-pushes rewritten history; everyone else must re-clone or `mdmem sync`",
              file=sys.stderr)
    out = repo.forget(as_user=ctx.user, subject=a.subject, owner=a.owner, paths=a.paths or None,
                      texts=a.texts or None, dry_run=a.dry_run, push=a.push, scrub=not a.no_scrub,
                      now=ctx.now)
    if a.dry_run:
        text = (f"plan (nothing changed): {len(out['notes'])} note(s), {out['versions']} version(s), "
                f"{out['commits_to_rewrite']} commit(s) to rewrite\n"
                + "".join(f"  erase  {p}\n" for p in out["notes"])
                + "".join(f"  scrub  {p}\n" for p in out["copies_to_scrub"])
                + "".join(f"  review branch  {b}\n" for b in out["review_branches"]))
    else:
        c = out["counts"]
        text = (f"erased {c['notes']} note(s), {c['versions']} version(s); rewrote {c['commits_rewritten']} "
                f"commit(s); scrubbed {c['copies_scrubbed']} copy(ies); purged {c['index_entries']} index "
                f"entries, {c['vectors']} vectors, {c['cache_entries']} cache entries\n"
                f"receipt {out['id']} in audit/erasures.jsonl; HEAD {out['old_head'][:10]} -> {out['new_head'][:10]}")
        for m in out["mentions"]:
            text += f"\n  review mention: {m['path']}: {m['line']}"
        for name, status in out["remotes"].items():
            text += f"\n  remote {name}: {status}"
    ctx.emit(out, text.rstrip())
    return 0
