"""Codex (OpenAI's codex CLI): its lifecycle hooks, fed from mdmem, as Codex documents them
(https://developers.openai.com/codex/hooks; the input and output schemas in openai/codex,
codex-rs/hooks/schema/generated/). Codex reads hooks from ``hooks.json`` beside a config layer
(``~/.codex/hooks.json``, ``<repo>/.codex/hooks.json``) in Claude Code's shape, and answers
``SessionStart`` and ``UserPromptSubmit`` with ``hookSpecificOutput.additionalContext``.

- ``SessionStart``: the person's startup view (interop/claude_code.session_start: the same
  bounded view, the same output).
- ``UserPromptSubmit``: the top recalls for the prompt, through the daemon (cli/prompt_hook.py).
- ``Stop`` (the end of each turn: Codex has no session-end event) and ``PreCompact``: an episode
  from the transcript Codex names (its rollout JSONL), bounded (interop/transcript.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BadInput
from ..policy.gate import AGENT
from ..results import WriteResult
from . import hook_config, transcript

if TYPE_CHECKING:
    from ..repo import MemoryRepo

EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact", "Stop")
MARK = "hooks codex run"  # how our entries in hooks.json are known again
# SessionStart's matcher filters on how the session started (startup, resume, clear, compact):
# the startup view is wanted on each.
MATCHERS = {"SessionStart": "startup|resume|clear|compact"}
TIMEOUTS = {"UserPromptSubmit": 10, "SessionStart": 30, "PreCompact": 60, "Stop": 60}
# What Codex puts in the conversation for the model, not what the person said.
BOILERPLATE = ("<environment_context>", "<user_instructions>", "<permissions instructions>", "# AGENTS.md instructions")


def _texts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [block["text"] for block in content[:200] if isinstance(block, dict)
            and block.get("type") in ("input_text", "output_text", "text") and isinstance(block.get("text"), str)]


def message_of(entry: dict[str, Any]) -> transcript.Message | None:
    """One line of a Codex rollout: ``{"timestamp", "type", "payload"}``; the conversation is in
    ``response_item`` lines (a ``message`` with a role and ``input_text``/``output_text`` parts,
    or a tool call by name). ``event_msg`` lines repeat it for the interface and are not read."""
    payload = entry.get("payload")
    if entry.get("type") != "response_item" or not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    if kind == "message" and payload.get("role") in ("user", "assistant"):
        texts = _texts(payload.get("content"))
        if payload["role"] == "user" and all(t.lstrip().startswith(BOILERPLATE) for t in texts):
            return None
        return str(payload["role"]), texts, []
    if kind in ("function_call", "custom_tool_call") and isinstance(payload.get("name"), str):
        return "tool", [], [payload["name"]]
    if kind == "local_shell_call":
        return "tool", [], ["shell"]
    return None


def read_transcript(path: str | Path) -> dict[str, Any]:
    """What a Codex rollout (JSONL) says, bounded (interop/transcript.py)."""
    return transcript.read(path, message_of)


def turn_text(payload: dict[str, Any], seen: dict[str, Any]) -> str:
    """The episode of one turn (``Stop``): its prompt, the tools it used, Codex's reply."""
    reply = payload.get("last_assistant_message")
    reply = transcript.clean(reply) if isinstance(reply, str) and reply.strip() else seen["last_reply"]
    tools = ", ".join(f"{transcript.clean(name)} x{n}" for name, n in seen["turn_tools"].items()) or "none"
    lines = [f"Codex session {transcript.clean(str(payload.get('session_id', '?')))[:80]}, turn "
             f"{transcript.clean(str(payload.get('turn_id', '?')))[:80]} in "
             f"{transcript.clean(str(payload.get('cwd', ''))) or 'an unknown folder'}; tools used: {tools}."]
    if seen["last_prompts"]:
        lines.append(f"Prompt: {seen['last_prompts'][-1]}")
    if reply:
        lines.append(f"Reply: {reply}")
    if seen["skipped"]:
        lines.append(f"({seen['skipped']} transcript line(s) too large or unreadable were skipped.)")
    return "\n".join(lines)[:transcript.MAX_EPISODE]


def record(repo: MemoryRepo, payload: dict[str, Any], *, as_user: str, agent: str = "codex",
           subject: str | None = None, now: Any = None) -> WriteResult | None:
    """The episode Codex's hook asks for (None: nothing happened): at ``Stop`` the turn that just
    ended, at ``PreCompact`` the session so far -- from the transcript Codex names. Codex may
    name none (``transcript_path`` null): a turn is then its last reply (``last_assistant_message``)."""
    event = payload.get("hook_event_name")
    path = payload.get("transcript_path")
    if isinstance(path, str) and path:
        seen = read_transcript(path)
    elif path is None and event == "Stop":
        seen = {"prompts": 0, "replies": 0, "first": None, "last_prompts": [], "last_reply": "", "tools": {},
                "turn_tools": {}, "skipped": 0}
    else:
        raise BadInput("transcript_path: the hook input names no transcript")
    if event == "Stop":
        text = turn_text(payload, seen)
        if not seen["last_prompts"] and "\nReply: " not in text:
            return None
    else:
        if not seen["prompts"] and not seen["replies"]:
            return None
        text = transcript.episode_text("Codex", payload, seen)
    return repo.remember(text, as_user=as_user, kind="episode",
                         subject=subject or transcript.subject_for(str(payload.get("cwd", ""))),
                         source=f"agent:{agent}", channel=AGENT, now=now)


def install_hooks(hooks_file: Path, command: str, options: str = "") -> dict[str, Any]:
    """Add mdmem's hooks to a Codex hooks.json (made if missing), keeping every other hook; ours
    (known by MARK) are replaced, never doubled."""
    out = hook_config.install(hooks_file, command, options, events=EVENTS, mark=MARK, tool="Codex",
                              timeouts=TIMEOUTS, matchers=MATCHERS)
    return {"hooks_file": out["file"], "events": out["events"], "command": out["command"]}
