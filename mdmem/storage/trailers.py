"""Commit trailers (Memory-Op, Memory-Actor, ...): how mdmem writes and reads the lines that make
`git log` an audit trail."""
from __future__ import annotations

from dataclasses import dataclass





@dataclass(frozen=True)
class Trailers:
    op: str
    actor: str
    source: str
    evidence: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()

    def render(self) -> str:
        lines = [f"Memory-Op: {self.op}", f"Memory-Actor: {self.actor}", f"Memory-Source: {self.source}"]
        if self.evidence:
            lines.append(f"Memory-Evidence: {', '.join(self.evidence)}")
        lines += [f"{k}: {v}" for k, v in self.extra]
        return "\n".join(lines)


def parse_trailers(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in message.splitlines():
        if line.startswith("Memory-") and ": " in line:
            k, v = line.split(": ", 1)
            out[k[len("Memory-"):].lower()] = v.strip()
    return out
