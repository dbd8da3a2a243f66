"""``mdmem.toml``: teams, roles, trusted sources, kind contracts, embedder, view budget."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .model.kinds import Contracts
from .errors import BadInput
from .model.layout import check_name
from .model.note import DEFAULT_MAX_BYTES

CONFIG_NAME = "mdmem.toml"

# Closed by default: only people and mdmem's own jobs are trusted writers.
DEFAULT_TRUSTED = ("user", "human:*", "system:*")


EMBEDDER_BACKENDS = ("minilm", "ollama", "openai", "none")
FUSIONS = ("linear", "rrf")


def check_backend(backend: str, *, where: str) -> str:
    if backend not in EMBEDDER_BACKENDS:
        raise BadInput(f"{where}: {backend!r}; use {', '.join(EMBEDDER_BACKENDS)}")
    return backend


def check_fusion(fusion: str, *, where: str) -> str:
    if fusion not in FUSIONS:
        raise BadInput(f"{where}: {fusion!r}; use {' or '.join(FUSIONS)}")
    return fusion


@dataclass
class EmbedderConfig:
    backend: str = "minilm"  # minilm | ollama | openai | none
    url: str | None = None
    model: str | None = None
    timeout: float = 30.0
    batch_size: int = 32
    api_key_env: str = "OPENAI_API_KEY"  # the CLI/MCP server reads the key from this variable
    api_key: str | None = field(default=None, repr=False)  # ...and puts it here


@dataclass(frozen=True)
class Person:
    """``[people.<user>]``: how a user appears in git. ``name``/``email`` sign mdmem's commits
    for them; ``emails`` are every address their own commits may carry (the first is the
    default when ``email`` is not given); ``aliases`` are other names erasure must rewrite."""

    name: str | None = None
    email: str | None = None
    emails: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


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
    people: dict[str, Person] = field(default_factory=dict)
    fusion: str = "linear"  # how recall fuses BM25F and cosine (see search/recall.py)

    def identity(self, user: str) -> tuple[str, str]:
        """The git author (name, email) mdmem signs a user's commits with: ``[people.<user>]``
        when configured, else the handle at a domain that cannot receive mail."""
        person = self.people.get(user)
        name = (person.name if person else None) or user
        email = (person.email if person else None) or (person.emails[0] if person and person.emails else None)
        return name, email or f"{user}@mdmem.invalid"

    def user_for_email(self, email: str) -> str | None:
        """The user whose ``[people]`` entry lists this address (case-insensitive), if any."""
        wanted = email.strip().lower()
        for user, person in sorted(self.people.items()):
            if wanted in {e.lower() for e in (person.email, *person.emails) if e}:
                return user
        return None
    note_max_bytes: int = DEFAULT_MAX_BYTES

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
        backend = check_backend(emb.get("backend", "minilm"), where=f"{where}: embedder.backend")
        embedder = EmbedderConfig(
            backend=backend, url=emb.get("url"), model=emb.get("model"),
            timeout=float(emb.get("timeout", 30.0)), batch_size=int(emb.get("batch_size", 32)),
            api_key_env=emb.get("api_key_env", "OPENAI_API_KEY"))
        views = data.get("views") or {}
        people = _people(data.get("people") or {}, where)
        aliases = {user: p.aliases for user, p in people.items()}
        recall = data.get("recall") or {}
        notes = data.get("notes") or {}
        max_bytes = notes.get("max_bytes", DEFAULT_MAX_BYTES)
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or not 1024 <= max_bytes <= 64 << 20:
            raise BadInput(f"{where}: notes.max_bytes: {max_bytes!r}; give a whole number of bytes "
                           "between 1024 and 67108864 (default 262144)")
        return cls(teams=teams, erasers=erasers, trusted_sources=trusted,
                   contracts=Contracts.from_config(data.get("kinds")), embedder=embedder,
                   view_max_lines=int(views.get("max_lines", 200)),
                   view_max_bytes=int(views.get("max_bytes", 25_000)), aliases=aliases,
                   score_floor=recall.get("score_floor"), people=people,
                   note_max_bytes=max_bytes,
                   fusion=check_fusion(recall.get("fusion", "linear"), where=f"{where}: recall.fusion"))


def _people(data: dict, where: str) -> dict[str, Person]:
    if not isinstance(data, dict):
        raise BadInput(f"{where}: people: must be a table of [people.<user>] tables")
    out = {}
    for user, v in data.items():
        check_name(user, f"{where}: people")
        if not isinstance(v, dict):
            raise BadInput(f"{where}: people.{user}: must be a table (name, email, emails, aliases)")
        for text_field in ("name", "email"):
            if v.get(text_field) is not None and (not isinstance(v[text_field], str) or "\n" in v[text_field]
                                                  or "<" in v[text_field] or ">" in v[text_field]):
                raise BadInput(f"{where}: people.{user}.{text_field}: one line of text without < or >")
        for list_field in ("emails", "aliases"):
            value = v.get(list_field, [])
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise BadInput(f"{where}: people.{user}.{list_field}: must be a list of strings")
        out[user] = Person(name=v.get("name"), email=v.get("email"), emails=tuple(v.get("emails", [])),
                           aliases=tuple(v.get("aliases", [])))
    return out


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
