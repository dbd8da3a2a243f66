"""``mdmem.toml``: teams, roles, people, trust, review, kind contracts, embedder, view budget;
and the user's own configuration (:class:`UserConfig`), which the repo never overrides."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import datetime as _dt

from .model.clock import parse_duration
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



# mdmem's own commits carry <user>@mdmem.invalid as the author's e-mail when [people] gives none.
IMPLICIT_EMAIL_DOMAIN = "mdmem.invalid"


@dataclass(frozen=True)
class TrustConfig:
    """``[trust]``: which sources write without review, which kinds an agent writes directly,
    and whether commits must be signed (checked against the repo's allowed-signers file)."""

    sources: tuple[str, ...] = DEFAULT_TRUSTED
    agent_kinds: frozenset[str] | None = None  # None: the kinds whose contract says agent_may_write
    require_signed: bool = False
    allowed_signers: str = "allowed_signers"
    agent_max_ttl: _dt.timedelta | None = None  # None: an agent may set at most its kind's default_ttl
    # The kinds an agent writes into a team scope without review: none by default (its note
    # would reach every teammate's startup view unreviewed).
    agent_team_kinds: frozenset[str] = frozenset()


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
    trust: TrustConfig = field(default_factory=TrustConfig)
    self_approve: bool = False  # [review] self_approve: single-user repos may approve their own writes
    contracts: Contracts = field(default_factory=Contracts)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    view_max_lines: int = 200
    view_max_bytes: int = 25_000
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    score_floor: float | None = None
    people: dict[str, Person] = field(default_factory=dict)
    fusion: str = "linear"  # how recall fuses BM25F and cosine (see search/recall.py)
    # [scope] root: a scope repository (a workspace's mount) holds this one root and no other.
    scope_root: str | None = None

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

    def committer(self, email: str | None) -> str | None:
        """The user a commit's author e-mail belongs to: a ``[people]`` address, or the
        ``<user>@mdmem.invalid`` mdmem writes for a user without one. Without signed commits an
        e-mail is only a claim; ``[trust] require_signed`` makes it a proof."""
        if not email or not email.strip():
            return None
        user = self.user_for_email(email)
        if user is not None:
            return user
        local, _, domain = email.strip().lower().rpartition("@")
        if domain != IMPLICIT_EMAIL_DOMAIN or not local:
            return None
        try:
            user = check_name(local, "e-mail")
        except BadInput:
            return None
        # A user whose [people] entry names addresses is not also anyone at mdmem.invalid.
        person = self.people.get(user)
        if person is not None and (person.email or person.emails):
            return None
        return user

    def email_of(self, user: str) -> str:
        return self.identity(user)[1]

    @classmethod
    def load(cls, root: Path) -> "Config":
        path = root / CONFIG_NAME
        if not path.exists():
            raise BadInput(f"{path}: missing; is this a memory repo? (mdmem init PATH makes one)")
        return cls.parse(path.read_bytes(), where=str(path))

    @classmethod
    def parse(cls, data: bytes, *, where: str = CONFIG_NAME) -> "Config":
        """A config from the bytes of an ``mdmem.toml`` (the work tree's, or one committed)."""
        try:
            parsed = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{where}: does not parse as TOML: {exc}") from None
        return cls.from_dict(parsed, where=where)

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
        trust = _trust(data.get("trust") or {}, where)
        emb = data.get("embedder") or {}
        backend = check_backend(emb.get("backend", "minilm"), where=f"{where}: embedder.backend")
        embedder = EmbedderConfig(
            backend=backend, url=emb.get("url"), model=emb.get("model"),
            timeout=float(emb.get("timeout", 30.0)), batch_size=int(emb.get("batch_size", 32)),
            api_key_env=emb.get("api_key_env", "OPENAI_API_KEY"))
        views = data.get("views") or {}
        people = _people(data.get("people") or {}, where)
        aliases = {user: p.aliases for user, p in people.items()}
        review = data.get("review") or {}
        self_approve = review.get("self_approve", False)
        if not isinstance(self_approve, bool):
            raise BadInput(f"{where}: review.self_approve: must be true or false")
        recall = data.get("recall") or {}
        notes = data.get("notes") or {}
        max_bytes = notes.get("max_bytes", DEFAULT_MAX_BYTES)
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or not 1024 <= max_bytes <= 64 << 20:
            raise BadInput(f"{where}: notes.max_bytes: {max_bytes!r}; give a whole number of bytes "
                           "between 1024 and 67108864 (default 262144)")
        contracts = Contracts.from_config(data.get("kinds"))
        for name, kinds in (("agent_kinds", trust.agent_kinds), ("agent_team_kinds", trust.agent_team_kinds)):
            for kind in sorted(kinds or ()):
                if kind not in contracts.kinds:
                    raise BadInput(f"{where}: trust.{name}: unknown kind {kind!r}; known: "
                                   f"{', '.join(contracts.kinds)}")
        scope_root = _scope_root(data.get("scope") or {}, where)
        return cls(teams=teams, erasers=erasers, trust=trust, self_approve=self_approve, scope_root=scope_root,
                   contracts=contracts, embedder=embedder,
                   view_max_lines=int(views.get("max_lines", 200)),
                   view_max_bytes=int(views.get("max_bytes", 25_000)), aliases=aliases,
                   score_floor=recall.get("score_floor"), people=people,
                   note_max_bytes=max_bytes,
                   fusion=check_fusion(recall.get("fusion", "linear"), where=f"{where}: recall.fusion"))


def _scope_root(section: dict, where: str) -> str | None:
    """``[scope] root = "team/<team>"`` or ``"private/<user>"``: the one root a scope repository holds."""
    root = section.get("root") if isinstance(section, dict) else None
    if root is None:
        return None
    parts = root.split("/") if isinstance(root, str) else []
    if len(parts) != 2 or parts[0] not in ("team", "private"):
        raise BadInput(f"{where}: scope.root: {root!r}; give the one root this repository holds, "
                       "like \"team/payments\" or \"private/alice\"")
    check_name(parts[1], f"{where}: scope.root")
    return root


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


def _trust(section: dict, where: str) -> TrustConfig:
    sources = section.get("sources", DEFAULT_TRUSTED)
    if not isinstance(sources, (list, tuple)) or not all(isinstance(x, str) and x for x in sources):
        raise BadInput(f"{where}: trust.sources: must be a list of source patterns (like \"user\", \"human:*\")")
    agents = [x for x in sources if x == "agent" or x.startswith("agent")]
    if agents:
        # The agent's channel is judged by kind (agent_kinds), never by a source pattern.
        raise BadInput(f"{where}: trust.sources: {agents[0]!r}; agents are trusted per kind with "
                       "trust.agent_kinds = [...], not by source")
    kinds = section.get("agent_kinds")
    team_kinds = section.get("agent_team_kinds", [])
    for name, value in (("agent_kinds", kinds), ("agent_team_kinds", team_kinds)):
        if value is not None and (not isinstance(value, list) or not all(isinstance(k, str) for k in value)):
            raise BadInput(f"{where}: trust.{name}: must be a list of kinds (like [\"episode\", \"working\"])")
    signed = section.get("require_signed", False)
    if not isinstance(signed, bool):
        raise BadInput(f"{where}: trust.require_signed: must be true or false")
    signers = section.get("allowed_signers", "allowed_signers")
    if not isinstance(signers, str) or not signers or signers.startswith("/") or ".." in signers.split("/"):
        raise BadInput(f"{where}: trust.allowed_signers: a path inside the repo, like \"allowed_signers\"")
    max_ttl = section.get("agent_max_ttl")
    if max_ttl is not None:
        max_ttl = parse_duration(max_ttl, field=f"{where}: trust.agent_max_ttl")
    return TrustConfig(tuple(sources), frozenset(kinds) if kinds is not None else None, signed, signers, max_ttl,
                       frozenset(team_kinds or ()))


@dataclass(frozen=True)
class UserConfig:
    """The acting person's own configuration (a file in their home, read by the CLI/MCP layer and
    passed in): where note text may be sent, which secret it may carry, how commits are signed.

    A committed ``mdmem.toml`` chooses the embedder kind and model; a URL or secret name it
    names is used only when ``allow_repo_urls`` lists that URL."""

    embedder_url: str | None = None
    api_key_env: str | None = None
    allow_repo_urls: tuple[str, ...] = ()
    signing_key: str | None = None
    agent_label: str | None = None
    secret: Callable[[str], str | None] = field(default=lambda name: None, repr=False, compare=False)
    where: str = "your mdmem config"

    @classmethod
    def from_dict(cls, data: dict, *, where: str, secret: Callable[[str], str | None] | None = None) -> "UserConfig":
        emb = data.get("embedder") or {}
        allow = emb.get("allow_repo_urls", [])
        if not isinstance(allow, list) or not all(isinstance(u, str) for u in allow):
            raise BadInput(f"{where}: embedder.allow_repo_urls: must be a list of URLs")
        for name in ("url", "api_key_env"):
            if name in emb and (not isinstance(emb[name], str) or not emb[name]):
                raise BadInput(f"{where}: embedder.{name}: must be a non-empty string")
        signing = data.get("signing") or {}
        agent = data.get("agent") or {}
        label = agent.get("label")
        if label is not None:
            check_name(label, f"{where}: agent.label")
        return cls(embedder_url=emb.get("url"), api_key_env=emb.get("api_key_env"),
                   allow_repo_urls=tuple(u.rstrip("/") for u in allow), signing_key=signing.get("key"),
                   agent_label=label, secret=secret or (lambda name: None), where=where)

    @classmethod
    def load(cls, path: Path | None, *, secret: Callable[[str], str | None] | None = None) -> "UserConfig":
        if path is None or not Path(path).is_file():
            return cls(secret=secret or (lambda name: None), where=str(path) if path else "your mdmem config")
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: does not parse as TOML: {exc}") from None
        return cls.from_dict(data, where=str(path), secret=secret)

    def embedder(self, repo: EmbedderConfig) -> EmbedderConfig:
        """The embedder to use: kind and model from the repo, endpoint and secret from this user."""
        if self.embedder_url:
            url, key_env = self.embedder_url, self.api_key_env or "OPENAI_API_KEY"
        elif repo.url and repo.url.rstrip("/") in self.allow_repo_urls:
            url, key_env = repo.url, repo.api_key_env
        elif repo.url and repo.backend in ("ollama", "openai"):
            raise BadInput(f"{CONFIG_NAME}: embedder.url: {repo.url!r} is chosen by the repo, and note text is "
                           f"sent only where you allow; set [embedder] url in {self.where}, or list this URL "
                           "there in [embedder] allow_repo_urls")
        else:
            url, key_env = None, self.api_key_env or "OPENAI_API_KEY"
        key = self.secret(key_env) if repo.backend == "openai" else None
        return replace(repo, url=url, api_key_env=key_env, api_key=key or None)


def _toml_list(names: list[str]) -> str:
    """Names are validated (letters, digits, . _ -), so plain double quotes are safe."""
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


def render_config(teams: dict[str, list[str]], erasers: list[str] | None = None, *,
                  people: list[str] | None = None, emails: dict[str, list[str]] | None = None,
                  scope_root: str | None = None) -> str:
    """The text of a fresh ``mdmem.toml``, from the template with the teams filled in.
    ``people`` (the creator first) get a ``[people.<user>]`` table unless a team or role names
    them already; the creator only when the teams or roles declare anyone: a repo that declares
    users accepts only those (policy/access.py), and whoever made it is one."""
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
            .replace("{{erasers}}", _toml_list(erasers or []))
            + _people_tables(people or [], teams, erasers or [], emails or {}, owner=_private_owner(scope_root))
            + (_scope_table(scope_root) if scope_root else ""))


def _private_owner(scope_root: str | None) -> str | None:
    return scope_root.split("/")[1] if scope_root and scope_root.startswith("private/") else None


def _scope_table(root: str) -> str:
    _scope_root({"root": root}, "scope root")
    return ("\n[scope]\n# This repository holds one scope root; a workspace mounts it at that path "
            "(mdmem workspace add).\n" f'root = "{root}"\n')


def _people_tables(people: list[str], teams: dict[str, list[str]], erasers: list[str],
                   emails: dict[str, list[str]], *, owner: str | None = None) -> str:
    """``emails``: a person's own git addresses (the founder's, from their git config), so a
    commit they make by hand with git is theirs, not an unknown writer's. ``owner``: a private
    scope repository's owner, always declared (the one reader there is)."""
    declared = set(erasers).union(*teams.values()) if teams or erasers else set()
    creator, others = (people[0], people[1:]) if people else (None, [])
    # A repo that declares nobody takes any name (a fresh single-user repo): its founder's
    # address is not recorded either, which would declare them and only them.
    wanted = ([owner] if owner else []) + ([creator] if creator and (declared or others) else []) + list(others)
    out = []
    for user in dict.fromkeys(wanted):
        check_name(user, "people")
        if emails.get(user):
            out.append(f"\n[people.{user}]\nemails = {_toml_list(emails[user])}  # {user}'s own git commits\n")
        elif user not in declared:
            out.append(f"\n[people.{user}]\n# emails = [...] maps {user}'s own git commits to them\n")
    return "".join(out)
