"""mdmem retire PATH [--valid-until TIME]"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("retire", help="mark a note as no longer true")
    p.add_argument("path")
    p.add_argument("--valid-until")
    p.add_argument("--expect-version")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    result = ctx.repo().retire(as_user=ctx.user, path=ctx.note_path(a.path), valid_until=a.valid_until,
                               expect_version=a.expect_version, now=ctx.now)
    ctx.emit(result.to_dict(), f"retired {result.path} (commit {result.commit[:10]})")
    return 0
