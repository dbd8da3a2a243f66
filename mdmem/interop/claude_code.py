"""Claude Code: its settings.json hooks, fed from mdmem, and what a session leaves behind.

- ``SessionStart``: the person's startup view as added context, within a budget; beyond it the
  context says what was left out and how to get it (never cut silently).
- ``UserPromptSubmit``: the top recalls for the prompt (cli/prompt_hook.py: through the daemon).
- ``PreCompact`` and ``SessionEnd``: an episode of what happened, read from the transcript path
  the hook receives, bounded (interop/transcript.py).

Hook input and output are the documented JSON (stdin: ``hook_event_name``, ``session_id``,
``transcript_path``, ``cwd``, ``prompt``...; stdout: ``hookSpecificOutput.additionalContext``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput
from ..policy.gate import AGENT
from ..results import WriteResult
from . import hook_config, transcript
from .hook_output import CONTEXT_BUDGET, added_context, bounded

if TYPE_CHECKING:
    from ..repo import MemoryRepo

EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd")
MAX_INPUT_BYTES = 1 << 20  # a hook's stdin is a small JSON object
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
        raise BadInput("hook input: a JSON object was expected (the agent sends one on stdin)")
    return payload


def session_start(repo: MemoryRepo, *, as_user: str, now: Any = None, budget: int = CONTEXT_BUDGET) -> dict:
    view = repo.startup(as_user=as_user, now=now)
    text = bounded(view, budget, how=f"run `mdmem startup --as {as_user}` for all of it, or "
                                     f"`mdmem recall \"QUESTION\" --as {as_user}`")
    return added_context("SessionStart", text)


# --- the transcript --------------------------------------------------------------------
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
                tools.append(block["name"])
    return texts, tools


def message_of(entry: dict[str, Any]) -> transcript.Message | None:
    """One line of a Claude Code transcript: ``{"type": "user"|"assistant", "message": {"content":
    ...}}`` (``isMeta`` lines are not the conversation)."""
    message = entry.get("message")
    if entry.get("isMeta") or not isinstance(message, dict) or entry.get("type") not in ("user", "assistant"):
        return None
    texts, tools = _texts(message.get("content"))
    return str(entry["type"]), texts, tools


def read_transcript(path: str | Path) -> dict[str, Any]:
    """What a Claude Code transcript (JSONL) says, bounded (interop/transcript.py)."""
    return transcript.read(path, message_of)


def record_session(repo: MemoryRepo, payload: dict[str, Any], *, as_user: str, agent: str = "claude-code",
                   subject: str | None = None, now: Any = None) -> WriteResult | None:
    """The episode of what happened in a session, from its transcript (None: nothing happened)."""
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        raise BadInput("transcript_path: the hook input names no transcript")
    seen = read_transcript(path)
    if not seen["prompts"] and not seen["replies"]:
        return None
    return repo.remember(transcript.episode_text("Claude Code", payload, seen), as_user=as_user, kind="episode",
                         subject=subject or transcript.subject_for(str(payload.get("cwd", ""))),
                         source=f"agent:{agent}", channel=AGENT, now=now)


# --- settings.json ------------------------------------------------------------------------
def install_settings(settings: Path, command: str, options: str = "") -> dict[str, Any]:
    """Add mdmem's four hooks to a Claude Code settings file (made if missing), keeping every
    other setting and hook; ours (known by MARK) are replaced, never doubled. ``command`` runs
    `mdmem hooks claude-code run`; the event follows it, then ``options`` (repo, user)."""
    out = hook_config.install(settings, command, options, events=EVENTS, mark=MARK, tool="Claude Code",
                              timeouts={"UserPromptSubmit": 10}, matchers={"SessionStart": "", "PreCompact": ""})
    return {"settings": out["file"], "events": out["events"], "command": out["command"]}
