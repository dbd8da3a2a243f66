"""Everything a person may read, out, as JSONL that `mdmem import` reads back: one note a line
with the fields an import takes (``text``, ``kind``, ``subject``, ``key``, ``new_key``, ``scope``,
``team``, ``source``, ``valid_from``, ``context``, ``extra``). With history, each note's earlier
versions come first, oldest first, so importing the file replays the supersessions."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..model.clock import format_time

if TYPE_CHECKING:
    from ..model.note import Note
    from ..repo import MemoryRepo


def line_of(note: Note) -> dict[str, Any]:
    out: dict[str, Any] = {"text": note.text, "kind": note.kind, "subject": note.subject}
    if note.key:
        out["key"] = note.key
        # The gate refuses a key beside a subject's other live keys unless the writer says it is
        # a fact of its own (new_key), lest a paraphrase leave the old fact live. Every key
        # exported stood live in its repository as a fact of its own, so the line says so: the
        # second key of a subject was refused on import, even into a fresh repository. (Not the
        # importer counting only keys from before the import: a rerun after a kill would then
        # refuse the keys the killed run did not reach.) Harmless on a key that exists already.
        out["new_key"] = True
    out["scope"] = note.scope
    if note.team:
        out["team"] = note.team
    out["source"] = note.source
    out["valid_from"] = format_time(note.valid_from)
    if note.context:
        out["context"] = note.context
    if note.extra:
        out["extra"] = note.extra
    return out


def export_lines(repo: MemoryRepo, *, as_user: str, history: bool = False, now: Any = None) -> Iterator[str]:
    for stored in repo.notes(as_user=as_user, now=now):
        if history:
            versions = [v for v in reversed(repo.history(as_user=as_user, path=stored.path))
                        if v.note is not None and v.note.valid_until is None]
            for v in versions[:-1]:
                assert v.note is not None
                yield json.dumps(line_of(v.note), ensure_ascii=False)
        yield json.dumps(line_of(stored.note), ensure_ascii=False)
