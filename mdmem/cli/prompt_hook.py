"""Claude Code's UserPromptSubmit hook, answered fast: cli/launch.py reads the prompt from
stdin (``parse``) and hands its recall to the repo's daemon like any read-only call, so a
prompt does not wait for a fresh process's imports; without a daemon the recall runs in the
hook's process (``run_here``). Standard library only until the answer is printed.

Claude Code blocks the prompt on exit 2: this hook never exits 2. A failure prints to stderr
and exits 1 (shown to the person, the prompt goes on).
"""
from __future__ import annotations

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


def parse(argv: list[str], stdin: bytes) -> tuple[list[str], str] | int:
    """The recall to run for the hook's input and the folder it runs in, or the exit code when
    there is nothing to recall (0) or the input is not Claude Code's JSON (1).
    ``argv``: what follows `mdmem hooks claude-code run UserPromptSubmit`."""
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
    cwd = payload.get("cwd")
    cwd = cwd if isinstance(cwd, str) and os.path.isdir(cwd) else os.getcwd()
    # The prompt is the person's text, never options: after "--" a prompt like "-k" or
    # "--as=alice" is a question (argparse would take it as an option, fail and exit 2, which
    # blocks the prompt). A lone surrogate (JSON allows "\\ud800") becomes "?", not a crash.
    query = prompt[:MAX_PROMPT].encode("utf-8", "replace").decode("utf-8")
    return ["recall", "-k", str(K), "--json", *passed_options(argv), "--", query], cwd


def run_here(recall: list[str]) -> tuple[int, str, str]:
    """The recall in this process (no daemon answered): exit code, stdout, stderr."""
    import contextlib
    import io

    from .main import main as run_main  # (cli/launch.py gave a process started without site its site first)

    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        try:
            rc = run_main(recall)
        except SystemExit as exc:  # argparse's own exit: a failure like any other, never exit 2 here
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, buf_out.getvalue(), buf_err.getvalue()


def answer(rc: int, out: str, err: str) -> int:
    """Print the recalls as Claude Code's added context; a failed recall says why (exit 1)."""
    if rc != 0:
        sys.stderr.write(err or f"mdmem: recall for the prompt failed (exit {rc})\n")
        return 1
    from ..interop.hook_output import added_context, prompt_context

    text = prompt_context(json.loads(out).get("hits", []))
    if text:
        sys.stdout.write(json.dumps(added_context(EVENT, text)) + "\n")
    return 0
