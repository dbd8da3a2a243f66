"""Every import from another tool's files, through the facade's remember_many and its gate,
idempotent: an item whose note is already there with the same text and fields, or already
held for review as it is, is reported unchanged and not written again. A second run writes
nothing; a run killed halfway is finished by running it again (each batch is one commit)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MdmemError
from ..model import layout
from ..model.clock import parse_time
from ..model.note import lf_lines
from ..results import BatchResult, ProgressCallback

if TYPE_CHECKING:
    from ..repo import MemoryRepo

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Source:
    """What a reader found: items for remember_many, and what it refused (``line`` names the
    file or line, ``reason`` says why)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    # What it left out on purpose, not a fault of the source (an index of files it read).
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def refuse(self, where: str, reason: str, exit_code: int = 2) -> None:
        self.refused.append({"line": where, "reason": reason, "exit_code": exit_code})

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append({"line": where, "reason": reason})

    def placed(self, scope: str | None, team: str | None) -> Source:
        """Every item in ``scope``/``team`` (the command line's), where given."""
        where = {k: v for k, v in (("scope", scope), ("team", team)) if v}
        for item in self.items:
            item.update(where)
        return self


@dataclass
class ImportOutcome:
    result: BatchResult
    unchanged: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "unchanged": self.unchanged, "skipped": self.skipped}


def name_part(text: str, fallback: str = "x", max_len: int = 60) -> str:
    """``text`` as one safe part of a subject or key (letters, digits, '.', '_', '-')."""
    part = re.sub(r"\.{2,}", ".", _NAME_CHARS.sub("-", text)).strip(".-_")[:max_len].strip(".-_")
    return part or fallback


def target_path(repo: MemoryRepo, user: str, item: dict[str, Any]) -> str | None:
    """The note path an item would write (None when only the write can tell: an episode
    without a key or a time)."""
    kind = repo.contracts.resolve(item["kind"])
    scope = layout.default_scope(item.get("scope"), item.get("team"))
    root = layout.scope_root(scope, team=item.get("team"), owner=item.get("owner") or user)
    if kind.keyed:
        return layout.keyed_path(root, item["subject"], kind.name, item.get("key") or "")
    if item.get("key") and item.get("valid_from"):
        return layout.episode_path(root, item["subject"], parse_time(item["valid_from"], field="valid_from"),
                                   layout.check_key(item["key"]))
    return None


def _text_of(item: dict[str, Any]) -> str:
    """The text a write of ``item`` would store (LF line endings, as draft writes it): a CRLF
    file compared raw was never the same as its note, and each rerun wrote it again."""
    return lf_lines(str(item.get("text", ""))).strip()


def _same(note: Any, item: dict[str, Any], kind: str) -> bool:
    extra = item.get("extra") or {}
    return (note.text == _text_of(item) and note.kind == kind and note.valid_until is None
            and all(note.extra.get(k) == v for k, v in extra.items()))


def run_import(repo: MemoryRepo, source: Source, *, as_user: str, now: Any = None, new_key: bool = False,
               batch_size: int = 1000, progress: ProgressCallback | None = None) -> ImportOutcome:
    """Write what ``source`` holds through the gate (remember_many), leaving out what is
    already there unchanged; the source's refusals are reported with the gate's."""
    held = {(item.path, item.note.text) for item in repo.review_list(as_user=as_user)}
    paths: list[str | None] = []
    for item in source.items:
        try:
            paths.append(target_path(repo, as_user, item))
        except (MdmemError, KeyError, TypeError):
            paths.append(None)  # the gate says what is wrong with it
    # Items for one path are its versions, oldest first (an export with history): what the
    # note already holds is where to go on from, so a second run writes nothing and a run
    # killed halfway writes only the versions after the one it got to.
    last_same: dict[str, int] = {}
    current: dict[str, Any] = {}
    for n, (item, path) in enumerate(zip(source.items, paths)):
        if path is None:
            continue
        if path not in current:
            try:
                current[path] = repo.show(as_user=as_user, path=path).note
            except MdmemError:
                current[path] = None
        note = current[path]
        try:
            kind = repo.contracts.resolve(item["kind"]).name
        except (MdmemError, KeyError, TypeError):
            continue
        if note is not None and _same(note, item, kind):
            last_same[path] = n
    kept, unchanged = [], []
    for n, (item, path) in enumerate(zip(source.items, paths)):
        if path is not None and n <= last_same.get(path, -1):
            unchanged.append({"line": item.get("line"), "path": path, "reason": "already there, unchanged"})
        elif path is not None and (path, _text_of(item)) in held:
            unchanged.append({"line": item.get("line"), "path": path, "reason": "already held for review"})
        else:
            kept.append(item)
    result = repo.remember_many(kept, as_user=as_user, now=now, new_key=new_key, batch_size=batch_size,
                                progress=progress)
    result.refused = sorted(source.refused + result.refused, key=lambda r: (isinstance(r["line"], str), r["line"]))
    return ImportOutcome(result, unchanged, source.skipped)
