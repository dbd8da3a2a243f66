"""mdmem history (PATH | --subject S --kind K --key K) [--at TIME]"""
from __future__ import annotations

from ..model.clock import format_time
from .context import add_common, add_note_selector, selector


def register(sub) -> None:
    p = sub.add_parser("history", help="every version of a note, from git")
    add_note_selector(p)
    p.add_argument("--at", help="the state as of this time")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    versions = ctx.repo().history(as_user=ctx.user, at=a.at, **selector(ctx))
    lines = [f"{v.commit[:10]} {format_time(v.time)} {v.op:<9} {v.actor:<8} {v.source:<14} "
             f"{v.note.first_line() if v.note else '(deleted)'}" for v in versions]
    ctx.emit({"versions": [v.to_dict() for v in versions]}, "\n".join(lines))  # the MCP tool's shape
    return 0
