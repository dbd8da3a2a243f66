"""Reading a history to import: JSONL (one note per line) or a folder of markdown files
(frontmatter + body), into items for ``MemoryRepo.remember_many``. What cannot be read is
reported with its line or file and the reason, never guessed at, and never stops the rest.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import BadInput

MAX_ITEM_BYTES = 256 * 1024  # a note is small; a bigger line or file is refused, not read
MAX_DEPTH = 8
# The fields an item may carry; anything else is refused so a typo never goes unnoticed.
FIELDS = {"text", "kind", "subject", "key", "scope", "team", "owner", "source", "ttl", "valid_from",
          "new_key", "derived_from", "extra", "context", "tags"}
# Frontmatter that editors add: kept with the note (``extra``), like fields added by hand;
# an editor's own ``id`` is dropped (the note gets mdmem's).
EDITOR_FIELDS = {"tags", "aliases", "title", "created", "updated", "id", "cssclass", "cssclasses"}


@dataclass
class Loaded:
    items: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: an alias bomb expands into gigabytes from a few lines."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in an import",
                                              event.start_mark)
        return super().compose_node(parent, index)


def _depth(value, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max([_depth(v, level + 1) for v in value.values()] or [level])
    if isinstance(value, list):
        return max([_depth(v, level + 1) for v in value] or [level])
    return level


def _check_fields(item: dict, where: str) -> dict:
    unknown = sorted(set(item) - FIELDS)
    if unknown:
        raise BadInput(f"{where}: {', '.join(unknown)}: not a field of a note to import "
                       f"(use {', '.join(sorted(FIELDS))})")
    if _depth(item) > MAX_DEPTH:
        raise BadInput(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if "tags" in item:  # a note field editors write in frontmatter; kept with the note's extra fields
        tags = item.pop("tags")
        extra = item.get("extra")
        item["extra"] = {**(extra if isinstance(extra, dict) else {}), "tags": tags}
    return item


def read_jsonl(path: Path) -> Loaded:
    """One JSON object per line; blank lines skipped. Items carry ``line`` (1-based)."""
    out = Loaded()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                if len(raw) > MAX_ITEM_BYTES:
                    raise BadInput(f"line {number}: {len(raw)} bytes; an item is at most {MAX_ITEM_BYTES}")
                try:
                    item = json.loads(raw)
                except (ValueError, RecursionError) as exc:
                    raise BadInput(f"line {number}: not JSON ({str(exc).splitlines()[0]})") from None
                if not isinstance(item, dict):
                    raise BadInput(f"line {number}: a JSON object was expected, got {type(item).__name__}")
                out.items.append({**_check_fields(item, f"line {number}"), "line": number})
            except BadInput as exc:
                out.refused.append({"line": number, "reason": str(exc), "exit_code": exc.exit_code})
    return out


def read_markdown_folder(folder: Path, defaults: dict | None = None) -> Loaded:
    """Every ``*.md`` below ``folder`` (sorted; symlinks and hidden folders skipped): the
    frontmatter gives the fields, the body the text. ``defaults`` fill fields a file lacks
    (for example kind and subject from the command line); ``key`` defaults to the file name."""
    out = Loaded()
    folder = Path(folder)
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".md"):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(folder).as_posix()
            try:
                out.items.append({**_read_markdown(full, rel, defaults or {}), "line": rel})
            except BadInput as exc:
                out.refused.append({"line": rel, "reason": str(exc), "exit_code": exc.exit_code})
    return out


def read_frontmatter_file(full: Path, rel: str, max_bytes: int = MAX_ITEM_BYTES) -> tuple[dict, str]:
    """A markdown file's frontmatter (a mapping; {} without one) and body, read as an import
    reads it: a regular file (no symlink), at most ``max_bytes``, UTF-8, YAML without aliases
    and not nested deeper than MAX_DEPTH. BadInput (naming ``rel``) otherwise."""
    if full.is_symlink():
        raise BadInput(f"{rel}: a symlink; import reads regular files only")
    if not full.is_file():
        raise BadInput(f"{rel}: not a regular file")
    size = full.stat().st_size
    if size > max_bytes:
        raise BadInput(f"{rel}: {size} bytes; a note is at most {max_bytes}")
    try:
        # A byte order mark (Windows editors write one) is no text: frontmatter after it is still frontmatter.
        data = full.read_bytes().decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BadInput(f"{rel}: not UTF-8 text") from None
    meta: dict = {}
    body = data
    if data.startswith("---"):
        lines = data.split("\n")
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
        if end is None:
            raise BadInput(f"{rel}: frontmatter opened with '---' is never closed")
        try:
            meta = yaml.load("\n".join(lines[1:end]), Loader=_NoAliasLoader) or {}
        except (yaml.YAMLError, RecursionError) as exc:
            raise BadInput(f"{rel}: frontmatter does not parse: {str(exc).splitlines()[0]}") from None
        if not isinstance(meta, dict):
            raise BadInput(f"{rel}: frontmatter is not a mapping")
        if _depth(meta) > MAX_DEPTH:
            raise BadInput(f"{rel}: frontmatter nested deeper than {MAX_DEPTH} levels")
        body = "\n".join(lines[end + 1:])
    return meta, body


def _read_markdown(full: Path, rel: str, defaults: dict) -> dict:
    meta, body = read_frontmatter_file(full, rel)
    kept = {k: v for k, v in meta.items() if k in EDITOR_FIELDS and k != "id" and v is not None}
    meta = {k: v for k, v in meta.items() if k not in EDITOR_FIELDS}
    if kept:
        meta["extra"] = kept
    for name in ("valid_from", "valid_until", "expires_at"):
        if name in meta and not isinstance(meta[name], str) and meta[name] is not None:
            meta[name] = meta[name].isoformat() if hasattr(meta[name], "isoformat") else str(meta[name])
    if meta.get("valid_until") is not None or meta.get("expires_at") is not None:
        raise BadInput(f"{rel}: valid_until / expires_at: import writes live notes; use ttl, or retire after")
    item = {"key": Path(rel).stem, **defaults, **meta, "text": body.strip()}
    if item.get("key") is not None and not isinstance(item["key"], str):
        item["key"] = str(item["key"])
    return _check_fields(item, rel)
