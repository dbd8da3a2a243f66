"""What the public API returns: one module of result types, one ``to_dict`` rule.

The rule: ``to_dict()`` gives every field, always (None stays None, so a committed and a
held write have the same keys), times as ISO-8601 UTC strings, nested results as dicts.
A result that carries a note NESTS it: ``"note": {every frontmatter field, "text"}``, with
the note's ``note_id`` and ``text`` also at the top level (where a reader looks first);
nothing of the note is flattened into the result (its ``source`` and a commit's ``source``
would collide). ``StoredNote`` (get/show), ``Version`` (history) and ``ReviewItem`` follow it;
``Hit`` carries no note, only its fields. CLI ``--json`` and the MCP tools print exactly
these dicts. Names are shared: a note's identity is ``note_id``, its path ``path``, a blob id
``version``, who acted ``actor`` (an erasure receipt's too; receipts written before said
``asked_by``, still read). (``StoredNote`` and ``Note`` live with the model, ``Hit`` with
recall; they follow the rule.)
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
    """Base of the result dataclasses: ``to_dict`` is every field through :func:`plain`; a
    result with a ``note`` field also gives the note's ``note_id`` and ``text`` beside it."""

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        if "note" in out:
            note: Note | None = getattr(self, "note")  # noqa: B009 -- declared by the subclass, not by Result
            out["note_id"] = note.id if note is not None else None
            out["text"] = note.text if note is not None else None
        return out


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
    moved_from: str | None = None  # a held move: the path the note leaves when approved
    moved_version: str | None = None  # ... and the version it was moved from

    @property
    def note_id(self) -> str:
        return self.note.id

    @property
    def text(self) -> str:
        return self.note.text


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


@dataclass(frozen=True)
class RenderResult(Result):
    """What ``render`` rewrote: the views (paths) in its one commit (None when all were fresh)."""

    commit: str | None
    views: list[str]


@dataclass(frozen=True)
class IndexReport(Result):
    """What ``reindex`` did to the disposable index: counts of notes indexed and removed, the
    notes kept out with why, whether it was rebuilt, vectors embedded and taken from the cache."""

    indexed: int
    removed: int
    broken: dict[str, str]
    rebuilt: bool
    embedded: int
    from_cache: int


@dataclass
class BatchResult(Result):
    """What remember_many did: items committed, held for review and refused (each with its
    line), the commits made, and the index catch-up that made them searchable."""

    committed: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    index: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ErasurePlan(Result):
    """What ``forget(dry_run=True)`` would change: every file and count, never an erased text.
    ``needs_force``: the plan changes many files and ``forget`` needs ``force=True`` for it."""

    targets: dict[str, Any]
    notes: list[str]
    other_files_erased: list[str]
    versions: int
    commits_to_rewrite: int
    # Those and every later commit: what makes every clone sync again. An upper bound: a commit
    # that the rewrite leaves empty is dropped, and one whose copy held no needle keeps its id.
    commits_with_new_ids: int
    copies_to_scrub: list[dict[str, Any]]
    not_scrubbed: list[dict[str, Any]]
    commit_messages_to_rewrite: int
    identities_pseudonymised: int
    stashes: list[dict[str, Any]]
    worktrees: list[dict[str, Any]]
    local_files: list[dict[str, Any]]
    refs_renamed: list[str]
    refs_deleted: list[dict[str, Any]]
    review_branches: list[str]
    roots: list[str]
    needs_force: bool
    mentions_outside_your_roots: list[str]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErasurePlan:
        """From ``erasure.plan.Plan.to_dict``: a key added there and not here fails loudly."""
        return cls(**data)


@dataclass(frozen=True)
class ErasureReceipt(Result):
    """What ``forget`` did, as committed to ``audit/erasures.jsonl`` (never an erased text,
    path or key): who asked (``actor``, pseudonymised when they erased themselves), the
    targets as given, counts, the rewritten commit ids (old, and the new ones it attests) and erased
    note blob ids, and where copies may remain
    (``remotes``; ``mentions``: live notes that still name the person, for review)."""

    id: str
    actor: str
    at: _dt.datetime
    targets: dict[str, Any]
    counts: dict[str, int]
    old_head: str | None
    new_head: str | None
    rewritten_commits: list[str]
    erased_blobs: list[str]
    mentions_for_review: list[str]
    mentions: list[dict[str, Any]]
    remotes: dict[str, str]
    # The commits the rewrite made (no signatures: filter-repo drops them); with require_signed
    # the receipt's commit, signed by the eraser, attests them (policy/verify.py).
    attested_commits: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErasureReceipt:
        """A receipt as recorded (the audit log, a journal): ``asked_by`` is the old word for actor."""
        from .model.clock import parse_time

        return cls(id=data["id"], actor=data.get("actor", data.get("asked_by", "")),
                   at=parse_time(data["at"], field="at"), targets=data.get("targets", {}),
                   counts=data.get("counts", {}), old_head=data.get("old_head"), new_head=data.get("new_head"),
                   rewritten_commits=data.get("rewritten_commits", []), erased_blobs=data.get("erased_blobs", []),
                   attested_commits=data.get("attested_commits", []),
                   mentions_for_review=data.get("mentions_for_review", []), mentions=data.get("mentions", []),
                   remotes=data.get("remotes", {}))


@dataclass(frozen=True)
class ProofReport(Result):
    """``prove_gone``: per needle (by index, never the text) each place checked with ``passed``
    and ``where``; the scope checks; what the asker could not check (not an eraser) and what
    mdmem cannot reach at all. ``verdict``: FAIL (found somewhere checked), INCOMPLETE (not
    found, but the asker could not read every place: ``complete_by`` names who can), or PASS;
    ``passed``: the verdict is PASS."""

    needles: list[dict[str, Any]]
    subject: str | None
    owner: str | None
    scope: dict[str, dict[str, Any]]
    not_checked: dict[str, Any]
    cannot_reach: list[str]
    passed: bool
    verdict: str = "PASS"
    complete_by: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProofReport:
        return cls(needles=data["needles"], subject=data.get("subject"), owner=data.get("owner"),
                   scope=data["scope"], not_checked=data.get("not_checked", {}), cannot_reach=data["cannot_reach"],
                   passed=data["passed"] if "passed" in data else data["pass"],  # "pass": before 2026-11-30
                   verdict=data.get("verdict", "PASS" if data.get("passed", data.get("pass")) else "FAIL"),
                   complete_by=data.get("complete_by", []))
