"""What an agent's hook (Claude Code's, Codex's) prints: added context, bounded and never cut
silently. Imports only the standard library and model/text.py: the prompt hook
(cli/prompt_hook.py) formats with it on its fast path."""
from __future__ import annotations

from ..model.text import escape_controls

TYPE_CHECKING = False  # (typing itself is not imported on the prompt hook's path)
if TYPE_CHECKING:
    from typing import Any

# Added context past ~10,000 characters reaches the model as a short preview only.
CONTEXT_BUDGET = 9000
SNIPPET = 300  # characters of one recalled note or transcript line


def added_context(event: str, text: str) -> dict[str, Any]:
    """The documented output: ``hookSpecificOutput.additionalContext`` for ``event``."""
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def bounded(text: str, budget: int, *, how: str) -> str:
    """``text`` within ``budget`` characters, cut at a line; what was cut is said, with ``how``
    to read it."""
    if len(text) <= budget:
        return text
    lines, kept, size = text.split("\n"), [], 0
    for line in lines:
        if size + len(line) + 1 > budget - 300:
            break
        kept.append(line)
        size += len(line) + 1
    left = len(lines) - len(kept)
    return "\n".join(kept) + (f"\n\n[mdmem: {left} more line(s), {len(text) - size} characters, of this view were "
                              f"left out to stay within {budget} characters; {how}]")


def prompt_context(hits: list[dict[str, Any]], budget: int = 4000) -> str:
    """The recalls for a prompt as added context (``mdmem recall --json``'s hits)."""
    if not hits:
        return ""
    lines = ["Memories from mdmem that may bear on this prompt (recall; check before relying on them):"]
    for h in hits:
        text = escape_controls(" ".join(str(h.get("text", "")).split()))[:SNIPPET]
        mark = f" (UNTRUSTED: {h['untrusted']})" if h.get("untrusted") else ""
        path = escape_controls(str(h.get("path", "")), newlines=False)
        lines.append(f"- [{h.get('kind', '?')}] {path}{mark}: {text}")
    return bounded("\n".join(lines), budget, how="ask `mdmem recall` for more")
