"""mdmem hooks install | mdmem hooks run NAME [ARGS]: the git hooks that travel with the repo.
mdmem hooks claude-code install [--settings FILE] | run EVENT: Claude Code's hooks fed from mdmem.
mdmem hooks codex install [--settings FILE] | run EVENT: Codex's hooks (hooks.json) fed from mdmem."""
from __future__ import annotations

import os
import sys

from ..errors import Conflict, MdmemError
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("hooks", help="install mdmem's git hooks from its package into .git/hooks (install; commits the "
                       "merge driver's attributes, so it names who acts), or run one (run NAME)")
    p.add_argument("action", choices=["install", "run", "claude-code", "codex"],
                   help="claude-code: Claude Code's hooks (claude-code install, or claude-code run EVENT); "
                   "codex: Codex's hooks (codex install, or codex run EVENT)")
    p.add_argument("hook", nargs="?", help="with run: pre-commit, post-merge or post-rewrite; with claude-code or "
                   "codex: install or run")
    p.add_argument("hook_args", nargs="*", help=
                   "with run: the arguments git passes the hook; with claude-code run: the event "
                   "(SessionStart, UserPromptSubmit, PreCompact, SessionEnd); with codex run: the event "
                   "(SessionStart, UserPromptSubmit, PreCompact, Stop)")
    p.add_argument("--settings", help="with claude-code or codex install: the file to add the hooks to "
                   "(default .claude/settings.json, or .codex/hooks.json, in the current folder; "
                   "~/.claude/settings.json or ~/.codex/hooks.json for all projects)")
    p.add_argument("--subject", help="with claude-code or codex: the subject of session episodes "
                   "(default project:<folder>)")
    add_common(p)
    p.set_defaults(run=run, skip_hook_check=True)


def run(ctx) -> int:
    from ..hooks import install as installing
    from ..hooks import run as running

    a = ctx.args
    if a.action in ("claude-code", "codex"):
        return agent_hooks(ctx, a.action)
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


def agent_hooks(ctx, agent: str) -> int:
    """A coding agent's hooks (``claude-code`` or ``codex``): install them into its hooks file, or
    answer one (JSON on stdin)."""
    import shlex
    from pathlib import Path

    from ..errors import BadInput
    from ..interop import claude_code as cc
    from ..interop import codex

    a = ctx.args
    events = cc.EVENTS if agent == "claude-code" else codex.EVENTS
    if a.hook == "install":
        repo = ctx.repo()
        default = Path(".claude", "settings.json") if agent == "claude-code" else Path(".codex", "hooks.json")
        target = Path(ctx.cwd, a.settings) if a.settings else Path(ctx.cwd) / default
        # This interpreter without `site`, loading this mdmem by its path (cli/launch.py): the hook's
        # calls share the daemon the person's own `mdmem` calls start (its code stamp names the
        # interpreter), and a prompt does not wait for the site-packages walk.
        from .launch import hook_command

        command = " ".join(shlex.quote(x) for x in hook_command(agent))
        options = " ".join(shlex.quote(x) for x in ("--repo", str(repo.root), "--as", ctx.user,
                                                     *(("--subject", a.subject) if a.subject else ())))
        if agent == "claude-code":
            out = cc.install_settings(target, command, options)
            ctx.emit(out, f"Claude Code hooks ({', '.join(out['events'])}) written to {out['settings']}")
        else:
            out = codex.install_hooks(target, command, options)
            ctx.emit(out, f"Codex hooks ({', '.join(out['events'])}) written to {out['hooks_file']}; Codex runs a "
                          "new or changed hook once you trust it (/hooks in codex)")
        return 0
    if a.hook != "run" or len(a.hook_args) != 1 or a.hook_args[0] not in events:
        raise BadInput(f"hooks {agent}: give install, or run EVENT with EVENT one of {', '.join(events)}")
    try:
        return _answer(ctx, agent, a.hook_args[0])
    except MdmemError as exc:
        # Claude Code blocks the prompt (or the compaction) on exit 2: a hook that fails says why
        # and lets the session go on.
        print(f"mdmem: {exc}", file=sys.stderr)
        return 1


def _answer(ctx, agent: str, event: str) -> int:
    import json

    from ..interop import claude_code as cc
    from ..interop import codex

    a = ctx.args
    payload = cc.read_input(sys.stdin.buffer.read(cc.MAX_INPUT_BYTES + 1))
    repo = ctx.repo()
    if event == "SessionStart":
        print(json.dumps(cc.session_start(repo, as_user=ctx.user, now=ctx.now)))
    elif event == "UserPromptSubmit":  # cli/launch.py answers it through the daemon; this is the same, here
        from ..interop.hook_output import added_context, prompt_context

        prompt = payload.get("prompt")
        hits = repo.recall(prompt[:2000], as_user=ctx.user, k=3, now=ctx.now) if isinstance(prompt, str) \
            and prompt.strip() else []
        text = prompt_context([h.to_dict() for h in hits])
        if text:
            print(json.dumps(added_context(event, text)))
    else:
        record = cc.record_session if agent == "claude-code" else codex.record
        result = record(repo, payload, as_user=ctx.user, subject=a.subject, now=ctx.now)
        if result is not None:
            print(f"mdmem: session recorded as {result.path} ({result.status})", file=sys.stderr)
    return 0
