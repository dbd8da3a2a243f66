"""Kinds and their contracts (DESIGN 4). Defaults here; ``mdmem.toml`` may override."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace

from .clock import parse_duration
from ..errors import BadInput

# How a kind is read. Recall dispatches on this, not on the kind's name.
READ_EXACT_KEY = "exact_key"      # profile: exact key lookup; ranked only without a key
READ_RANK_LIVE = "rank_live"      # facts, decisions, procedures, summaries
READ_RANK_EVENTS = "rank_events"  # episodes: ranked as events, time matters
READ_NEWEST = "newest_first"      # working memory: newest live first


@dataclass(frozen=True)
class Contract:
    name: str
    keyed: bool
    append_only: bool
    read_rule: str
    default_ttl: _dt.timedelta | None = None
    aliases: tuple[str, ...] = ()
    # Whether an agent's own statement may write this kind without review.
    agent_may_write: bool = False


DEFAULT_CONTRACTS: dict[str, Contract] = {
    c.name: c
    for c in (
        Contract("profile", True, False, READ_EXACT_KEY, aliases=("preference",)),
        Contract("fact", True, False, READ_RANK_LIVE, aliases=("semantic",)),
        Contract("decision", True, False, READ_RANK_LIVE),
        Contract("procedure", True, False, READ_RANK_LIVE, aliases=("rule", "procedural")),
        Contract("episode", False, True, READ_RANK_EVENTS, aliases=("episodic", "event"),
                 agent_may_write=True),
        Contract("working", True, False, READ_NEWEST, default_ttl=_dt.timedelta(hours=1),
                 aliases=("buffer", "scratch"), agent_may_write=True),
        Contract("summary", True, False, READ_RANK_LIVE),
    )
}

SUMMARY_KEY = "digest"


@dataclass
class Contracts:
    """The kinds of one memory repo, with alias resolution."""

    kinds: dict[str, Contract] = field(default_factory=lambda: dict(DEFAULT_CONTRACTS))

    @classmethod
    def from_config(cls, section: dict | None) -> "Contracts":
        kinds = dict(DEFAULT_CONTRACTS)
        for name, opts in (section or {}).items():
            if name not in kinds:
                raise BadInput(f"mdmem.toml: kinds.{name}: unknown kind; known: {', '.join(kinds)}")
            base = kinds[name]
            changes = {}
            if "default_ttl" in opts:
                ttl = opts["default_ttl"]
                changes["default_ttl"] = None if ttl in (None, "", 0, "none") else parse_duration(
                    ttl, field=f"mdmem.toml: kinds.{name}.default_ttl")
            if "aliases" in opts:
                changes["aliases"] = tuple(str(a) for a in opts["aliases"])
            if "agent_may_write" in opts:
                changes["agent_may_write"] = bool(opts["agent_may_write"])
            kinds[name] = replace(base, **changes)
        return cls(kinds)

    def resolve(self, name: str) -> Contract:
        """The contract for a kind name or alias, case-insensitively."""
        wanted = (name or "").strip().lower()
        if wanted in self.kinds:
            return self.kinds[wanted]
        for contract in self.kinds.values():
            if wanted in contract.aliases:
                return contract
        known = sorted(set(self.kinds) | {a for c in self.kinds.values() for a in c.aliases})
        raise BadInput(f"kind: unknown kind {name!r}; use one of: {', '.join(known)}")

