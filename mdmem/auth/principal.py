"""What a verified token says: one person, one agent label, the capabilities granted."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput, Refused
from ..model.layout import check_name

CAPABILITIES = ("read", "write", "delete")


class TokenRejected(Refused):
    """A bearer token that does not verify (unknown, bad signature, expired, revoked, another
    audience...). The reason is for the server's log; the client is told only 401."""


@dataclass(frozen=True)
class Principal:
    person: str
    agent: str  # provenance of its writes: agent:<agent>
    capabilities: frozenset[str]
    token_id: str  # names the token (rate limits, logs, revocation), never its secret
    expires_at: int | None = None  # unix seconds

    def __post_init__(self) -> None:
        check_name(self.person, "person")
        check_name(self.agent, "agent")
        unknown = self.capabilities - set(CAPABILITIES)
        if unknown or not self.capabilities:
            raise BadInput(f"capabilities: {sorted(self.capabilities)}; give some of {', '.join(CAPABILITIES)}")


def parse_capabilities(text: str, what: str = "--allow") -> frozenset[str]:
    caps = frozenset(c.strip() for c in text.split(",") if c.strip())
    unknown = caps - set(CAPABILITIES)
    if unknown or not caps:
        raise BadInput(f"{what}: {text!r}; give a comma list of {', '.join(CAPABILITIES)} (like read,write)")
    return caps
