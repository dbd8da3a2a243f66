"""mdmem review list | approve ID | reject ID"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("review", help="writes held for review")
    p.add_argument("action", choices=["list", "approve", "reject"])
    p.add_argument("review_id", nargs="?")
    p.add_argument("--new-key", action="store_true")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    repo = ctx.repo()
    if a.action == "list":
        items = repo.review_list(as_user=ctx.user)
        ctx.emit([i.to_dict() for i in items],
                 "\n".join(f"{i.review_id}  {i.path}  by {i.actor}: {i.note.first_line()}\n    {i.reason}"
                           for i in items) or "(nothing held for review)")
        return 0
    if not a.review_id:
        from ..errors import BadInput
        raise BadInput(f"review {a.action}: give the review id (mdmem review list shows them)")
    if a.action == "approve":
        result = repo.approve(a.review_id, as_user=ctx.user, new_key=a.new_key, now=ctx.now)
        ctx.emit(result.to_dict(), f"approved {a.review_id}: {result.path} (commit {result.commit[:10]})")
    else:
        item = repo.reject(a.review_id, as_user=ctx.user, now=ctx.now)
        ctx.emit(item.to_dict(), f"rejected {a.review_id}: {item.path}")
    return 0
