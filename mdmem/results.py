"""What the public API returns: one module of result types, one ``to_dict`` rule.

The rule: ``to_dict()`` gives every field, always (None stays None, so a committed and a
held write have the same keys), times as ISO-8601 UTC strings, nested results and notes as
dicts. CLI ``--json`` and the MCP tools print exactly these dicts. Names are shared: a
note's identity is ``note_id``, its path ``path``, a blob id ``version``, who acted ``actor``.
(``StoredNote`` and ``Note`` live with the model, ``Hit`` with recall; they follow the rule.)
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .model.clock import format_time
from .model.note import Note
from .policy.gate import HUMAN

ProgressCallback = Callable[[int, int, str], None]
"""Long work reports ``(done, total, what)`` through this; the CLI draws it, the library never does."""

WriteStatus = Literal["committed", "held"]


def plain(value: Any) -> Any:
    """The ``to_dict`` rule for one value: times as ISO strings, results and notes as dicts."""
    if isinstance(value, _dt.datetime):
        return format_time(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


class Result:
    """Base of the result dataclasses: ``to_dict`` is every field through :func:`plain`."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class WriteResult(Result):
    """What the gate said: ``committed`` (commit, version, superseded) or ``held`` (review_id,
    reason). Refusals are raised (:class:`mdmem.errors.Refused`). Same keys either way."""

    status: WriteStatus
    path: str
    commit: str | None = None
    version: str | None = None
    superseded: str | None = None
    review_id: str | None = None
    reason: str | None = None
    note_id: str | None = None


@dataclass(frozen=True)
class Version(Result):
    """One version of a note from git (``note`` None where this commit deleted it)."""

    commit: str
    time: _dt.datetime
    op: str
    actor: str
    source: str
    version: str | None
    note: Note | None
    untrusted: str | None = None  # why this version's commit is not a permitted writer's
    path: str | None = None

    @property
    def note_id(self) -> str | None:
        return self.note.id if self.note else None

    @property
    def text(self) -> str | None:
        return self.note.text if self.note else None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "note_id": self.note_id, "text": self.text}


@dataclass(frozen=True)
class ReviewItem(Result):
    """A write held for review: the note it would write, who asked and why it was held."""

    review_id: str
    path: str
    note: Note
    actor: str
    reason: str
    commit: str
    channel: str = HUMAN
    new_key: bool = False
    expect_version: str | None = None
    claimed_source: str | None = None
    base_version: str | None = None  # the note's version when the write was held (None: it did not exist)
    changed_since: str | None = None  # the note's version now, when it changed after the hold


@dataclass(frozen=True)
class KeyInfo(Result):
    """One live key of a subject and kind (``keys``): where it is and its first line."""

    key: str
    root: str
    path: str
    version: str
    note_id: str
    first_line: str


@dataclass(frozen=True)
class SweepResult(Result):
    """What ``sweep`` removed (paths) in its one commit (None when nothing had expired)."""

    removed: list[str]
    commit: str | None


@dataclass
class BatchResult(Result):
    """What remember_many did: items committed, held for review and refused (each with its
    line), the commits made, and the index catch-up that made them searchable."""

    committed: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    index: dict[str, Any] = field(default_factory=dict)
