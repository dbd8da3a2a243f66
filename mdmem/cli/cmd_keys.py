"""mdmem keys --subject S --kind K"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("keys", help="live keys for a subject and kind")
    p.add_argument("--subject", required=True)
    p.add_argument("--kind", required=True)
    p.add_argument("--scope", choices=["private", "team"])
    p.add_argument("--team")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    rows = ctx.repo().keys(as_user=ctx.user, subject=a.subject, kind=a.kind, scope=a.scope, team=a.team,
                           now=ctx.now)
    ctx.emit(rows, "\n".join(f"{r['key']}\t{r['root']}\t{r['first_line']}" for r in rows) or "(no live keys)")
    return 0
