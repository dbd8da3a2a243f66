"""Identity <-> path (DESIGN 2). A note's path inside its scope root is its identity.

    team/<team>/<subject as folders>/<kind>/<key>.md
    private/<owner>/<subject as folders>/<kind>/<key>.md
    <root>/<subject as folders>/episode/<YYYY-MM>/<date>-<slug>.md

Everything that turns user input into a path goes through the validators here, so no
subject, key, team or user name can ever name a file outside the repository.
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from ..errors import BadInput

ERASURE_LOG = "audit/erasures.jsonl"  # the erasure receipts (erasure/receipt.py writes, verify reads)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_MAX_PART = 80
_MAX_SUBJECT = 200

SCOPES = ("team", "private")


def _check_part(value: str, what: str, *, max_len: int = _MAX_PART) -> str:
    # The usual case in one regex (a 10,000-note import checks ~130,000 parts); anything
    # else goes through the checks below for the message that names the problem.
    if isinstance(value, str) and len(value) <= max_len and ".." not in value and _NAME_RE.fullmatch(value):
        return value
    if not isinstance(value, str) or not value:
        raise BadInput(f"{what}: must not be empty")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise BadInput(f"{what}: {value!r} contains a control character")
    if "/" in value or "\\" in value:
        raise BadInput(f"{what}: {value!r} must not contain a path separator")
    if value in (".", "..") or ".." in value:
        raise BadInput(f"{what}: {value!r} must not contain '..'")
    if len(value) > max_len:
        raise BadInput(f"{what}: {value!r} is longer than {max_len} characters")
    if not _NAME_RE.match(value):
        raise BadInput(f"{what}: {value!r} may use letters, digits, '.', '_' and '-' only, "
                       "starting with a letter or digit")
    return value


def check_name(value: str, what: str = "name") -> str:
    """A user or team name."""
    return _check_part(value, what, max_len=64)


def check_key(key: str) -> str:
    _check_part(key, "key", max_len=120)
    if key == "MEMORY":  # MEMORY.md in any folder is a view's name: a note there is never read as one
        raise BadInput("key: MEMORY is reserved (MEMORY.md is the name of mdmem's views); choose another key")
    return key


def check_subject(subject: str) -> str:
    """``kind:name[:more]`` such as ``service:billing``; each part a safe folder name."""
    if not isinstance(subject, str) or not subject:
        raise BadInput("subject: must not be empty (like service:billing or user:alice)")
    if len(subject) > _MAX_SUBJECT:
        raise BadInput(f"subject: longer than {_MAX_SUBJECT} characters")
    if ":" not in subject:
        raise BadInput(f"subject: {subject!r} needs a type and a name, like service:billing")
    for part in subject.split(":"):
        _check_part(part, f"subject {subject!r} part")
    return subject


def subject_dir(subject: str) -> str:
    return "/".join(check_subject(subject).split(":"))


def scope_root(scope: str, *, team: str | None = None, owner: str | None = None) -> str:
    if scope == "team":
        if not team:
            raise BadInput("team: a team-scoped note needs --team")
        return f"team/{check_name(team, 'team')}"
    if scope == "private":
        if not owner:
            raise BadInput("owner: a private note needs an owner")
        return f"private/{check_name(owner, 'owner')}"
    raise BadInput(f"scope: {scope!r} is not a scope; use team or private")


def slugify(text: str, *, max_len: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return (slug[:max_len].rstrip("-")) or "note"


def keyed_path(root: str, subject: str, kind: str, key: str) -> str:
    return f"{root}/{subject_dir(subject)}/{kind}/{check_key(key)}.md"


def episode_path(root: str, subject: str, when: _dt.datetime, slug: str) -> str:
    """Episodes shard by month so no folder grows to thousands of files."""
    return f"{root}/{subject_dir(subject)}/episode/{when:%Y-%m}/{when:%Y-%m-%d}-{slug}.md"


def kind_dir(root: str, subject: str, kind: str) -> str:
    return f"{root}/{subject_dir(subject)}/{kind}"


@dataclass(frozen=True)
class NoteLocation:
    """What a note's path says about it; checked against its frontmatter."""

    root: str
    scope: str
    team: str | None
    owner: str | None
    subject: str
    kind: str
    key: str | None  # None for episodes


def is_note_path(path: str) -> bool:
    parts = path.split("/")
    return (len(parts) >= 5 and parts[0] in SCOPES and path.endswith(".md")
            and parts[-1] != "MEMORY.md")


def check_note_path(path: str) -> str:
    """A note path given by a caller, checked as a string before anything touches the disk:
    relative, no empty, '.' or '..' parts, no backslashes or control characters."""
    if not isinstance(path, str) or not path:
        raise BadInput("path: must not be empty")
    parts = path.split("/")
    if (path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts)
            or any(ord(ch) < 32 or ord(ch) == 127 for ch in path)):
        raise BadInput(f"path: {path!r} is not a note path (team/<team>/... or private/<owner>/..., "
                       "without '.', '..' or empty parts)")
    if not is_note_path(path):
        raise BadInput(f"path: {path!r} is not a note path (team/<team>/... or private/<owner>/..., ending in .md)")
    return path


def default_scope(scope: str | None, team: str | None) -> str:
    """The one rule for an omitted scope, in every operation: a team's when a team is named,
    else the acting user's private scope."""
    return scope or ("team" if team else "private")


def root_of(path: str) -> str:
    """The scope root (``team/<team>`` or ``private/<owner>``) a repository path lies in: the
    one place that rule lives (``parse_path`` reads the rest of a note path)."""
    return "/".join(path.split("/", 2)[:2])


def parse_path(path: str) -> NoteLocation:
    """Read scope, subject, kind and key from a repository-relative note path."""
    parts = path.split("/")
    if not is_note_path(path):
        raise BadInput(f"{path}: not a note path (team/<team>/... or private/<owner>/..., ending in .md)")
    scope, name = parts[0], parts[1]
    root = root_of(path)
    if len(parts) >= 6 and parts[-3] == "episode" and re.match(r"^\d{4}-\d{2}$", parts[-2]):
        kind, key, subject_parts = "episode", None, parts[2:-3]
    else:
        kind, key, subject_parts = parts[-2], parts[-1][:-3], parts[2:-2]
    if not subject_parts:
        raise BadInput(f"{path}: no subject folders between the scope root and the kind")
    return NoteLocation(root, scope, name if scope == "team" else None,
                        name if scope == "private" else None, ":".join(subject_parts), kind, key)
