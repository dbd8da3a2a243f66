"""mdmem sync [--remote NAME] [--push]: integrate a team remote's history, or change nothing."""
from __future__ import annotations

from ..errors import BranchMoved
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("sync", help="fetch and integrate a remote (views regenerated, keyed-note conflicts resolved "
                                    "by validity); anything needing a person changes nothing")
    p.add_argument("--remote", default="origin")
    p.add_argument("--push", action="store_true", help="push after integrating")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..remote import sync

    out = sync(ctx.repo(), as_user=ctx.user, remote=ctx.args.remote, push=ctx.args.push, now=ctx.now)
    text = f"{out['status']}: {out['detail']}"
    for c in out["conflicts"]:
        text += (f"\n  conflict {c['path']}: {c['live_side']} version live ({c['rule']}); "
                 f"the other ({c['superseded'][:10]}) stays in history — `mdmem review list` shows it")
    if out.get("push"):
        text += f"\n  {out['push']}"
    ctx.emit(out, text)
    # Integrated here but not published: the branch moved on the remote meanwhile (exit 5, like
    # BranchMoved), so a cron job or script notices and syncs again.
    return BranchMoved.exit_code if out.get("push", "pushed") != "pushed" else 0
