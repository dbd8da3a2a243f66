"""mdmem review list | approve ID | reject ID"""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("review", help="writes held for review")
    p.add_argument("action", choices=["list", "approve", "reject"])
    p.add_argument("review_id", nargs="?")
    p.add_argument("--new-key", action="store_true")
    p.add_argument("--override", action="store_true",
                   help="approve even though the note changed after the write was held (it supersedes the newer one)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    repo = ctx.repo()
    if a.action == "list":
        items = repo.review_list(as_user=ctx.user)
        conflicts = repo.sync_conflicts(as_user=ctx.user)
        # The whole held text, indented: a reviewer approves what they read (a first line alone
        # hid an agent's payload in the lines after it).
        text = "\n".join(f"{i.review_id}  {i.path}  by {i.actor}:\n"
                         + "\n".join(f"    | {line}" for line in i.note.text.splitlines()) + f"\n    {i.reason}"
                         + (f"\n    the note changed since it was held (now {i.changed_since[:10]}): "
                            "read it before approving" if i.changed_since else "")
                         for i in items)
        text += "".join(f"\nsync conflict  {c['path']}: live {c['live'][:10]}, superseded {c['superseded'][:10]} "
                        f"({c['rule']}; merge {c['merge'][:10]}); `mdmem history {c['path']}` shows both"
                        for c in conflicts)
        if ctx.json:
            # One object, as every other --json answer (a bare list mixed two kinds of item).
            ctx.emit({"held": [i.to_dict() for i in items], "sync_conflicts": conflicts})
        else:
            ctx.emit(None, text.strip() or "(nothing held for review)")
        return 0
    if not a.review_id:
        from ..errors import BadInput
        raise BadInput(f"review {a.action}: give the review id (mdmem review list shows them)")
    if a.action == "approve":
        result = repo.approve(a.review_id, as_user=ctx.user, new_key=a.new_key, override=a.override, now=ctx.now)
        ctx.emit(result.to_dict(), f"approved {a.review_id}: {result.path} (commit {result.commit[:10]})")
    else:
        item = repo.reject(a.review_id, as_user=ctx.user, now=ctx.now)
        ctx.emit(item.to_dict(), f"rejected {a.review_id}: {item.path}")
    return 0
