"""mdmem host rules --gitolite|--forgejo|--gitlab|--github: a git host's access rules generated from
the memberships each scope repository's mdmem.toml declares (``--apply ADMIN_URL`` pushes gitolite's
to its gitolite-admin); mdmem host repos ADDRESS: the scope repositories this key may read there;
mdmem host clone ADDRESS PATH: a workspace mounting each of them."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("host", help="a git host's access rules from the declared memberships (rules), "
                       "what your key may read on a host (repos), a workspace of it (clone)",
                       description="`host rules --apply` and `host clone` act as someone: --as USER (or MDMEM_USER).")
    hs = p.add_subparsers(dest="host_action", metavar="ACTION", required=True)
    r = hs.add_parser("rules", help="print (or apply to gitolite) the host's rules for each scope root")
    fmt = r.add_mutually_exclusive_group(required=True)
    for name in ("gitolite", "forgejo", "gitlab", "github"):
        fmt.add_argument(f"--{name}", dest="format", action="store_const", const=name,
                         help=f"rules for {name}" + (" (gitolite.conf repo blocks)" if name == "gitolite" else
                                                     " (the settings to make, as text)"))
    r.add_argument("--repo", dest="repos", action="append", metavar="PATH",
                   help="a memory repository whose mdmem.toml declares the roots (repeat for several "
                        "scope repositories; default: the workspace or repository this runs in, or MDMEM_REPO)")
    r.add_argument("--root", dest="roots", action="append", metavar="ROOT",
                   help="only this scope root (team/<team> or private/<user>); repeatable")
    r.add_argument("--prefix", default="", help="the repositories' folder on the host (memory/ -> "
                   "memory/team/payments)")
    r.add_argument("--org", default="memory", help="Forgejo/GitLab/GitHub organization or group")
    r.add_argument("--apply", metavar="ADMIN_URL", help="gitolite: commit the rules to this gitolite-admin "
                   "repository and push (creates the repositories they name); one file per repository, "
                   "conf/mdmem/<name>.conf, so the rules of repositories not given stay as they were")
    r.add_argument("--as", dest="as_user", metavar="USER", help="with --apply: who commits the rules")
    r.add_argument("--json", action="store_true", help="print JSON for scripts and agents")
    r.set_defaults(run=run_rules)
    q = hs.add_parser("repos", help="the scope repositories your ssh key may read on a gitolite host")
    q.add_argument("address", help="the host: ssh://USER@HOST[:PORT] (GIT_SSH_COMMAND picks the key)")
    q.add_argument("--prefix", default="", help="the repositories' folder on the host")
    add_common(q, identity=False, repo=False)
    q.set_defaults(run=run_repos)
    c = hs.add_parser("clone", help="make a workspace of every scope repository your key may read on a host "
                      "(again on a workspace: mount what is new)")
    c.add_argument("address", help="the host: ssh://USER@HOST[:PORT] (GIT_SSH_COMMAND picks the key)")
    c.add_argument("path", help="the workspace folder (made if new)")
    c.add_argument("--prefix", default="", help="the repositories' folder on the host")
    add_common(c, repo=False)
    c.set_defaults(run=run_clone)


def _sources(ctx) -> list:
    """(root, the mdmem.toml governing it) of each repository given, of each mount of the workspace
    this runs in, or of the memory repository this runs in."""
    from pathlib import Path

    from ..host.rules import check_root, roots_declared
    from ..repo import MemoryRepo
    from .context import is_workspace

    wanted = [check_root(r, "--root") for r in ctx.args.roots or []]
    configs = []
    if ctx.args.repos:
        for given in ctx.args.repos:
            with MemoryRepo.open(Path(ctx.cwd, given)) as repo:
                configs.append((None, repo.config))
    else:
        here = ctx.repo()
        if is_workspace(here):
            configs = [(root, here.repo_for(root).config) for root in sorted(here.file.mounts)]
        else:
            configs = [(None, here.config)]
    out = []
    for root, config in configs:
        out += [(r, config) for r in ([root] if root else roots_declared(config)) if not wanted or r in wanted]
    return out


def run_rules(ctx) -> int:
    from ..errors import BadInput
    from ..host import gitolite
    from ..host.rules import grants, render

    a = ctx.args
    found = grants(_sources(ctx), prefix=a.prefix)
    text = render(found, a.format, org=a.org)
    applied = None
    if a.apply:
        if a.format != "gitolite":
            raise BadInput(f"host rules --apply: only gitolite rules are applied by mdmem; {a.format}'s are "
                           "settings for its admin (print them without --apply)")
        user = ctx.user
        applied = gitolite.apply(a.apply, found, identity=(user, f"{user}@mdmem.invalid"),
                                 ssh_command=ctx.env.get("GIT_SSH_COMMAND"))
    if ctx.json:
        ctx.emit({"format": a.format, "repositories": [g.to_dict() for g in found], "text": text,
                  "applied": applied})
    else:
        print(text, end="" if text.endswith("\n") else "\n")
        if a.apply:
            print(f"# applied to {a.apply}: " + (f"commit {applied[:10]}" if applied else "already there"))
    return 0


def run_repos(ctx) -> int:
    from ..host import gitolite

    a = ctx.args
    address = gitolite.Address.parse(a.address)
    pairs = gitolite.scope_repos(gitolite.readable(address, ssh_command=ctx.env.get("GIT_SSH_COMMAND")),
                                 prefix=a.prefix)
    rows = [{"root": root, "name": r.name, "url": address.url(r.name), "write": r.write} for root, r in pairs]
    ctx.emit({"host": str(address), "repositories": rows},
             "\n".join(f"{row['root']:<28} {row['url']}" + ("" if row["write"] else "  (read-only)") for row in rows)
             or f"{address}: no scope repository is readable with this key")
    return 0


def run_clone(ctx) -> int:
    import os
    import sys

    from ..host import gitolite
    from ..host.mount import from_host

    a = ctx.args
    address = gitolite.Address.parse(a.address)
    out = from_host(os.path.join(ctx.cwd, a.path), address, as_user=ctx.user, prefix=a.prefix,
                    ssh_command=ctx.env.get("GIT_SSH_COMMAND"), **ctx.settings(), user_config=ctx.user_config())
    for root, why in out.failed.items():
        print(f"mdmem: not mounted: {root}: {why}", file=sys.stderr)
    ctx.emit(out.to_dict(), f"workspace {out.workspace} for {ctx.user} from {out.host}: mounted "
             f"{', '.join(out.mounted) or 'nothing new'}"
             + (f"; already mounted {', '.join(out.already)}" if out.already else ""))
    return 9 if out.failed else 0
