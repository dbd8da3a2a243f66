"""mdmem sync [--remote NAME] [--push]: pull from a team remote, refusing erased history."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("sync", help="fetch and fast-forward from a remote; refuse history erased there")
    p.add_argument("--remote", default="origin")
    p.add_argument("--push", action="store_true", help="push local commits after a clean sync")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..remote import sync

    out = sync(ctx.repo(), remote=ctx.args.remote, push=ctx.args.push)
    ctx.emit(out, f"{out['status']}: {out['detail']}")
    return 0
