"""Claude Code's UserPromptSubmit hook, answered fast: the prompt is read from stdin here and
its recall handed to the repo's daemon like any read-only call (cli/launch.py), so a prompt
waits ~50 ms, not a fresh process's start. Standard library only, as launch.py: the reply is
the daemon's ``mdmem recall --json``; without a daemon the recall runs in this process.

Claude Code blocks the prompt on exit 2: this hook never exits 2. A failure prints to stderr
and exits 1 (shown to the person, the prompt goes on).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys

EVENT = "UserPromptSubmit"
K = 3
MAX_PROMPT = 2000  # characters of the prompt used as the query
MAX_INPUT_BYTES = 1 << 20


def passed_options(argv: list[str]) -> list[str]:
    """--repo/--as/--now and their values from the hook's command line, for the recall."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--repo", "--as", "--now") and i + 1 < len(argv):
            out += [arg, argv[i + 1]]
            i += 2
            continue
        if arg.startswith(("--repo=", "--as=", "--now=")):
            out.append(arg)
        i += 1
    return out


def run(argv: list[str], stdin: bytes) -> int:
    """``argv``: what follows `mdmem hooks claude-code run UserPromptSubmit`."""
    from . import launch

    try:
        if len(stdin) > MAX_INPUT_BYTES:
            raise ValueError(f"{len(stdin)} bytes; a hook's JSON is at most {MAX_INPUT_BYTES}")
        payload = json.loads(stdin or b"{}")
        if not isinstance(payload, dict):
            raise ValueError("a JSON object was expected")
    except (ValueError, RecursionError) as exc:
        sys.stderr.write(f"mdmem: hook input: not the JSON Claude Code sends ({exc})\n")
        return 1
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return 0  # nothing to recall for
    recall = ["recall", prompt[:MAX_PROMPT], "-k", str(K), "--json", *passed_options(argv)]
    reply = None
    start_for = None
    if not launch.switch(os.environ, "MDMEM_NO_DAEMON", False):
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) and os.path.isdir(payload["cwd"]) \
            else os.getcwd()
        root = launch.repo_root_for_call(recall, os.environ, cwd)
        path = launch.socket_path(root) if root is not None else None
        reply = launch.ask_daemon(path, recall, os.environ, cwd) if path is not None else None
        if reply is None and path is not None and launch.switch(os.environ, "MDMEM_DAEMON_AUTOSTART", True):
            start_for = root
    if reply is not None and "rc" in reply:
        rc, out, err = int(reply["rc"]), reply.get("stdout", ""), reply.get("stderr", "")
    else:
        from .main import main as run_here

        buf_out, buf_err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
            rc = run_here(recall)
        out, err = buf_out.getvalue(), buf_err.getvalue()
        if start_for is not None and rc == 0:
            launch.autostart(start_for)
    if rc != 0:
        sys.stderr.write(err or f"mdmem: recall for the prompt failed (exit {rc})\n")
        return 1
    from ..interop.hook_output import added_context, prompt_context

    text = prompt_context(json.loads(out).get("hits", []))
    if text:
        sys.stdout.write(json.dumps(added_context(EVENT, text)) + "\n")
    return 0
