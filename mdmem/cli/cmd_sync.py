"""mdmem sync [--remote NAME] [--push]: integrate a team remote's history, or change nothing."""
from __future__ import annotations

from ..errors import PARTIAL_EXIT_CODE, BranchMoved, Incomplete
from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("sync", help="fetch and integrate a remote (views regenerated, keyed-note conflicts resolved "
                                    "by validity); anything needing a person changes nothing")
    p.add_argument("--remote", default="origin")
    p.add_argument("--push", action="store_true", help="push after integrating")
    p.add_argument("--replay", action="store_true",
                   help="after someone's erasure: re-apply this clone's own commits onto the erased history and drop "
                        "the old one (commits touching erased notes are left out and named)")
    add_common(p)
    p.set_defaults(run=run)


def run_workspace(ctx, ws) -> int:
    """Every mount synced in parallel: each mount's report under its root, as one repository's
    (what a replay left out, what still holds erased history); the exit code is the gravest."""
    result = ws.sync(as_user=ctx.user, remote=ctx.args.remote, push=ctx.args.push, replay=ctx.args.replay,
                     now=ctx.now)
    lines = []
    codes = []
    for m in result.mounts:
        if m.ok:
            lines.append(f"{m.root}: " + _report_text(m.report, ctx.args.remote).replace("\n", "\n  "))
            codes.append(_exit_code(m.report))
        else:
            lines.append(f"{m.root}: FAILED: {m.error}")
            codes.append(BranchMoved.exit_code)
    # Failed: not synced, or synced here and not published (as one repository's exit 5 says).
    failed = [m.root for m, code in zip(result.mounts, codes) if code == BranchMoved.exit_code]
    if failed:
        lines.append(f"{len(failed)} of {len(result.mounts)} mount(s) failed: " + ", ".join(failed))
    ctx.emit({**result.to_dict(), "failed": failed, "ok": not failed}, "\n".join(lines) or "no mounts")
    return min(codes, key=_GRAVITY.index) if codes else 0


def run(ctx) -> int:
    from ..remote import sync

    if is_workspace(ctx.repo()):
        return run_workspace(ctx, ctx.repo())
    out = sync(ctx.repo(), as_user=ctx.user, remote=ctx.args.remote, push=ctx.args.push, replay=ctx.args.replay,
               now=ctx.now)
    ctx.emit(out, _report_text(out, ctx.args.remote))
    return _exit_code(out)


def _report_text(out: dict, remote: str) -> str:
    """One repository's sync report, a line for each thing a person should know."""
    text = f"{out['status']}: {out['detail']}"
    for c in out.get("conflicts", []):
        text += (f"\n  conflict {c['path']}: {c['live_side']} version live ({c['rule']}); "
                 f"the other ({c['superseded'][:10]}) stays in history — `mdmem review list` shows it")
    for c in out.get("replayed", []):
        text += f"\n  replayed {c['commit'][:10]} as {c['as'][:10]}: {c['subject']}"
        if c.get("scrubbed"):
            text += f" ({c['why']}: {', '.join(c['scrubbed'])})"
    for c in out.get("left_out", []):
        text += f"\n  left out {c['commit'][:10]} ({c['why']}): {c['subject']}"
        for saved in c.get("saved", []):
            text += f"\n    saved, scrubbed: {saved}"
    if out.get("still_holding_erased"):
        text += ("\n  still holding the erased history (delete or rewrite them, then `git gc --prune=now`): "
                 + ", ".join(out["still_holding_erased"]))
    holds = out.get("holds", {})
    for what, label in (("fetched", "holds to review fetched"), ("closed", "closed holds dropped"),
                        ("remade", "holds made again on the erased history"),
                        ("dropped_erased", "holds dropped (they touched erased notes)"), ("pushed", "holds pushed"),
                        ("deleted", "closed holds deleted on the remote"), ("push_failed", "holds NOT pushed")):
        if holds.get(what):
            text += f"\n  {label}: {', '.join(holds[what])}"
    for refused in holds.get("refused", []):
        text += f"\n  not taken: review/{refused['id']} ({refused['why']})"
    if holds.get("error"):
        text += f"\n  {holds['error']}"
    for review_id in out.get("approved_and_rejected", []):
        text += (f"\n  review {review_id} was approved in one clone and rejected in another: the approved note is "
                 "live; retire it if the rejection stands")
    if out.get("push"):
        text += f"\n  {out['push']}"
    if out.get("erasure"):
        text += f"\n  the erasure on {remote}: {out['erasure']}"
    return text


# Exit codes of a sync, gravest first: a workspace's is its mounts' gravest.
_GRAVITY = (BranchMoved.exit_code, Incomplete.exit_code, PARTIAL_EXIT_CODE, 0)


def _exit_code(out: dict) -> int:
    holds = out.get("holds", {})
    # Integrated here but not published: the branch moved on the remote meanwhile (exit 5, like
    # BranchMoved), so a cron job or script notices and syncs again.
    if out.get("push", "pushed") != "pushed" or holds.get("push_failed") or holds.get("error"):
        return BranchMoved.exit_code
    # An erasure published to a remote that still serves the erased objects is not done there
    # (exit 11, as forget --push).
    if out.get("erasure", "").startswith("NOT erased"):
        return Incomplete.exit_code
    # A replay that could not keep everything: the rest is saved scrubbed and named, not lost
    # silently (exit 10, as an import that kept some items and not others).
    return PARTIAL_EXIT_CODE if out.get("left_out") else 0
