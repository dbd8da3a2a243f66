"""mdmem render: regenerate the root MEMORY.md and every scope view in one commit."""
from __future__ import annotations

from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("render", help="regenerate the MEMORY.md views")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    if is_workspace(ctx.repo()):
        done = ctx.repo().render(as_user=ctx.user, now=ctx.now)
        ctx.emit(done, "\n".join(f"{root}: rewrote {len(r['views'])} view(s)" for root, r in done["mounts"].items())
                 + f"\nwrote {done['workspace_view']}")
        return 0
    out = ctx.repo().render(as_user=ctx.user, now=ctx.now)
    ctx.emit(out.to_dict(), f"rewrote {len(out.views)} view(s)" + "".join(f"\n  {v}" for v in out.views))
    return 0
