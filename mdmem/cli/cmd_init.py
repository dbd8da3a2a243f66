"""mdmem init PATH --as USER --team payments=alice,bob"""
from __future__ import annotations

from ..errors import BadInput
from ..repo import MemoryRepo
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("init", help="make a new memory repository")
    p.add_argument("path")
    p.add_argument("--team", action="append", default=[], metavar="TEAM=USER,USER",
                   help="a team and its members; repeat for more teams")
    p.add_argument("--eraser", action="append", default=[], metavar="USER",
                   help="a user who may erase team notes and other people's data (repeatable)")
    p.add_argument("--scope-root", metavar="ROOT",
                   help="make a scope repository holding only ROOT (team/<team> or private/<user>), "
                        "for a workspace to mount")
    add_common(p, repo=False)
    p.set_defaults(run=run)


def parse_teams(values: list[str]) -> dict[str, list[str]]:
    teams: dict[str, list[str]] = {}
    for value in values:
        team, sep, members = value.partition("=")
        if not sep or not team or not members:
            raise BadInput(f"--team: {value!r}; write TEAM=USER,USER (like payments=alice,bob)")
        teams[team.strip()] = [m.strip() for m in members.split(",") if m.strip()]
    return teams


def run(ctx) -> int:
    from ..config import IMPLICIT_EMAIL_DOMAIN
    from ..storage.queries import git_user_email

    # The founder's own git address goes into [people.<founder>] emails: their hand edits,
    # committed with plain git, are then theirs (not an unknown writer's, untrusted). mdmem's
    # own address for them stays first: it is what mdmem's commits for them carry.
    email = git_user_email(ctx.cwd, ctx.env)
    emails = ({ctx.user: [f"{ctx.user}@{IMPLICIT_EMAIL_DOMAIN}", email]}
              if email and not email.lower().endswith("@" + IMPLICIT_EMAIL_DOMAIN) else None)
    repo = MemoryRepo.init(ctx.args.path, teams=parse_teams(ctx.args.team), erasers=ctx.args.eraser,
                           as_user=ctx.user, now=ctx.now, emails=emails, scope_root=ctx.args.scope_root)
    ctx.emit({"path": str(repo.root), "teams": {t: sorted(m) for t, m in repo.config.teams.items()},
              "commit": repo.store.head(), "scope_root": repo.config.scope_root},
             f"Initialised memory repo in {repo.root} ({len(repo.config.teams)} team(s)).")
    return 0
