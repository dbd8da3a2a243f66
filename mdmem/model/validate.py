"""A note checked against its path and its kind's contract (what `mdmem check` runs)."""
from __future__ import annotations

from .kinds import Contracts
from ..errors import BadInput, NoteInvalid
from .layout import check_key, check_subject, parse_path
from .note import Note, parse_note


def validate_note(path: str, data: str | bytes, contracts: Contracts, *, max_bytes: int | None = None) -> Note:
    note = parse_note(path, data, max_bytes=max_bytes)
    try:
        contract = contracts.resolve(note.kind)
    except BadInput as exc:
        raise NoteInvalid(path, "kind", str(exc).split(": ", 1)[1]) from None
    if contract.name != note.kind:
        raise NoteInvalid(path, "kind", f"write the canonical kind {contract.name!r}, not the alias {note.kind!r}")
    try:
        check_subject(note.subject)
    except BadInput as exc:
        raise NoteInvalid(path, "subject", str(exc).split(": ", 1)[1]) from None
    if contract.keyed:
        if not note.key:
            raise NoteInvalid(path, "key", f"missing; kind {note.kind} is keyed")
        try:
            check_key(note.key)
        except BadInput as exc:
            raise NoteInvalid(path, "key", str(exc).split(": ", 1)[1]) from None
    try:
        loc = parse_path(path)
    except BadInput as exc:
        raise NoteInvalid(path, "path", str(exc)) from None
    expected = {"scope": loc.scope, "subject": loc.subject, "kind": loc.kind}
    if loc.scope == "team":
        expected["team"] = loc.team
    else:
        expected["owner"] = loc.owner
    if contract.keyed:
        expected["key"] = loc.key
    for name, want in expected.items():
        have = getattr(note, name)
        if have != want:
            raise NoteInvalid(path, name, f"{have!r} does not match the note's path, which says {want!r}")
    if note.valid_until is not None and note.valid_until < note.valid_from:
        raise NoteInvalid(path, "valid_until", "is before valid_from")
    return note
