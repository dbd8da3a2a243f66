"""The note model: frontmatter read/write and schema validation (DESIGN 3)."""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from .clock import format_time, parse_time
from ..errors import BadInput, NoteInvalid


# PyYAML and python-frontmatter are imported on first use: most notes are read by
# _fast_metadata, and a recall from the CLI reads none (they cost ~40-130 ms of its start).
@cache
def _yaml() -> Any:
    import yaml

    for dumper in {yaml.SafeDumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)}:
        dumper.add_representer(_Literal, _literal)
    return yaml


@cache
def _handler() -> Any:
    """python-frontmatter with libyaml's C loader and dumper when PyYAML has them (5x faster)."""
    import frontmatter

    yaml = _yaml()

    class _FastYAML(frontmatter.YAMLHandler):
        def load(self, fm, **kwargs):
            return yaml.load(fm, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

        def export(self, metadata, **kwargs):
            kwargs.setdefault("Dumper", getattr(yaml, "CSafeDumper", yaml.SafeDumper))
            return super().export(metadata, **kwargs)

    return _FastYAML()


def new_id() -> str:
    """A new sortable id (a ULID) for a note, a key's suffix or a review. python-ulid is imported
    here, not at module level: it reads its version through importlib.metadata (csv, zipfile,
    email), ~20-65 ms of every CLI call that never makes an id."""
    from ulid import ULID

    return str(ULID())


# A note is a small file (DESIGN 3): anything bigger is refused on write and reported, unread,
# on read. `[notes] max_bytes` in mdmem.toml overrides it.
DEFAULT_MAX_BYTES = 256 * 1024
# Frontmatter is flat; a few levels leave room for editors' lists of maps. Deeper nesting is
# hostile (the C composer recurses: 999 levels raised RecursionError in every reader).
MAX_YAML_DEPTH = 8


def _check_yaml_shape(fm: str, path: str) -> None:
    """Refuse anchors/aliases and deep nesting from the event stream, before anything is built:
    a 571-byte alias bomb expanded to gigabytes, and the composer recurses per level."""
    yaml = _yaml()
    depth = 0
    for event in yaml.parse(fm, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise NoteInvalid(path, "frontmatter", "YAML anchors and aliases (&name, *name) are not allowed")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise NoteInvalid(path, "frontmatter", f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _load_frontmatter(fm: str, path: str) -> dict:
    yaml = _yaml()
    try:
        _check_yaml_shape(fm, path)
        meta = yaml.load(fm, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        # The mark counts within the frontmatter; the file has the '---' line above it.
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark is not None else ""
        what = exc.problem or exc.context or type(exc).__name__
        raise NoteInvalid(path, "frontmatter", f"YAML does not parse{where}: {what}") from None
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
    if not isinstance(source, str) or not _SOURCE_RE.fullmatch(source):  # fullmatch: "$" allows a final "\n"
        raise BadInput(f"{where}: {source!r} is not a source; use user, agent, agent:<name>, human:<name>, "
                       "tool:<name>, web:<url> or system:<job>")
    return source


def is_person_source(source: str) -> bool:
    """A person wrote it (``user``, ``human:<name>``); anything else (an agent, a tool, the web,
    a job) is shown with its source wherever the note's text is shown."""
    return source == "user" or source.startswith("human:")


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
    # Fields mdmem does not define (tags, aliases, links that editors add): kept in order,
    # written back, shown; never interpreted except ``tags`` (a recall filter).
    extra: dict = field(default_factory=dict, hash=False)
    # The file's text, made once: a write sizes the note and then commits it, and YAML's
    # representer costs ~0.5 ms a note (half of a 10,000-note import's drafting).
    _dumped: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def tags(self) -> list[str]:
        """``tags`` as a list of lowercase strings (Obsidian writes a list or one string)."""
        return normalise_tags(self.extra.get("tags"))

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
        meta.update(self.extra)
        return meta

    def dumps(self) -> str:
        if self._dumped is None:
            fast = _dump_flat(self)
            if fast is not None:
                object.__setattr__(self, "_dumped", fast)
                return fast
            import frontmatter

            post = frontmatter.Post(self.text.strip() + "\n")
            post.metadata.update(self.metadata())  # not as keywords: an editor's field may be named "handler"
            object.__setattr__(self, "_dumped", frontmatter.dumps(post, handler=_handler(), sort_keys=False) + "\n")
        return self._dumped

    def to_dict(self) -> dict:
        meta = self.metadata()
        if "context" in meta:
            meta["context"] = str(meta["context"])
        out = {k: v for k, v in meta.items() if k not in self.extra}
        out["text"] = self.text.strip()
        if self.extra:
            out["extra"] = {k: _jsonable(v) for k, v in self.extra.items()}
        return out


# A scalar written as PyYAML writes it without asking PyYAML, when that is certain: printable
# ASCII, no spaces, starting with a letter, digit or "_", no ":" at the end, none of "#,[]{}'\"".
# PyYAML's emitter writes such a scalar plain if its resolver reads it back as a string, else
# single-quoted (a time, "yes", "0x1F", ".5"); the resolver itself decides which (_yaml_str).
_FLAT_SCALAR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@+=!$%&*()<>;?^|~-]*(?::+[A-Za-z0-9_./@+=!$%&*()<>;?^|~-]+)*")


@cache
def _resolver() -> Any:
    return _yaml().resolver.Resolver()


def _flat_scalar(value: Any) -> str | None:
    if value is None:
        return "null"
    return _flat_str(value) if isinstance(value, str) else None


@lru_cache(maxsize=4096)  # a note's kind, scope, team, owner, source and times repeat across an import
def _flat_str(value: str) -> str | None:
    if len(value) <= 80 and _FLAT_SCALAR.fullmatch(value):
        yaml = _yaml()
        if _resolver().resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str":
            return value
        return f"'{value}'"
    return None


def _dump_flat(note: "Note") -> str | None:
    """The note's file as frontmatter.dumps with PyYAML writes it (tested equal byte for byte),
    for the flat frontmatter of an ordinary note: PyYAML's representer cost ~0.35 ms a note,
    a third of a 10,000-note import's CPU outside the index. None when not certain (a context,
    editor fields, a list, a value outside _FLAT_SCALAR): the caller uses PyYAML."""
    text = note.text.strip()
    if note.context or note.extra or not text:
        return None
    lines = []
    for name, value in note.metadata().items():
        if value == [] and name == "derived_from":
            lines.append(f"{name}: []")
            continue
        out = _flat_scalar(value)
        if out is None:
            return None
        lines.append(f"{name}: {out}")
    return "---\n" + "\n".join(lines) + "\n---\n\n" + text + "\n"


class _Literal(str):
    """A string YAML writes as a literal block."""


def _literal(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style="|")



def lf_lines(text: str) -> str:
    """``text`` with every line ending LF: a note is written with LF only. Text pasted from
    Windows or read from a CRLF file kept its CRs in the note, shown as ``\\x0d`` on every line
    and in every diff; a lone CR (old Mac) is a line break too."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


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


def _jsonable(value):
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def normalise_tags(value) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return sorted({str(t).strip().lstrip("#").lower() for t in items if isinstance(t, str) and t.strip()})


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
    """Parse and validate one note; every problem names the path and the field. A note with
    several problems raises NoteInvalid carrying all of them (``problems``)."""
    meta, text, problems = read_fields(path, data, max_bytes=max_bytes)
    if problems:
        raise NoteInvalid(path, *problems[0], problems=problems)
    return build_note(path, meta, text)


# An unfinished git merge left in the file: both ends of a conflict hunk at line starts.
_CONFLICT_MARKERS = re.compile(r"^<<<<<<< .*?^>>>>>>> ", re.M | re.S)


def read_fields(path: str, data: str | bytes, *, max_bytes: int | None = None
                ) -> tuple[dict, str, list[tuple[str, str]]]:
    """The frontmatter and body of a note with every schema problem found, as (field, reason).
    A file that cannot be read as a note at all (size, encoding, no frontmatter, YAML that does
    not parse) raises NoteInvalid: there are no fields to check."""
    check_size(path, len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data), max_bytes)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteInvalid(path, "file", "not UTF-8 text") from None
    if "<<<<<<<" in data and _CONFLICT_MARKERS.search(data):
        raise NoteInvalid(path, "file", "holds git conflict markers (<<<<<<< ... >>>>>>>); finish the merge: "
                                        "edit the file, git add it, git commit")
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
    problems: list[tuple[str, str]] = []
    for name in meta:
        if not isinstance(name, str):
            problems.append((str(name), "a field name must be text"))
    for name in REQUIRED:
        if meta.get(name) in (None, ""):
            problems.append((name, "missing" if name != "valid_from"
                             else "missing; an ISO-8601 time like 2026-10-15T09:00:00Z"))
    for name in ("id", "kind", "subject", "scope", "owner", "source", "team"):
        if meta.get(name) not in (None, "") and not isinstance(meta[name], str):
            problems.append((name, f"must be a string, got {type(meta[name]).__name__}"))
    scope = meta.get("scope")
    if isinstance(scope, str) and scope and scope not in ("team", "private"):
        problems.append(("scope", f"{scope!r}: must be team or private"))
    if scope == "team" and not meta.get("team"):
        problems.append(("team", "missing; a team-scoped note names its team"))
    if isinstance(meta.get("source"), str) and meta["source"]:
        try:
            check_source(meta["source"])
        except BadInput as exc:
            problems.append(("source", str(exc).split(": ", 1)[1]))
    derived = meta.get("derived_from") or []
    if not isinstance(derived, list) or not all(isinstance(d, str) for d in derived):
        problems.append(("derived_from", "must be a list of note ids"))
    key = meta.get("key")
    if key is not None and not isinstance(key, (str, int, float)) or isinstance(key, bool):
        problems.append(("key", f"must be a string, got {type(key).__name__}"))
    tags = meta.get("tags")
    if tags is not None and not (isinstance(tags, str) or (isinstance(tags, list)
                                                           and all(isinstance(t, str) for t in tags))):
        problems.append(("tags", "must be a list of words (tags: [billing, slo]) or one word"))
    for name in ("valid_from", "valid_until", "expires_at"):
        value = meta.get(name)
        if value not in (None, ""):
            try:
                parse_time(value, field=name)
            except BadInput:
                problems.append((name, f"{value!r} is not an ISO-8601 time"))
    text = content.strip()
    if not text:
        problems.append(("body", "empty; a note needs text below the frontmatter"))
    try:
        clean_context(meta.get("context"))
    except BadInput as exc:
        problems.append(("context", str(exc).split(": ", 1)[1]))
    return meta, text, problems


def build_note(path: str, meta: dict, text: str) -> Note:
    """A Note from fields read_fields found no problem with."""
    key = meta.get("key")
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        key = str(key)  # key: 2026 is a fine key that YAML reads as a number
    return Note(
        id=meta["id"], kind=meta["kind"], subject=meta["subject"], scope=meta["scope"],
        owner=meta["owner"], source=meta["source"],
        valid_from=_time_field(meta, "valid_from", path, required=True),
        valid_until=_time_field(meta, "valid_until", path, required=False),
        expires_at=_time_field(meta, "expires_at", path, required=False),
        text=text, key=key, team=meta.get("team"), derived_from=tuple(meta.get("derived_from") or ()),
        context=clean_context(meta.get("context")),
        extra={k: v for k, v in meta.items() if k not in FIELDS},
    )
