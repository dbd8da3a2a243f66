"""mdmem sweep: remove expired notes in one commit."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("sweep", help="remove expired notes (read-time expiry hides them already)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    out = ctx.repo().sweep(as_user=ctx.user, now=ctx.now)
    ctx.emit(out.to_dict(), f"removed {len(out.removed)} expired note(s)" + "".join(f"\n  {p}" for p in out.removed))
    return 0
