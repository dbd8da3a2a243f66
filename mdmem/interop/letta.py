"""Letta memory repositories, in and out: markdown files with frontmatter, the core memory
blocks under ``system/`` (``human``, ``persona`` and others), everything else beside them.

In: ``system/human.md`` is the person's profile (``user:<person>``), ``system/persona.md`` how
the agent behaves (a procedure about ``agent:<agent>``), other blocks and files facts about
the agent's world (``agent:<agent>``). The block's frontmatter (``label``, ``description``,
``limit``, ``read_only``...) and its place in the repository (``letta_path``) are kept with
the note, so export writes the same files back.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import BadInput
from .importer import Source, name_part
from .vault import read_foreign_note, safe_rel, walk, write_file

if TYPE_CHECKING:
    from ..repo import MemoryRepo

PATH_FIELD = "letta_path"


def read_letta(folder: str | Path, *, as_user: str, agent: str = "letta", source_name: str = "agent:letta",
               scope: str | None = None, team: str | None = None) -> Source:
    folder = Path(folder)
    src = Source()
    agent_subject = f"agent:{name_part(agent, 'letta')}"
    for full, rel in walk(folder, src):
        try:
            meta, body = read_foreign_note(full, rel)
        except BadInput as exc:
            src.refuse(rel, str(exc))
            continue
        parts = rel[:-3].split("/")
        label = str(meta.get("label") or parts[-1])
        core = parts[0] == "system"
        if core and label == "human":
            kind, subject = "profile", f"user:{as_user}"
        elif core and label == "persona":
            kind, subject = "procedure", agent_subject
        else:
            kind, subject = "fact", agent_subject
        key = name_part(".".join(parts), "block", 100)
        extra = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in meta.items() if v is not None}
        extra[PATH_FIELD] = rel
        src.items.append({"text": body.strip(), "kind": kind, "subject": subject, "key": key,
                          "source": source_name, "new_key": True, "extra": extra, "line": rel})
    return src.placed(scope, team)


def export_letta(repo: MemoryRepo, folder: str | Path, *, as_user: str, root: str | None = None,
                 now: Any = None) -> list[str]:
    """The person's live notes as a Letta memory repository: the notes that came from one go
    back to their files; others go to ``system/human.md``-like blocks by kind (profiles and
    procedures under ``system/``, the rest beside it)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise BadInput(f"{folder}: a symbolic link; give the folder itself")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for stored in repo.listing(as_user=as_user, root=root, now=now):
        note = stored.note
        given = note.extra.get(PATH_FIELD)
        rel = given if isinstance(given, str) and safe_rel(given) else \
            ("system/" if note.kind in ("profile", "procedure") else "") + \
            f"{name_part(note.subject.replace(':', '.'), 'subject')}.{name_part(note.key or note.id, 'note', 80)}.md"
        meta = {k: v for k, v in note.extra.items() if k != PATH_FIELD}
        if not isinstance(given, str):  # a block that did not come from Letta says what it is
            meta.setdefault("label", rel[:-3].rsplit("/", 1)[-1])
            meta.setdefault("description", f"{note.kind} about {note.subject} (from mdmem)")
        write_file(folder, rel, f"---\n{yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)}---\n"
                                f"{note.text}\n")
        written.append(rel)
    return written

