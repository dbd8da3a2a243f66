"""mdmem render: regenerate the root MEMORY.md and every scope view in one commit."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("render", help="regenerate the MEMORY.md views")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    out = ctx.repo().render(as_user=ctx.user, now=ctx.now)
    ctx.emit(out.to_dict(), f"rewrote {len(out.views)} view(s)" + "".join(f"\n  {v}" for v in out.views))
    return 0
