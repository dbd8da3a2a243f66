"""mdmem workspace: make a workspace, mount and unmount scope repositories, list the mounts."""
from __future__ import annotations

import os

from ..errors import BadInput
from ..workspace import Workspace, locate
from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("workspace", help="a folder mounting the scope repositories you may read",
                       description="A workspace mounts scope repositories (one per team/<team> or "
                                   "private/<user>) at their roots; every mdmem command run inside it acts on "
                                   "all of them. Each OP takes --as USER (or MDMEM_USER) and --json.")
    ops = p.add_subparsers(dest="op", metavar="OP", required=True)
    init = ops.add_parser("init", help="make an empty workspace for a person")
    init.add_argument("path")
    add_common(init, repo=False)
    add = ops.add_parser("add", help="clone a scope repository and mount it at its root")
    add.add_argument("root", help="team/<team> or private/<user>")
    add.add_argument("remote", help="the repository's remote (URL or path)")
    add_common(add)
    remove = ops.add_parser("remove", help="unmount a root and delete its clone")
    remove.add_argument("root")
    remove.add_argument("--force", action="store_true", help="even with commits not pushed or edits not committed")
    add_common(remove)
    listing = ops.add_parser("list", help="the mounts: root, remote, HEAD, ahead/behind, dirty, writable")
    add_common(listing)
    for parser in (init, add, remove, listing):
        parser.set_defaults(run=run)


def _workspace(ctx) -> Workspace:
    given = getattr(ctx.args, "repo", None) or ctx.env.get("MDMEM_REPO")
    where = os.path.join(ctx.cwd, given) if given else ctx.cwd
    if locate(where) is None:
        raise BadInput(f"{where}: not inside a workspace; mdmem workspace init PATH --as USER makes one "
                       "(or pass --repo WORKSPACE)")
    repo = ctx.repo()
    assert is_workspace(repo)
    return repo  # type: ignore[return-value]


def run(ctx) -> int:
    a = ctx.args
    if a.op == "init":
        ws = Workspace.init(os.path.join(ctx.cwd, a.path), as_user=ctx.user, now=ctx.now,
                            **ctx.settings(), user_config=ctx.user_config())
        ws.close()
        ctx.emit({"path": str(ws.root), "user": ws.user}, f"Initialised workspace for {ws.user} in {ws.root}.")
        return 0
    ws = _workspace(ctx)
    if a.op == "add":
        local = os.path.join(ctx.cwd, a.remote)
        remote = os.path.abspath(local) if os.path.exists(local) else a.remote  # a path stays right from anywhere
        info = ws.add(a.root, remote, as_user=ctx.user)
        ctx.emit(info.to_dict(), f"mounted {info.root} from {info.remote} at {ws.root / info.root}"
                 + ("" if info.writable else " (read-only for you)"))
    elif a.op == "remove":
        ws.remove(a.root, as_user=ctx.user, force=a.force)
        ctx.emit({"removed": a.root}, f"unmounted {a.root}")
    else:
        ws.check_user(ctx.user)
        mounts = ws.mount_list()
        lines = []
        for m in mounts:
            ab = "no upstream" if m.ahead is None else f"ahead {m.ahead}, behind {m.behind}"
            flags = ("writable" if m.writable else "read-only" if m.readable else "NOT READABLE")
            lines.append(f"{m.root}  {m.remote}  {(m.head or '(empty)')[:10]}  {ab}  "
                         f"{'dirty ' + str(len(m.dirty)) if m.dirty else 'clean'}  {flags}"
                         + (f"\n  {m.problem}" if m.problem else ""))
        ctx.emit({"workspace": str(ws.root), "user": ws.user, "mounts": [m.to_dict() for m in mounts]},
                 "\n".join(lines) or "no mounts (mdmem workspace add ROOT REMOTE)")
    return 0
