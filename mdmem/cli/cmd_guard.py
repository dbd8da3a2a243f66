"""mdmem guard BARE_REPO: install a pre-receive hook refusing pushes of erased history and a
post-receive hook finishing an erasure that arrived (reflogs expired, erased objects pruned);
mdmem guard --check / --after (run by those hooks) read the pushed refs on standard input."""
from __future__ import annotations

import sys

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("guard", help="protect a bare remote from pushes that bring erased history back")
    p.add_argument("bare", nargs="?", help="the bare repository to protect")
    p.add_argument("--check", action="store_true", help="(used by the hook) check refs from standard input")
    p.add_argument("--after", action="store_true",
                   help="(used by the post-receive hook) prune what an erasure that arrived removed")
    add_common(p, identity=False, repo=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..remote import after_push, check_push, install_guard

    if ctx.args.after:
        sys.stdin.read()
        if after_push(ctx.args.bare or "."):
            print("mdmem: an erasure arrived: reflogs expired and erased objects pruned on this server",
                  file=sys.stderr)
        return 0
    if ctx.args.check:
        problems = check_push(ctx.args.bare or ".", sys.stdin.read())
        for p in problems:
            print(f"mdmem: refused: {p}", file=sys.stderr)
        return 3 if problems else 0
    from ..remote import GUARD_CHAINED

    path = install_guard(ctx.args.bare)
    chained = path.with_name(GUARD_CHAINED)
    ctx.emit({"hook": str(path), "chained": str(chained) if chained.exists() else None},
             f"installed {path}" + (f"; the hook that was there runs first, kept as {chained}" if chained.exists()
                                    else ""))
    return 0
