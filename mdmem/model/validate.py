"""A note checked against its path and its kind's contract (what `mdmem check` runs)."""
from __future__ import annotations

from .kinds import Contracts
from ..errors import BadInput, NoteInvalid
from .layout import check_key, check_subject, parse_path
from .clock import parse_time
from .note import Note, build_note, read_fields


def validate_note(path: str, data: str | bytes, contracts: Contracts, *, max_bytes: int | None = None) -> Note:
    """The note at ``path``, checked against its path and its kind's contract. Raises
    NoteInvalid with every problem found (``problems``), the first as field/reason."""
    meta, text, problems = read_fields(path, data, max_bytes=max_bytes)
    problems += _contract_problems(path, meta, contracts)
    if problems:
        raise NoteInvalid(path, *problems[0], problems=problems)
    return build_note(path, meta, text)


def note_problems(path: str, data: str | bytes, contracts: Contracts) -> list[tuple[str, str]]:
    """Every problem of one note as (field, reason); empty when it is valid."""
    try:
        validate_note(path, data, contracts)
    except NoteInvalid as exc:
        return exc.problems
    return []


def _text(meta: dict, name: str) -> str | None:
    value = meta.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and name == "key":
        return str(value)
    return value if isinstance(value, str) and value else None


def _contract_problems(path: str, meta: dict, contracts: Contracts) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    kind, subject, key = _text(meta, "kind"), _text(meta, "subject"), _text(meta, "key")
    contract = None
    if kind:
        try:
            contract = contracts.resolve(kind)
        except BadInput as exc:
            problems.append(("kind", str(exc).split(": ", 1)[1]))
        if contract is not None and contract.name != kind:
            problems.append(("kind", f"write the canonical kind {contract.name!r}, not the alias {kind!r}"))
    if subject:
        try:
            check_subject(subject)
        except BadInput as exc:
            problems.append(("subject", str(exc).split(": ", 1)[1]))
    if contract is not None and contract.keyed:
        if meta.get("key") in (None, ""):
            problems.append(("key", f"missing; kind {contract.name} is keyed"))
        elif key:
            try:
                check_key(key)
            except BadInput as exc:
                problems.append(("key", str(exc).split(": ", 1)[1]))
    try:
        loc = parse_path(path)
    except BadInput as exc:
        return problems + [("path", str(exc))]
    expected = {"scope": loc.scope, "subject": loc.subject, "kind": loc.kind}
    if loc.scope == "team":
        expected["team"] = loc.team
    else:
        expected["owner"] = loc.owner
    if contract is not None and contract.keyed:
        expected["key"] = loc.key
    for name, want in expected.items():
        have = _text(meta, name)
        if have is not None and have != want:
            problems.append((name, f"{have!r} does not match the note's path, which says {want!r}"))
    start, end = meta.get("valid_from"), meta.get("valid_until")
    if start not in (None, "") and end not in (None, ""):
        try:
            if parse_time(end, field="valid_until") < parse_time(start, field="valid_from"):
                problems.append(("valid_until", "is before valid_from"))
        except BadInput:
            pass  # reported by read_fields
    return problems


def check_unicode(value: str, field: str) -> str:
    """A string that UTF-8 can hold: a lone surrogate (from a JSON "\\ud800" or a
    non-UTF-8 command line) would fail at the commit, after the gate."""
    if "\x00" in value:
        # git takes a file with a NUL for binary: diffs and reviews would hide the note's text.
        raise BadInput(f"{field}: holds a NUL character (position {value.index(chr(0))}); send text without it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadInput(f"{field}: not valid Unicode text (a lone surrogate at position {exc.start}); "
                       "send UTF-8") from None
    return value
