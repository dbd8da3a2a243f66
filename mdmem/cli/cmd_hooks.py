"""mdmem hooks install | mdmem hooks run NAME [ARGS]: the git hooks that travel with the repo."""
from __future__ import annotations

import os
import sys

from ..errors import Conflict
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("hooks", help="install mdmem's git hooks from its package into .git/hooks (install; commits the "
                       "merge driver's attributes, so it names who acts), or run one (run NAME)")
    p.add_argument("action", choices=["install", "run"])
    p.add_argument("hook", nargs="?", help="with run: pre-commit, post-merge or post-rewrite")
    p.add_argument("hook_args", nargs="*", help=
                   "with run: the arguments git passes the hook")
    add_common(p)
    p.set_defaults(run=run, skip_hook_check=True)


def run(ctx) -> int:
    from ..hooks import install as installing
    from ..hooks import run as running

    a = ctx.args
    if a.action == "install":
        out = installing.install(ctx.repo(), as_user=ctx.user, python=sys.executable, now=ctx.now)
        for notice in out["notices"]:
            print(notice, file=sys.stderr)
        ctx.emit(out, f"mdmem's hooks installed in {out['hooks_dir']}"
                 + (f"; committed the merge driver's attributes ({out['committed'][:10]})" if out["committed"] else "")
                 + ("" if out["git_runs_them"] else "; but git will not run them (see above)"))
        # Installed where git never looks is not installed: a script must notice (exit 5).
        return 0 if out["git_runs_them"] else Conflict.exit_code
    from ..storage.hook_git import toplevel

    root = toplevel()
    if a.hook == "pre-commit":
        # git tells the hook which index it commits through the environment (GIT_INDEX_FILE).
        report = running.pre_commit(root, env=dict(os.environ))
        for warning in report.warnings:
            print(warning, file=sys.stderr)
        for problem in report.problems:
            print(problem, file=sys.stderr)
        if report.problems:
            print(f"mdmem pre-commit: {len(report.problems)} problem(s); fix them, `git add`, commit again",
                  file=sys.stderr)
            return 2
    elif a.hook == "post-merge":
        report = running.post_merge(root, squash=bool(a.hook_args and a.hook_args[0] == "1"))
    elif a.hook == "post-rewrite":
        sys.stdin.read()  # git lists the rewritten commits; the views depend on the tip only
        from ..storage.gitstore import GitStore

        store = GitStore(root)  # the person's git identity is read through the store, like watch --commit
        report = running.post_rewrite(root, kind=(a.hook_args or [""])[0], actor=_actor(store, root),
                                    author=_author(store))
    else:
        from ..errors import BadInput
        raise BadInput(f"hooks run: {a.hook!r}; give pre-commit, post-merge or post-rewrite")
    if report.regenerated:
        print(f"mdmem {a.hook}: regenerated {', '.join(report.regenerated)}", file=sys.stderr)
    return 0


def _author(store):
    from ..watch import git_identity
    from ..errors import BadInput

    try:
        return git_identity(store)
    except BadInput:
        return None


def _actor(store, root) -> str:
    from ..config import Config
    from ..watch import git_user
    from ..errors import BadInput

    try:
        return git_user(store, Config.load(root))
    except BadInput:
        return "mdmem"
