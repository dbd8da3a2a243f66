"""A coding agent's session transcript (JSONL), read bounded, and the episode of the session made
from it: Claude Code's and Codex's hooks name their transcript's path (interop/claude_code.py,
interop/codex.py each say how one of their lines is a message).

Bounded: a line over MAX_LINE_BYTES is skipped unread, the episode holds at most a few snippets
of at most SNIPPET characters, control characters made visible.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..model.text import escape_controls
from .hook_output import SNIPPET

MAX_LINE_BYTES = 256 * 1024  # a transcript line bigger than this (a pasted file, an image) is skipped
MAX_EPISODE = 3000
# One line's message: its role ("user" or "assistant"), its text parts, the tools it used.
Message = tuple[str, list[str], list[str]]
MessageOf = Callable[[dict[str, Any]], "Message | None"]


def clean(text: str) -> str:
    """One line of visible text: lone surrogates replaced, controls escaped, spaces collapsed."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return escape_controls(" ".join(text.split()), newlines=False)[:SNIPPET]


def read(path: str | Path, message_of: MessageOf) -> dict[str, Any]:
    """What a transcript says, bounded: counts, the first prompt, the last prompts and reply, the
    tools used (in all, and since the last prompt: ``turn_tools``). ``message_of`` reads one
    parsed line (None: not a message). Lines over MAX_LINE_BYTES are counted and skipped."""
    prompts, replies, tools, turn_tools = 0, 0, Counter[str](), Counter[str]()
    first: str | None = None
    last_prompts: deque[str] = deque(maxlen=3)
    last_reply = ""
    skipped = 0
    full = Path(path)
    if full.is_symlink() or not full.is_file():
        raise BadInput(f"transcript_path: {path}: not a regular file")
    with open(full, "rb") as f:
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                skipped += 1
                while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass  # the rest of an oversized line, unread
                continue
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):  # a deeply nested line is no message either
                skipped += 1
                continue
            message = message_of(entry) if isinstance(entry, dict) else None
            if message is None:
                continue
            role, texts, used = message
            said = clean(" ".join(texts)) if texts else ""
            if role == "user" and said:
                turn_tools = Counter()  # a prompt starts a turn
            tools.update(name[:60] for name in used)
            turn_tools.update(name[:60] for name in used)
            if role == "user" and said:
                prompts += 1
                first = first if first is not None else said
                last_prompts.append(said)
            elif role == "assistant":
                replies += 1
                last_reply = said or last_reply
    return {"prompts": prompts, "replies": replies, "first": first, "last_prompts": list(last_prompts),
            "last_reply": last_reply, "tools": dict(tools.most_common(8)),
            "turn_tools": dict(turn_tools.most_common(8)), "skipped": skipped}


def episode_text(agent: str, payload: dict[str, Any], seen: dict[str, Any]) -> str:
    """The episode of a session (or a turn) of ``agent`` (its name, as people call it)."""
    event = str(payload.get("hook_event_name", "session"))
    why = payload.get("trigger") or payload.get("reason") or ""
    cwd = clean(str(payload.get("cwd", "")))
    tools = ", ".join(f"{clean(name)} x{n}" for name, n in seen["tools"].items()) or "none"
    lines = [f"{agent} session {clean(str(payload.get('session_id', '?')))[:80]} ({event}"
             f"{', ' + clean(str(why)) if why else ''}) in {cwd or 'an unknown folder'}: {seen['prompts']} "
             f"prompt(s), {seen['replies']} reply message(s); tools used: {tools}."]
    if seen["first"]:
        lines.append(f"First prompt: {seen['first']}")
    if seen["last_prompts"]:
        lines.append("Last prompts: " + " | ".join(seen["last_prompts"]))
    if seen["last_reply"]:
        lines.append(f"Last reply: {seen['last_reply']}")
    if seen["skipped"]:
        lines.append(f"({seen['skipped']} transcript line(s) too large or unreadable were skipped.)")
    return "\n".join(lines)[:MAX_EPISODE]


def subject_for(cwd: str) -> str:
    """The subject of a session's episode: the project it ran in (its folder's name)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(cwd.rstrip("/")) or "").strip(".-_")
    return f"project:{(name or 'unknown')[:60]}"
