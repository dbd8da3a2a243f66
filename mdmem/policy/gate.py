"""The write gate (DESIGN 6): what may be written, what is refused, what is held.

Checks run before anything is written. Scope permission and derivation scope live in
:mod:`mdmem.policy.access`; this module adds the key-reuse rule and provenance.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ..model.kinds import Contract
from ..errors import Refused


@dataclass(frozen=True)
class Provenance:
    trusted: bool
    reason: str


def judge_source(source: str, contract: Contract, trusted_patterns: tuple[str, ...]) -> Provenance:
    """Trusted sources write at once; everything else waits for a person. Closed by default."""
    if any(fnmatch.fnmatchcase(source, p) for p in trusted_patterns):
        return Provenance(True, f"source {source} is trusted in mdmem.toml")
    if source == "agent" and contract.agent_may_write:
        return Provenance(True, f"the agent may record {contract.name} notes itself")
    if source == "agent":
        return Provenance(False, f"the agent's own statement may not write a {contract.name} without review")
    return Provenance(False, f"source {source} is not trusted in mdmem.toml ([trust] sources)")


def check_key_reuse(key: str, existing_live_keys: list[str], *, new_key: bool, what: str) -> None:
    """A paraphrased update under a new key would leave the old fact live beside it."""
    if new_key or key in existing_live_keys or not existing_live_keys:
        return
    raise Refused(
        f"key: {what} already has live keys and {key!r} is not one of them; if this updates one of "
        "them, write under that key; if it is a new fact, say so (new_key=True / --new-key).",
        existing_keys=sorted(existing_live_keys))
