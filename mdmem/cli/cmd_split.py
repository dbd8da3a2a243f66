"""mdmem split --to FOLDER: one scope repository per root of this memory (each with its root's whole
history, receipts and holds; mdmem.toml reduced to what governs it); --push ssh://HOST pushes each
to its repository there. Prints which person gets which repository."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("split", help="turn this memory (every root in one repository) into one scope repository "
                       "per root, each with its root's whole history")
    p.add_argument("--to", required=True, metavar="FOLDER",
                   help="where the scope repositories go (FOLDER/team/payments...)")
    p.add_argument("--root", dest="roots", action="append", metavar="ROOT",
                   help="only this scope root (team/<team> or private/<user>); repeatable; default: every "
                   "declared root you may split")
    p.add_argument("--push", metavar="ADDRESS", help="push each to its repository on this host: ssh://USER@HOST[:PORT] "
                   "(apply `mdmem host rules` there first; GIT_SSH_COMMAND picks the key)")
    p.add_argument("--prefix", default="",
                   help="the repositories' folder on the host (memory/ -> memory/team/payments)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    import sys
    from pathlib import Path

    from ..errors import GitFailed
    from ..host import gitolite, split

    a = ctx.args
    repo = ctx.repo()
    address = gitolite.Address.parse(a.push) if a.push else None
    results = split.split(repo.root, Path(ctx.cwd, a.to), as_user=ctx.user, roots=a.roots, prefix=a.prefix,
                          config=repo.config, progress=ctx.progress())
    failed = split.push(results, address, ssh_command=ctx.env.get("GIT_SSH_COMMAND")) if address else []
    for line in failed:
        print(f"mdmem: not pushed: {line}", file=sys.stderr)
    people: dict[str, list[str]] = {}
    for r in results:
        for person in r.grant.readers:
            people.setdefault(person, []).append(r.root)
    lines = [f"{r.root:<28} {r.path}  {r.commits} commit(s), {len(r.holds)} hold(s)"
             + (f", pushed to {r.pushed}" if r.pushed else "") for r in results]
    lines += ["", "who gets which repository:"]
    lines += [f"  {person:<16} {', '.join(roots)}" for person, roots in sorted(people.items())]
    ctx.emit({"repositories": [r.to_dict() for r in results], "people": people, "not_pushed": failed},
             "\n".join(lines))
    return GitFailed.exit_code if failed else 0
