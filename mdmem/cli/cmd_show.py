"""mdmem show PATH: one note you may see, every field (editors' too), live or not."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("show", help="one note with every frontmatter field, whether live or not")
    p.add_argument("path")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..model.clock import resolve_now

    stored = ctx.repo().show(as_user=ctx.user, path=ctx.note_path(ctx.args.path))
    live = stored.note.is_live(resolve_now(ctx.now))
    data = {**stored.to_dict(), "live": live}
    fields = "\n".join(f"{k}: {v}" for k, v in stored.note.metadata().items())
    ctx.emit(data, f"{stored.path} (version {stored.version[:10]}, {'live' if live else 'not live now'})\n"
                   f"{fields}\n\n{stored.note.text}")
    return 0
