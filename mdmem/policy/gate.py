"""The write gate (DESIGN 6): every check that decides whether a write is committed, held or
refused, in one place. The callers gather the facts (the current version, the live keys, the
notes a derivation names) under the repo lock and ask this module; nothing here touches disk.

Scope permission and the derivation-scope rule are :mod:`mdmem.policy.access`; provenance,
key reuse, append-only, optimistic concurrency, derivation inputs and review are here.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
from dataclasses import dataclass

from ..errors import BadInput, Conflict, Refused
from ..model.kinds import Contract
from .access import Access

# Where a write came from. The channel, not the caller, decides what a write may claim.
HUMAN = "human"  # the CLI or the Python API, driven by a person
AGENT = "agent"  # the MCP server: every write is agent:<name>, whatever its arguments say
SYSTEM = "system"  # mdmem's own jobs (consolidate): the only channel that may write system:<job>
CHANNELS = (HUMAN, AGENT, SYSTEM)


@dataclass(frozen=True)
class Provenance:
    trusted: bool
    reason: str


def is_agent_source(source: str) -> bool:
    return source == "agent" or source.startswith("agent:")


def check_claimed_identity(source: str, user: str, channel: str) -> None:
    """A source that names who wrote it must be true: ``human:<name>`` is only the acting person
    (else bob writes as dana, unreviewed, and every view says dana said it), and ``system:<job>``
    only mdmem's own jobs. Both are trusted sources, so a false claim would skip review."""
    if source.startswith("human:") and source != f"human:{user}":
        raise Refused(f"source: {source} names another person; {user} writes as user or human:{user}")
    if source.startswith("system:") and channel != SYSTEM:
        raise Refused(f"source: {source} is for mdmem's own jobs (consolidate, sync, sweep); a person writes "
                      f"as user or human:{user}, a tool's output as tool:<name>")


def judge_source(source: str, contract: Contract, trusted_patterns: tuple[str, ...],
                 agent_kinds: frozenset[str] | None = None, *, root: str = "",
                 agent_team_kinds: frozenset[str] = frozenset()) -> Provenance:
    """Trusted sources write at once; everything else waits for a person. Closed by default.

    An agent is trusted per kind, never by a source pattern (``agent:*`` in ``sources`` is a
    config error): in its person's private root, ``[trust] agent_kinds`` (else the kinds whose
    contract says ``agent_may_write``); in a team root (``root`` = ``team/<t>``) only
    ``[trust] agent_team_kinds``, empty by default -- what an agent writes there reaches every
    teammate's startup view, so by default a person of the team reviews it first."""
    if is_agent_source(source):
        if root.startswith("team/"):
            if contract.name in agent_team_kinds:
                return Provenance(True, f"the agent may record {contract.name} notes in team scopes itself")
            return Provenance(False, f"an agent's write ({source}) of a {contract.name} into {root} waits for a "
                                     "person's review ([trust] agent_team_kinds)")
        allowed = contract.agent_may_write if agent_kinds is None else contract.name in agent_kinds
        if allowed:
            return Provenance(True, f"the agent may record {contract.name} notes itself")
        return Provenance(False, f"an agent's write ({source}) of a {contract.name} waits for a person's review "
                                 "([trust] agent_kinds)")
    if any(fnmatch.fnmatchcase(source, p) for p in trusted_patterns):
        return Provenance(True, f"source {source} is trusted in mdmem.toml")
    return Provenance(False, f"source {source} is not trusted in mdmem.toml ([trust] sources)")


def check_agent_ttl(ttl: _dt.timedelta | None, contract: Contract, max_ttl: _dt.timedelta | None) -> None:
    """An agent may not keep a note alive longer than its kind's default (or ``[trust]
    agent_max_ttl``): a working note an agent writes into a team scope shows in every
    teammate's startup view, so how long it stays there is not the agent's choice."""
    cap = max_ttl if max_ttl is not None else contract.default_ttl
    if ttl is None or cap is None or ttl <= cap:  # no ttl given: the kind's default applies
        return
    raise BadInput(f"ttl: an agent may keep a {contract.name} note for at most {_span(cap)}, not {_span(ttl)} "
                   "(the kind's default_ttl, or [trust] agent_max_ttl in mdmem.toml)")


def _span(delta: _dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def check_key_reuse(key: str, existing_live_keys: list[str], *, new_key: bool, what: str) -> None:
    """A paraphrased update under a new key would leave the old fact live beside it."""
    if new_key or key in existing_live_keys or not existing_live_keys:
        return
    raise Refused(
        f"key: {what} already has live keys and {key!r} is not one of them; if this updates one of "
        "them, write under that key; if it is a new fact, say so (new_key=True / --new-key).",
        existing_keys=sorted(existing_live_keys))


def check_clean(path: str, worktree_version: str | None, head_version: str | None) -> None:
    """A person's uncommitted edit would be overwritten silently."""
    if worktree_version is not None and worktree_version != head_version:
        raise Conflict(f"{path}: has uncommitted edits in the work tree; commit or discard them first")


def check_append_only(path: str, contract: Contract, exists: bool) -> None:
    if contract.append_only and exists:
        raise Refused(f"{path}: episodes are append-only; this episode exists already, "
                      "write a new episode instead")


def check_expected_version(path: str, expect_version: str | None, current_version: str | None) -> None:
    """Optimistic concurrency: the writer read ``expect_version``; the note must still be it."""
    if expect_version is not None and expect_version != current_version:
        raise Conflict(f"{path}: changed since version {expect_version} (now {current_version or 'absent'}); "
                       "read it again and retry")


def check_unchanged_since_hold(path: str, base: str | None, now: str | None, *, override: bool) -> None:
    """A held write was judged against the note of its day: if the note changed since, the
    approver must see the newer version first (an older claim must not silently win)."""
    if now is None or override:
        return
    raise Conflict(f"{path}: changed since this write was held (held on {base[:10] if base else 'no note'}, "
                   f"now {now[:10]}); read it (mdmem show {path}), then reject the held write or approve it "
                   "with --override to supersede the newer version")


def check_derivation(access: Access, root: str, wanted_ids: set[str], found: dict[str, str]) -> None:
    """A derived note names live inputs, and is never readable by more people than they are.
    ``found``: the named ids that exist, each with its scope root."""
    missing = wanted_ids - set(found)
    if missing:
        raise Refused(f"derived_from: no live note with id {', '.join(sorted(missing))}")
    if not access.derived_scope_ok(root, list(found.values())):
        raise Refused(f"scope: a derived note in {root} would be wider than its inputs in "
                      f"{', '.join(sorted(set(found.values())))}; derive per scope")


def approvers(writer: str, channel: str, *, self_approve: bool, root: str, readers: frozenset[str]) -> list[str]:
    """Who may approve a held write: a second person, whichever channel it came over -- a
    person's own agent's team write is still reviewed by a teammate, else the person (or the
    agent with a shell) approves it alone and it reaches every teammate's startup view.
    In a private root the owner is the only person who may ever read the
    note, so no second person exists: the owner approves holds into their own private root.
    ``[review] self_approve = true`` lifts the rule for single-user repos. ``channel`` is kept
    for the record; it no longer changes the answer."""
    del channel
    if root.startswith("private/"):
        return [root.split("/", 1)[1]]
    if self_approve:
        return sorted(readers)
    return sorted(readers - {writer}) if writer else []


def check_approver(approver: str, writer: str, channel: str, *, self_approve: bool, root: str = "",
                   readers: frozenset[str] = frozenset(), review_id: str = "<id>") -> None:
    """Refused unless ``approver`` is one of :func:`approvers`."""
    if approver in approvers(writer, channel, self_approve=self_approve, root=root, readers=readers | {approver}):
        return
    others = [r for r in approvers(writer, channel, self_approve=self_approve, root=root, readers=readers)
              if r != approver]
    how = (f"another reader of {root} approves it: mdmem review approve {review_id} --as {others[0]}"
           + (f" (or {', '.join(others[1:])})" if others[1:] else "")) if others else \
        (f"nobody else can read {root}: add a second member to it "
         "(a single-user repo: [review] self_approve = true in mdmem.toml)")
    raise Refused(f"review: {approver} wrote this held change and may not approve it; {how}")
