"""mdmem keys --subject S --kind K"""
from __future__ import annotations

from .context import add_common, add_note_selector, selector


def register(sub) -> None:
    p = sub.add_parser("keys", help="live keys for a subject and kind")
    add_note_selector(p, path=False, key=False, required=True)
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    rows = ctx.repo().keys(as_user=ctx.user, now=ctx.now, **selector(ctx))
    ctx.emit({"keys": [r.to_dict() for r in rows]},
             "\n".join(f"{r.key}\t{r.root}\t{r.first_line}" for r in rows) or "(no live keys)")
    return 0
