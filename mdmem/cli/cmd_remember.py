"""mdmem remember TEXT --kind K --subject S [--key K] [--scope team --team T] ..."""
from __future__ import annotations

import sys

from ..errors import HELD_EXIT_CODE
from ..model.kinds import kinds_for_writers
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("remember", help="write one note through the write gate")
    p.add_argument("text", help="the note's text ('-' reads standard input)")
    p.add_argument("--kind", required=True, help=f"one of: {kinds_for_writers()}")
    p.add_argument("--subject", required=True, help="like service:billing or user:alice")
    p.add_argument("--key")
    p.add_argument("--scope", choices=["private", "team"], help="default: team with --team, else private")
    p.add_argument("--team")
    p.add_argument("--owner", help="the private root's owner (default: you)")
    p.add_argument("--source", default="user")
    p.add_argument("--ttl", help="time to live, like 2h or 7d")
    p.add_argument("--valid-from")
    p.add_argument("--new-key", action="store_true", help="this is a new fact, not an update under a new key")
    p.add_argument("--expect-version", help="the version you read; the write fails if the note changed")
    p.add_argument("--context", help="what was around the note (a conversation turn's speaker, date, the turn "
                                     "before); searched with the note, not part of its text")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    text = sys.stdin.read() if a.text == "-" else a.text
    result = ctx.repo().remember(
        text, as_user=ctx.user, kind=a.kind, subject=a.subject, key=a.key, scope=a.scope, team=a.team,
        owner=a.owner, source=a.source, ttl=a.ttl, valid_from=a.valid_from, new_key=a.new_key,
        expect_version=a.expect_version, context=a.context, now=ctx.now)
    if result.status == "held":
        who = ctx.repo().approvers(result.review_id, as_user=ctx.user)
        hint = (f"  approve with: mdmem review approve {result.review_id}"
                + ("" if ctx.user in who else f" --as {who[0]}" + (f" (or {', '.join(who[1:])})" if who[1:] else ""))
                if who else "  nobody else may approve it: add a second member to the team")
        ctx.emit(result.to_dict(), f"held for review as {result.review_id}: {result.reason}\n{hint}")
        return HELD_EXIT_CODE
    verb = "superseded" if result.superseded else "created"
    ctx.emit(result.to_dict(), f"{verb} {result.path} (commit {result.commit[:10]}, version {result.version[:10]})")
    return 0
