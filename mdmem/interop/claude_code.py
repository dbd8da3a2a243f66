"""Claude Code: its settings.json hooks, fed from mdmem, and what a session leaves behind.

- ``SessionStart``: the person's startup view as added context, within a budget; beyond it the
  context says what was left out and how to get it (never cut silently).
- ``UserPromptSubmit``: the top recalls for the prompt (cli/prompt_hook.py: through the daemon).
- ``PreCompact`` and ``SessionEnd``: an episode of what happened, read from the transcript path
  the hook receives -- bounded: a line over MAX_LINE_BYTES is skipped unread, the episode holds
  at most a few snippets of at most SNIPPET characters, control characters made visible.

Hook input and output are the documented JSON (stdin: ``hook_event_name``, ``session_id``,
``transcript_path``, ``cwd``, ``prompt``...; stdout: ``hookSpecificOutput.additionalContext``).
"""
from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter, deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput
from ..model.text import escape_controls
from ..policy.gate import AGENT
from ..results import WriteResult
from .hook_output import CONTEXT_BUDGET, SNIPPET, added_context, bounded

if TYPE_CHECKING:
    from ..repo import MemoryRepo

EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd")
MAX_INPUT_BYTES = 1 << 20  # a hook's stdin is a small JSON object
MAX_LINE_BYTES = 256 * 1024  # a transcript line bigger than this (a pasted file, an image) is skipped
MAX_EPISODE = 3000
MARK = "hooks claude-code run"  # how our entries in settings.json are known again


def read_input(raw: bytes) -> dict[str, Any]:
    """The hook's JSON from stdin, checked."""
    if len(raw) > MAX_INPUT_BYTES:
        raise BadInput(f"hook input: {len(raw)} bytes; a hook's JSON is at most {MAX_INPUT_BYTES}")
    try:
        payload = json.loads(raw or b"{}")
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"hook input: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(payload, dict):
        raise BadInput("hook input: a JSON object was expected (Claude Code sends one on stdin)")
    return payload


def session_start(repo: MemoryRepo, *, as_user: str, now: Any = None, budget: int = CONTEXT_BUDGET) -> dict:
    view = repo.startup(as_user=as_user, now=now)
    text = bounded(view, budget, how=f"run `mdmem startup --as {as_user}` for all of it, or "
                                     f"`mdmem recall \"QUESTION\" --as {as_user}`")
    return added_context("SessionStart", text)


# --- the transcript --------------------------------------------------------------------
def _clean(text: str) -> str:
    """One line of visible text: lone surrogates replaced, controls escaped, spaces collapsed."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return escape_controls(" ".join(text.split()), newlines=False)[:SNIPPET]


def _texts(content: Any) -> tuple[list[str], list[str]]:
    """A message's text parts and the names of the tools it used."""
    if isinstance(content, str):
        return [content], []
    texts, tools = [], []
    if isinstance(content, list):
        for block in content[:200]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                tools.append(block["name"][:60])
    return texts, tools


def read_transcript(path: str | Path) -> dict[str, Any]:
    """What a Claude Code transcript (JSONL) says, bounded: counts, the first prompt, the last
    prompts and reply, the tools used. Lines over MAX_LINE_BYTES are counted and skipped."""
    prompts, replies, tools = 0, 0, Counter[str]()
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
            if not isinstance(entry, dict) or entry.get("isMeta"):
                continue
            message = entry.get("message")
            if not isinstance(message, dict):
                continue
            texts, used = _texts(message.get("content"))
            tools.update(used)
            said = _clean(" ".join(texts)) if texts else ""
            if entry.get("type") == "user" and said:
                prompts += 1
                first = first if first is not None else said
                last_prompts.append(said)
            elif entry.get("type") == "assistant":
                replies += 1
                last_reply = said or last_reply
    return {"prompts": prompts, "replies": replies, "first": first, "last_prompts": list(last_prompts),
            "last_reply": last_reply, "tools": dict(tools.most_common(8)), "skipped": skipped}


def episode_text(payload: dict[str, Any], seen: dict[str, Any]) -> str:
    event = str(payload.get("hook_event_name", "session"))
    why = payload.get("trigger") or payload.get("reason") or ""
    cwd = _clean(str(payload.get("cwd", "")))
    tools = ", ".join(f"{_clean(name)} x{n}" for name, n in seen["tools"].items()) or "none"
    lines = [f"Claude Code session {_clean(str(payload.get('session_id', '?')))[:80]} ({event}"
             f"{', ' + _clean(str(why)) if why else ''}) in {cwd or 'an unknown folder'}: {seen['prompts']} "
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
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(cwd.rstrip("/")) or "").strip(".-_")
    return f"project:{(name or 'unknown')[:60]}"


def record_session(repo: MemoryRepo, payload: dict[str, Any], *, as_user: str, agent: str = "claude-code",
                   subject: str | None = None, now: Any = None) -> WriteResult | None:
    """The episode of what happened in a session, from its transcript (None: nothing happened)."""
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        raise BadInput("transcript_path: the hook input names no transcript")
    seen = read_transcript(path)
    if not seen["prompts"] and not seen["replies"]:
        return None
    return repo.remember(episode_text(payload, seen), as_user=as_user, kind="episode",
                         subject=subject or subject_for(str(payload.get("cwd", ""))),
                         source=f"agent:{agent}", channel=AGENT, now=now)


# --- settings.json ------------------------------------------------------------------------
def install_settings(settings: Path, command: str, options: str = "") -> dict[str, Any]:
    """Add mdmem's four hooks to a Claude Code settings file (made if missing), keeping every
    other setting and hook; ours (known by MARK) are replaced, never doubled. ``command`` runs
    `mdmem hooks claude-code run`; the event follows it, then ``options`` (repo, user)."""
    data: dict[str, Any] = {}
    if settings.is_symlink():
        raise BadInput(f"{settings}: a symbolic link; give the settings file itself")
    if settings.exists():
        try:
            data = json.loads(settings.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise BadInput(f"{settings}: not JSON ({str(exc).splitlines()[0]}); fix it or give another --settings") \
                from None
        if not isinstance(data, dict):
            raise BadInput(f"{settings}: a JSON object was expected")
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise BadInput(f"{settings}: hooks: a JSON object was expected")
    for event in EVENTS:
        groups = hooks.get(event, [])
        # A shape Claude Code would not read either is the person's to fix: replacing it would
        # drop their setting unseen, and walking it would fail half-way with no word of where.
        if not isinstance(groups, list) or not all(
                isinstance(g, dict) and isinstance(g.get("hooks", []), list)
                and all(isinstance(h, dict) for h in g.get("hooks", [])) for g in groups):
            raise BadInput(f"{settings}: hooks.{event}: expected a list of objects, each with \"hooks\": a list of "
                           "objects like {\"type\": \"command\", \"command\": \"...\"}; fix it, then install again")
        for group in groups:
            group["hooks"] = [h for h in group.get("hooks", []) if MARK not in str(h.get("command", ""))]
        groups = [g for g in groups if g.get("hooks")]
        ours: dict[str, Any] = {"hooks": [{"type": "command", "command": f"{command} {event} {options}".rstrip(),
                                           "timeout": 10 if event == "UserPromptSubmit" else 60}]}
        if event in ("SessionStart", "PreCompact"):
            ours["matcher"] = ""
        hooks[event] = [*groups, ours]
    settings.parent.mkdir(parents=True, exist_ok=True)
    # Settings files hold secrets (an "env" with API keys): the rewritten file keeps the
    # original's permission bits, and the temporary copy is never more open than that.
    mode = stat.S_IMODE(settings.stat().st_mode) if settings.exists() else 0o644
    tmp = settings.with_name(settings.name + ".mdmem-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2) + "\n")
        os.chmod(tmp, mode)
        os.replace(tmp, settings)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"settings": str(settings), "events": list(EVENTS), "command": command}
