"""mdmem consolidate --subject S (--team T | --scope private)"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("consolidate", help="write a per-scope digest of one subject")
    p.add_argument("--subject", required=True)
    p.add_argument("--scope", choices=["private", "team"], help="default: team with --team, else private")
    p.add_argument("--team")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    result = ctx.repo().consolidate(as_user=ctx.user, subject=a.subject, scope=a.scope, team=a.team, now=ctx.now)
    ctx.emit(result.to_dict(), f"wrote {result.path} (commit {result.commit[:10]})")
    return 0
