"""A hooks file in Claude Code's shape -- ``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type":
"command", "command": ..., "timeout": ...}]}]}}`` -- which Claude Code's settings.json and Codex's
hooks.json both are: mdmem's entries added (known again by a mark in their command, so replaced,
never doubled), every other setting and hook kept, the file's permissions kept.
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BadInput


def install(path: Path, command: str, options: str, *, events: tuple[str, ...], mark: str,
            timeouts: Mapping[str, int], matchers: Mapping[str, str], tool: str) -> dict[str, Any]:
    """Add one hook per event to the hooks file at ``path`` (made if missing). ``command`` is
    followed by the event, then ``options``; an entry whose command holds ``mark`` is ours.
    ``tool`` names the agent in errors (the file's owner)."""
    data: dict[str, Any] = {}
    if path.is_symlink():
        raise BadInput(f"{path}: a symbolic link; give the file itself")
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise BadInput(f"{path}: not JSON ({str(exc).splitlines()[0]}); fix it or give another file") from None
        if not isinstance(data, dict):
            raise BadInput(f"{path}: a JSON object was expected")
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise BadInput(f"{path}: hooks: a JSON object was expected")
    for event in events:
        groups = hooks.get(event, [])
        # A shape the tool would not read either is the person's to fix: replacing it would
        # drop their setting unseen, and walking it would fail half-way with no word of where.
        if not isinstance(groups, list) or not all(
                isinstance(g, dict) and isinstance(g.get("hooks", []), list)
                and all(isinstance(h, dict) for h in g.get("hooks", [])) for g in groups):
            raise BadInput(f"{path}: hooks.{event}: expected a list of objects, each with \"hooks\": a list of "
                           f"objects like {{\"type\": \"command\", \"command\": \"...\"}} ({tool}'s shape); fix it, "
                           "then install again")
        for group in groups:
            group["hooks"] = [h for h in group.get("hooks", []) if mark not in str(h.get("command", ""))]
        groups = [g for g in groups if g.get("hooks")]
        ours: dict[str, Any] = {"hooks": [{"type": "command", "command": f"{command} {event} {options}".rstrip(),
                                           "timeout": timeouts.get(event, 60)}]}
        if event in matchers:
            ours["matcher"] = matchers[event]
        hooks[event] = [*groups, ours]
    path.parent.mkdir(parents=True, exist_ok=True)
    # Settings files hold secrets (an "env" with API keys): the rewritten file keeps the
    # original's permission bits, and the temporary copy is never more open than that.
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    tmp = path.with_name(path.name + ".mdmem-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2) + "\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"file": str(path), "events": list(events), "command": command}
