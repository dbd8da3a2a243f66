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


# Each kind described once, for people (the root MEMORY.md guide) and agents (MCP
# instructions): what it holds and how to use it.
KIND_GUIDE = [
    ("profile", "Who someone is and what they prefer. One note per key; a new write replaces it.",
     "Read by exact key (`get`); write when the person states a lasting preference."),
    ("fact", "Something true now about a subject. A new write under the same key supersedes it.",
     "Update under the key you were shown; retiring it ends it; a really new fact says it is new (a new key)."),
    ("decision", "A choice that was made and why. Superseded by key like a fact.",
     "Write when a decision is taken; recall before reopening it."),
    ("procedure", "How to do something (rules, checklists). A new version replaces the old.",
     "Follow the current version; write when the team changes how it works."),
    ("episode", "Something that happened. Append-only: never superseded, never edited.",
     "Write after notable events (incidents, releases, rejections); ask about the past with them."),
    ("working", "Scratch state for the task at hand. Keyed; expires after its TTL (default 1 hour).",
     "Write what you are doing now under a key (like file); do not rely on it across sessions."),
    ("summary", "A per-scope digest built by consolidation from the live notes it lists.",
     "Never write it by hand: consolidation regenerates it from the notes it lists."),
]


def _span(delta: _dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def writing_rule(contract: Contract) -> str:
    """What a writer must know of one kind, read off its contract (never worded by hand)."""
    if contract.name == "summary":
        return "built by consolidate from the notes it lists; not written by hand"
    parts = []
    if contract.append_only:
        parts.append("append-only; key optional")
    elif contract.keyed:
        parts.append("keyed: a write under an existing key supersedes it")
    if contract.default_ttl:
        parts.append(f"expires after ttl, default {_span(contract.default_ttl)}")
    return "; ".join(parts)


def kinds_for_writers(contracts: dict[str, Contract] | None = None) -> str:
    """Every kind with its writing rule, for the MCP remember tool and the CLI's help; kinds in a
    row with the same rule share it ("profile, fact (keyed: ...)")."""
    from itertools import groupby

    groups = groupby((contracts or DEFAULT_CONTRACTS).values(), key=writing_rule)
    return ", ".join(f"{', '.join(c.name for c in same)} ({rule})" for rule, same in groups)


def agent_review_rule(contracts: dict[str, Contract] | None = None) -> str:
    """Which kinds an agent's own statement may write at once and which wait for a person."""
    kinds = contracts or DEFAULT_CONTRACTS
    held = [n for n, c in kinds.items() if not c.agent_may_write and n != "summary"]
    direct = [n for n, c in kinds.items() if c.agent_may_write]
    return (f"An agent's {', '.join(held)} notes wait for a person's review; {' and '.join(direct)} notes "
            "in your private memory are written at once, and in a team scope they wait for review too "
            "unless the team allows it.")
