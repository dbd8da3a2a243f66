"""mdmem check: validate every note; exits 2 listing path: field: reason."""
from __future__ import annotations

import sys

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("check", help="validate every note (also the pre-commit hook)")
    p.add_argument("--quiet", action="store_true", help="print only problems")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    good, bad = ctx.repo().check()
    if ctx.json:
        ctx.emit({"ok": len(good), "invalid": [b.to_dict() for b in bad]})
    else:
        for b in bad:
            print(str(b), file=sys.stderr)
        if not ctx.args.quiet:
            print(f"{len(good)} note(s) valid, {len(bad)} invalid")
    return 2 if bad else 0
