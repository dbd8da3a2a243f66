"""``mdmem.toml``: teams, roles, trusted sources, kind contracts, embedder, view budget."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .model.kinds import Contracts
from .errors import BadInput
from .model.layout import check_name

CONFIG_NAME = "mdmem.toml"

# Closed by default: only people and mdmem's own jobs are trusted writers.
DEFAULT_TRUSTED = ("user", "human:*", "system:*")


@dataclass
class EmbedderConfig:
    backend: str = "minilm"  # minilm | ollama | openai | none
    url: str | None = None
    model: str | None = None
    timeout: float = 30.0
    batch_size: int = 32
    api_key_env: str = "OPENAI_API_KEY"


@dataclass
class Config:
    teams: dict[str, frozenset[str]] = field(default_factory=dict)
    erasers: frozenset[str] = frozenset()
    trusted_sources: tuple[str, ...] = DEFAULT_TRUSTED
    contracts: Contracts = field(default_factory=Contracts)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    view_max_lines: int = 200
    view_max_bytes: int = 25_000
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    score_floor: float | None = None

    @classmethod
    def load(cls, root: Path) -> "Config":
        path = root / CONFIG_NAME
        if not path.exists():
            raise BadInput(f"{path}: missing; is this a memory repo? (mdmem init PATH makes one)")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"{path}: does not parse as TOML: {exc}") from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: dict, *, where: str = CONFIG_NAME) -> "Config":
        teams = {}
        for team, members in (data.get("teams") or {}).items():
            check_name(team, f"{where}: teams")
            if not isinstance(members, list):
                raise BadInput(f"{where}: teams.{team}: must be a list of user names")
            teams[team] = frozenset(check_name(m, f"{where}: teams.{team}") for m in members)
        roles = data.get("roles") or {}
        erasers = frozenset(check_name(u, f"{where}: roles.erasers") for u in roles.get("erasers", []))
        trust = data.get("trust") or {}
        trusted = tuple(trust.get("sources", DEFAULT_TRUSTED))
        emb = data.get("embedder") or {}
        backend = emb.get("backend", "minilm")
        if backend not in ("minilm", "ollama", "openai", "none"):
            raise BadInput(f"{where}: embedder.backend: {backend!r}; use minilm, ollama, openai or none")
        embedder = EmbedderConfig(
            backend=backend, url=emb.get("url"), model=emb.get("model"),
            timeout=float(emb.get("timeout", 30.0)), batch_size=int(emb.get("batch_size", 32)),
            api_key_env=emb.get("api_key_env", "OPENAI_API_KEY"))
        views = data.get("views") or {}
        people = data.get("people") or {}
        aliases = {user: tuple(v.get("aliases", [])) for user, v in people.items() if isinstance(v, dict)}
        recall = data.get("recall") or {}
        return cls(teams=teams, erasers=erasers, trusted_sources=trusted,
                   contracts=Contracts.from_config(data.get("kinds")), embedder=embedder,
                   view_max_lines=int(views.get("max_lines", 200)),
                   view_max_bytes=int(views.get("max_bytes", 25_000)), aliases=aliases,
                   score_floor=recall.get("score_floor"))


def _toml_list(names: list[str]) -> str:
    """Names are validated (letters, digits, . _ -), so plain double quotes are safe."""
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


def render_config(teams: dict[str, list[str]], erasers: list[str] | None = None) -> str:
    """The text of a fresh ``mdmem.toml``, from the template with the teams filled in."""
    from .template import read_template

    lines = []
    for team, members in sorted(teams.items()):
        check_name(team, "--team")
        for m in members:
            check_name(m, f"--team {team}")
        lines.append(f"{team} = {_toml_list(members)}")
    for user in erasers or []:
        check_name(user, "--eraser")
    return (read_template("mdmem.toml")
            .replace("{{teams}}", "\n".join(lines) or "# payments = [\"alice\", \"bob\"]")
            .replace("{{erasers}}", _toml_list(erasers or [])))
