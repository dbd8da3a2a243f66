"""mdmem ls [--subject S] [--kind K] [--root R] [--all]: the notes you may see."""
from __future__ import annotations

from ..model.clock import format_time
from ..model.kinds import DEFAULT_CONTRACTS
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("ls", help="list the notes you may see (live ones; --all for ended and expired too)")
    p.add_argument("--subject", help="like service:billing")
    p.add_argument("--kind", help=f"one of: {', '.join(DEFAULT_CONTRACTS)}")
    p.add_argument("--root", help="one scope root you may read, like team/payments or private/<you>")
    p.add_argument("--all", action="store_true", help="include notes that ended or expired")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    rows = ctx.repo().listing(as_user=ctx.user, subject=a.subject, kind=a.kind, root=a.root,
                              include_ended=a.all, now=ctx.now)
    data = [{"path": s.path, "kind": s.note.kind, "subject": s.note.subject, "key": s.note.key,
             "version": s.version, "first_line": s.note.first_line(), "tags": s.note.tags,
             "valid_until": format_time(s.note.valid_until), "expires_at": format_time(s.note.expires_at),
             "untrusted": s.untrusted}
            for s in rows]
    ctx.emit(data, "\n".join(f"{r['path']}\t{r['first_line']}" + (f"\t(UNTRUSTED: {r['untrusted']})"
                                                                   if r["untrusted"] else "")
                             for r in data) or "(no notes)")
    return 0
