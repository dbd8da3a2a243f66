"""mdmem check: every problem of every note (path: field: reason), and every committed
MEMORY view that differs from a fresh render of HEAD; exits 2 if there is any."""
from __future__ import annotations

import sys

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("check", help="validate every note and every committed view (also run by the pre-commit hook)")
    p.add_argument("--quiet", action="store_true", help="print only problems")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from .context import is_workspace

    repo = ctx.repo()
    good, bad = repo.check()
    stale = repo.stale_views()
    undeclared: list[str] = []
    if is_workspace(repo):
        from ..host.mount import undeclared as undeclared_mounts

        undeclared = undeclared_mounts(repo)
    if ctx.json:
        ctx.emit({"ok": len(good), "invalid": [b.to_dict() for b in bad], "stale_views": stale,
                  **({"undeclared_mounts": undeclared} if is_workspace(repo) else {})})
    else:
        for b in bad:
            print(str(b), file=sys.stderr)
        for path in stale:
            print(f"{path}: view: stale; it differs from a fresh render of HEAD (`mdmem render` rewrites it)",
                  file=sys.stderr)
        for line in undeclared:
            print(line, file=sys.stderr)
        if not ctx.args.quiet:
            print(f"{len(good)} note(s) valid, {len(bad)} invalid, {len(stale)} stale view(s)"
                  + (f", {len(undeclared)} mount(s) not declaring you" if undeclared else ""))
    return 2 if bad or stale or undeclared else 0
