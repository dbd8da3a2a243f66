"""mdmem get (PATH | --subject S --kind K [--key K])"""
from __future__ import annotations

from .context import add_common, add_note_selector, selector


def register(sub) -> None:
    p = sub.add_parser("get", help="the live version of one note")
    add_note_selector(p)
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    stored = ctx.repo().get(as_user=ctx.user, now=ctx.now, **selector(ctx))
    warn = f"\nUNTRUSTED: {stored.untrusted} (mdmem verify)" if stored.untrusted else ""
    ctx.emit(stored.to_dict(), f"{stored.path} ({stored.version[:10]}){warn}\n{stored.note.text}")
    return 0
