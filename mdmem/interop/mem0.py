"""mem0's exports, in: a JSON list of memories, or an object holding one under ``results`` or
``memories`` (what ``Memory.get_all`` returns). Each memory is a fact about its ``user_id``
(``user:<id>``; or the subject given), keyed by its id, tagged with its ``categories``, valid
from its ``created_at``; written as ``tool:mem0`` (a machine's extraction: held for a person's
review unless mdmem.toml trusts it)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BadInput
from .importer import Source, name_part

MAX_FILE = 256 * 1024 * 1024


def read_mem0(path: str | Path, *, subject: str | None = None, source_name: str = "tool:mem0",
              scope: str | None = None, team: str | None = None) -> Source:
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise BadInput(f"{path}: not a regular file (a mem0 export is one JSON file)")
    if path.stat().st_size > MAX_FILE:
        raise BadInput(f"{path}: over {MAX_FILE} bytes; split the export")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not JSON ({str(exc).splitlines()[0]})") from None
    if isinstance(data, dict):
        data = data.get("results", data.get("memories"))
    if not isinstance(data, list):
        raise BadInput(f"{path}: a list of memories was expected (or an object with results/memories)")
    src = Source()
    for n, entry in enumerate(data, 1):
        where = f"memory {n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("memory"), str):
            src.refuse(where, "not a mem0 memory (an object with a memory text)")
            continue
        ident = str(entry.get("id") or entry.get("hash") or n)
        about = subject or f"user:{name_part(str(entry.get('user_id') or 'unknown'), 'unknown')}"
        item: dict[str, Any] = {"text": entry["memory"], "kind": "fact", "subject": about,
                                "key": f"mem0.{name_part(ident, str(n), 80)}", "source": source_name,
                                "new_key": True, "line": f"{where} ({ident[:40]})",
                                "extra": {"mem0_id": ident}}
        categories = entry.get("categories")
        if isinstance(categories, list) and all(isinstance(c, str) for c in categories) and categories:
            item["extra"]["tags"] = categories
        if isinstance(entry.get("created_at"), str):
            item["valid_from"] = entry["created_at"]
        src.items.append(item)
    return src.placed(scope, team)
