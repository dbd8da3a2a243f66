"""mdmem get (PATH | --subject S --kind K [--key K])"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("get", help="the live version of one note")
    p.add_argument("path", nargs="?")
    p.add_argument("--subject")
    p.add_argument("--kind")
    p.add_argument("--key")
    p.add_argument("--scope", choices=["private", "team"])
    p.add_argument("--team")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    stored = ctx.repo().get(as_user=ctx.user, path=a.path, subject=a.subject, kind=a.kind, key=a.key,
                            scope=a.scope, team=a.team, now=ctx.now)
    ctx.emit(stored.to_dict(), f"{stored.path} ({stored.version[:10]})\n{stored.note.text}")
    return 0
