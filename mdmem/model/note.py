"""The note model: frontmatter read/write and schema validation (DESIGN 3)."""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field, replace

import frontmatter
import yaml

from .clock import format_time, parse_time
from ..errors import BadInput, NoteInvalid

class _FastYAML(frontmatter.YAMLHandler):
    """python-frontmatter with libyaml's C loader and dumper when PyYAML has them (5x faster)."""

    def load(self, fm, **kwargs):
        return yaml.load(fm, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    def export(self, metadata, **kwargs):
        kwargs.setdefault("Dumper", getattr(yaml, "CSafeDumper", yaml.SafeDumper))
        return super().export(metadata, **kwargs)


_HANDLER = _FastYAML()

# A note is a small file (DESIGN 3): anything bigger is refused on write and reported, unread,
# on read. `[notes] max_bytes` in mdmem.toml overrides it.
DEFAULT_MAX_BYTES = 256 * 1024
# Frontmatter is flat; a few levels leave room for editors' lists of maps. Deeper nesting is
# hostile (the C composer recurses: 999 levels raised RecursionError in every reader).
MAX_YAML_DEPTH = 8
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_yaml_shape(fm: str, path: str) -> None:
    """Refuse anchors/aliases and deep nesting from the event stream, before anything is built:
    a 571-byte alias bomb expanded to gigabytes, and the composer recurses per level."""
    depth = 0
    for event in yaml.parse(fm, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise NoteInvalid(path, "frontmatter", "YAML anchors and aliases (&name, *name) are not allowed")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise NoteInvalid(path, "frontmatter", f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _load_frontmatter(fm: str, path: str) -> dict:
    try:
        _check_yaml_shape(fm, path)
        meta = yaml.load(fm, Loader=_LOADER)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NoteInvalid(path, "frontmatter", f"YAML does not parse: {reason}") from None
    if not isinstance(meta, dict) or not meta:
        raise NoteInvalid(path, "frontmatter", "empty or not a mapping")
    return meta


def check_size(path: str, size: int, max_bytes: int | None) -> None:
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if size > limit:
        raise NoteInvalid(path, "file", f"{size} bytes; a note is at most {limit} bytes "
                          "([notes] max_bytes in mdmem.toml)")

_FM_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(?: (.*))?$")
# Plain scalars YAML would read as something other than a string: bail out to YAML for them.
_NOT_PLAIN_STR = re.compile(
    r"^(?:[-+]?[0-9][0-9_.:eE+-]*|[-+]?\.(?:inf|nan)|true|false|yes|no|on|off|y|n|null|~|"
    r"\d{4}-\d\d?-\d\d?.*)$", re.IGNORECASE)
_SPECIAL_START = set("&*!|>%@`{[#'\"-?:,]} ")


def _plain(value: str):
    """A plain YAML scalar as a string, or raise ValueError if YAML might read it otherwise."""
    if not value or value[0] in _SPECIAL_START or value != value.strip() or " #" in value or ": " in value \
            or _NOT_PLAIN_STR.match(value):
        raise ValueError(value)
    return value


def _fast_metadata(fm: str) -> dict | None:
    """The flat frontmatter mdmem writes, read without a YAML parser (about ten times faster).
    Anything it is not sure of returns None, and the caller uses YAML."""
    meta: dict = {}
    open_list: str | None = None  # a key with no value: a block list follows, or it is null
    open_block: str | None = None  # a key whose value is a literal block ("|-", as Note writes context)
    try:
        for line in fm.splitlines():
            if open_block is not None:
                if line.startswith("  ") and not line.startswith("   ") and line.strip():
                    meta[open_block] = f"{meta[open_block]}\n{line[2:]}" if meta[open_block] else line[2:]
                    continue
                if not line.strip():
                    return None  # a blank line inside a block: leave it to YAML
                open_block = None
            if not line.strip():
                continue
            if line.startswith("- ") and open_list is not None:
                meta[open_list] = (meta[open_list] or []) + [_plain(line[2:])]
                continue
            m = _FM_LINE.match(line)
            if not m or m.group(1) in meta:
                return None
            key, value = m.group(1), (m.group(2) or "")
            open_list = key if value == "" else None
            if value == "|-":
                meta[key], open_block = "", key
            elif value in ("", "null", "~"):
                meta[key] = None
            elif value == "[]":
                meta[key] = []
            elif value.startswith("'") and value.endswith("'") and len(value) >= 2:
                inner = value[1:-1]
                if "'" in inner.replace("''", ""):
                    return None
                meta[key] = inner.replace("''", "'")
            else:
                meta[key] = _plain(value)
    except ValueError:
        return None
    return meta


def _split_frontmatter(data: str) -> tuple[str, str] | None:
    lines = data.split("\n")
    if lines[0].rstrip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:])
    return None


FIELDS = ("id", "kind", "subject", "key", "scope", "team", "owner", "source", "valid_from",
          "valid_until", "expires_at", "derived_from", "context")
# What was around a note when it was written (for a conversation turn: the session date, the
# speaker, the turn before). Indexed and embedded with the text, never shown as the note.
MAX_CONTEXT = 2000
REQUIRED = ("id", "kind", "subject", "scope", "owner", "source", "valid_from")
_SOURCE_RE = re.compile(r"^(user|agent|agent:[^\s]+|human:[^\s]+|tool:[^\s]+|web:[^\s]+|system:[^\s]+)$")


def check_source(source: str, *, where: str = "source") -> str:
    if not isinstance(source, str) or not _SOURCE_RE.match(source):
        raise BadInput(f"{where}: {source!r} is not a source; use user, agent, agent:<name>, human:<name>, "
                       "tool:<name>, web:<url> or system:<job>")
    return source


@dataclass(frozen=True)
class Note:
    id: str
    kind: str
    subject: str
    scope: str
    owner: str
    source: str
    valid_from: _dt.datetime
    text: str
    key: str | None = None
    team: str | None = None
    valid_until: _dt.datetime | None = None
    expires_at: _dt.datetime | None = None
    derived_from: tuple[str, ...] = field(default_factory=tuple)
    context: str | None = None

    def __post_init__(self):
        if self.context is not None:
            object.__setattr__(self, "context", clean_context(self.context))

    def is_live(self, now: _dt.datetime) -> bool:
        """Live at ``now``: started, not ended, not expired (checked at read time)."""
        if self.valid_from > now:
            return False
        if self.valid_until is not None and self.valid_until <= now:
            return False
        if self.expires_at is not None and self.expires_at <= now:
            return False
        return True

    def first_line(self) -> str:
        return self.text.strip().splitlines()[0] if self.text.strip() else ""

    def evolve(self, **changes) -> "Note":
        return replace(self, **changes)

    def metadata(self) -> dict:
        meta = {
            "id": self.id, "kind": self.kind, "subject": self.subject, "key": self.key,
            "scope": self.scope, "team": self.team, "owner": self.owner, "source": self.source,
            "valid_from": format_time(self.valid_from), "valid_until": format_time(self.valid_until),
            "expires_at": format_time(self.expires_at), "derived_from": list(self.derived_from),
        }
        if self.scope != "team":
            meta.pop("team")
        if self.context:
            # A literal block keeps the text verbatim in the file (no quoting, no folding), so
            # erasure finds a quoted line in it as it finds one in a body.
            meta["context"] = _Literal(self.context)
        return meta

    def dumps(self) -> str:
        post = frontmatter.Post(self.text.strip() + "\n", **self.metadata())
        return frontmatter.dumps(post, handler=_HANDLER, sort_keys=False) + "\n"

    def to_dict(self) -> dict:
        meta = self.metadata()
        if "context" in meta:
            meta["context"] = str(meta["context"])
        return {**meta, "text": self.text.strip()}


class _Literal(str):
    """A string YAML writes as a literal block."""


def _literal(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style="|")


for _dumper in {yaml.SafeDumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)}:
    _dumper.add_representer(_Literal, _literal)


def clean_context(value) -> str | None:
    """One line of printable text, bounded: whitespace runs become one space."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"context: must be text, got {type(value).__name__}")
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in value).split())
    if len(text) > MAX_CONTEXT:
        raise BadInput(f"context: {len(text)} characters; at most {MAX_CONTEXT}")
    return text or None


def _time_field(meta: dict, name: str, path: str, *, required: bool) -> _dt.datetime | None:
    value = meta.get(name)
    if value in (None, ""):
        if required:
            raise NoteInvalid(path, name, "missing; an ISO-8601 time like 2026-10-15T09:00:00Z")
        return None
    try:
        return parse_time(value, field=name)
    except BadInput:
        raise NoteInvalid(path, name, f"{value!r} is not an ISO-8601 time") from None


def parse_note(path: str, data: str | bytes, *, max_bytes: int | None = None) -> Note:
    """Parse and validate one note; every problem names the path and the field."""
    check_size(path, len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data), max_bytes)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteInvalid(path, "file", "not UTF-8 text") from None
    if not data.startswith("---"):
        raise NoteInvalid(path, "frontmatter", "missing; a note starts with a '---' YAML block")
    split = _split_frontmatter(data)
    if split is None:
        raise NoteInvalid(path, "frontmatter", "not closed; end the YAML block with a '---' line")
    fm, content = split
    meta = _fast_metadata(fm)
    if meta is None:
        meta = _load_frontmatter(fm, path)
    if not meta:
        raise NoteInvalid(path, "frontmatter", "empty or not a mapping")
    unknown = sorted(set(meta) - set(FIELDS))
    if unknown:
        raise NoteInvalid(path, unknown[0], f"unknown field; known fields: {', '.join(FIELDS)}")
    for name in REQUIRED:
        if meta.get(name) in (None, ""):
            raise NoteInvalid(path, name, "missing")
    for name in ("id", "kind", "subject", "scope", "owner", "source"):
        if not isinstance(meta[name], str):
            raise NoteInvalid(path, name, f"must be a string, got {type(meta[name]).__name__}")
    if meta.get("team") is not None and not isinstance(meta["team"], str):
        raise NoteInvalid(path, "team", f"must be a string, got {type(meta['team']).__name__}")
    if meta["scope"] not in ("team", "private"):
        raise NoteInvalid(path, "scope", f"{meta['scope']!r}: must be team or private")
    if meta["scope"] == "team" and not meta.get("team"):
        raise NoteInvalid(path, "team", "missing; a team-scoped note names its team")
    try:
        check_source(meta["source"])
    except BadInput as exc:
        raise NoteInvalid(path, "source", str(exc).split(": ", 1)[1]) from None
    derived = meta.get("derived_from") or []
    if not isinstance(derived, list) or not all(isinstance(d, str) for d in derived):
        raise NoteInvalid(path, "derived_from", "must be a list of note ids")
    key = meta.get("key")
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        key = str(key)  # key: 2026 is a fine key that YAML reads as a number
    if key is not None and not isinstance(key, str):
        raise NoteInvalid(path, "key", f"must be a string, got {type(key).__name__}")
    text = content.strip()
    if not text:
        raise NoteInvalid(path, "body", "empty; a note needs text below the frontmatter")
    try:
        context = clean_context(meta.get("context"))
    except BadInput as exc:
        raise NoteInvalid(path, "context", str(exc).split(": ", 1)[1]) from None
    return Note(
        id=meta["id"], kind=meta["kind"], subject=meta["subject"], scope=meta["scope"],
        owner=meta["owner"], source=meta["source"],
        valid_from=_time_field(meta, "valid_from", path, required=True),
        valid_until=_time_field(meta, "valid_until", path, required=False),
        expires_at=_time_field(meta, "expires_at", path, required=False),
        text=text, key=key, team=meta.get("team"), derived_from=tuple(derived), context=context,
    )
