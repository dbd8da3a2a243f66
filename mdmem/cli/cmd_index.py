"""mdmem index [--rebuild]: catch the cache up with the notes, or rebuild it."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("index", help="catch the index up with the notes (--rebuild: from scratch)")
    p.add_argument("--rebuild", action="store_true")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    report = ctx.repo().reindex(rebuild=ctx.args.rebuild, progress=ctx.progress())
    d = report.to_dict()
    text = (f"{'rebuilt' if report.rebuilt else 'caught up'}: {report.indexed} indexed, {report.removed} removed, "
            f"{report.embedded} embedded, {report.from_cache} vectors from the cache")
    for path, reason in report.broken.items():
        text += f"\n{path}: {reason} (kept out of the index)"
    ctx.emit(d, text)
    return 0
