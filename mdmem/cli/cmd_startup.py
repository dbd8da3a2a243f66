"""mdmem startup --as USER: the view an agent starts from."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("startup", help="print your startup view (root guide + your scopes)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    text = ctx.repo().startup(as_user=ctx.user, now=ctx.now)
    ctx.emit({"user": ctx.user, "text": text}, text.rstrip())
    return 0
