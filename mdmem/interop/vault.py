"""basic-memory projects and Obsidian vaults, in and out.

A file is a note: its body is the note's text, kept as written (``## Observations`` with
``- [category] text #tag``, ``## Relations`` with ``- relation [[Note]]``, wikilinks); its
frontmatter ``title``, ``type``, ``tags``, ``permalink`` (and any other plain field, like
Obsidian's ``aliases``) are kept with the note and written back on export, with the file's
place in the vault (``vault_path``). The subject is the vault's (``vault:<name>``) with the
file's folders below it; the key is the permalink's last part, else the file name; the kind
is ``type`` when it names one, else the default. Export then import gives back the same
notes and fields.

A vault is someone else's folder: symbolic links (files or folders) are reported and never
followed, a file is read as a regular file of bounded size, frontmatter YAML without aliases
or deep nesting, and frontmatter that sets one of mdmem's own fields (``source``, ``owner``,
``scope``...) is refused: who wrote a note is the gate's to say, never the file's.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import BadInput, MdmemError
from ..model.note import FIELDS as NOTE_FIELDS
from ..ops.importing import read_frontmatter_file
from .importer import Source, name_part

if TYPE_CHECKING:
    from .. import StoredNote
    from ..repo import MemoryRepo

PATH_FIELD = "vault_path"
MAX_FILES = 100_000
SKIP_FOLDERS = {".obsidian", ".git", ".trash", ".basic-memory"}


def walk(folder: Path, source: Source, suffixes: tuple[str, ...] = (".md",)) -> list[tuple[Path, str]]:
    """Regular files below ``folder`` (sorted), never through a symbolic link: a linked file or
    folder is reported in ``source`` and left alone."""
    if folder.is_symlink() or not folder.is_dir():
        raise BadInput(f"{folder}: not a folder (a symbolic link is not followed)")
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            if d.startswith(".") or d in SKIP_FOLDERS:
                continue
            if (here / d).is_symlink():
                source.refuse((here / d).relative_to(folder).as_posix(), "a symbolic link to a folder; not followed")
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            full = here / name
            rel = full.relative_to(folder).as_posix()
            if not name.endswith(suffixes) or name.startswith("."):
                continue
            if full.is_symlink():
                source.refuse(rel, "a symbolic link; import reads regular files only")
                continue
            out.append((full, rel))
            if len(out) > MAX_FILES:
                raise BadInput(f"{folder}: more than {MAX_FILES} files; import a part of it at a time")
    return out


def read_foreign_note(full: Path, rel: str) -> tuple[dict[str, Any], str]:
    """Another tool's note file (frontmatter, body), refused (BadInput) when its frontmatter sets
    one of mdmem's own fields: who wrote a note and where it belongs is never the file's to say."""
    meta, body = read_frontmatter_file(full, rel)
    own = sorted(k for k in meta if k in NOTE_FIELDS)
    if own:
        raise BadInput(f"{rel}: frontmatter sets {', '.join(own)}, mdmem's own field(s); a note from another tool "
                       "may not say who wrote it or where it belongs (remove them, or import it another way)")
    return meta, body


def read_vault(folder: str | Path, *, kinds: Any, default_kind: str = "fact", vault: str | None = None,
               source_name: str = "user", scope: str | None = None, team: str | None = None) -> Source:
    """The notes of a basic-memory project or Obsidian vault, as import items.
    ``kinds``: the repo's contracts (``type`` names a kind when they resolve it)."""
    folder = Path(folder)
    src = Source()
    prefix = f"vault:{name_part(vault or folder.resolve().name, 'vault')}"
    for full, rel in walk(folder, src):
        try:
            meta, body = read_foreign_note(full, rel)
            kind = default_kind
            if isinstance(meta.get("type"), str):
                try:
                    kind = kinds.resolve(meta["type"]).name
                except MdmemError:
                    kind = default_kind  # basic-memory's "note", "person"...: kept as the type field
            folders = rel.split("/")[:-1]
            subject = ":".join([prefix, *(name_part(f) for f in folders)])
            permalink = meta.get("permalink")
            stem = str(permalink).rsplit("/", 1)[-1] if isinstance(permalink, str) and permalink else \
                Path(rel).stem
            extra = {k: _plain(v) for k, v in meta.items() if v is not None}
            extra[PATH_FIELD] = rel
            src.items.append({"text": body.strip(), "kind": kind, "subject": subject,
                              "key": name_part(stem, "note", 100), "source": source_name, "extra": extra,
                              "new_key": True, "line": rel})
        except BadInput as exc:
            src.refuse(rel, str(exc))
    return src.placed(scope, team)


def _plain(value: Any) -> Any:
    """A frontmatter value as a note keeps it (dates as ISO text)."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def vault_path(stored: StoredNote) -> str:
    """Where a note goes in a vault: where it came from, else its subject's folders and key."""
    given = stored.note.extra.get(PATH_FIELD)
    if isinstance(given, str) and safe_rel(given):
        return given
    parts = stored.note.subject.split(":")
    folders = parts[2:] if parts[0] == "vault" else parts
    name = stored.note.key or stored.path.rsplit("/", 1)[-1][:-3]
    return "/".join([*(name_part(p) for p in folders), f"{name_part(name, 'note', 100)}.md"])


def safe_rel(rel: str) -> bool:
    """A relative ``.md`` path that stays where it is put: no absolute, empty, '.' or '..' parts."""
    parts = rel.split("/")
    return (bool(rel) and not rel.startswith("/") and "\\" not in rel and rel.endswith(".md")
            and all(p not in ("", ".", "..") and not any(ord(c) < 32 for c in p) for p in parts))


def render_file(stored: StoredNote) -> str:
    note = stored.note
    meta: dict[str, Any] = {"title": note.extra.get("title", note.key or note.first_line()[:80]),
                            "type": note.extra.get("type", note.kind)}
    if "tags" in note.extra:
        meta["tags"] = note.extra["tags"]
    meta["permalink"] = note.extra.get("permalink", note.key or stored.path.rsplit("/", 1)[-1][:-3])
    meta.update({k: v for k, v in note.extra.items() if k not in meta and k != PATH_FIELD})
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return f"---\n{front}---\n\n{note.text}\n"


def write_file(folder: Path, rel: str, text: str) -> None:
    """``text`` at ``folder/rel``, never through a symbolic link (BadInput), replaced whole."""
    target = folder
    for part in rel.split("/")[:-1]:
        target = target / part
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            target.mkdir()
            continue
        if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
            raise BadInput(f"{rel}: {target} is a symbolic link or not a folder; export writes into real folders only")
    full = folder / rel
    if full.is_symlink():
        raise BadInput(f"{rel}: a symbolic link is there; export does not write through it")
    # A file replaced keeps its permission bits (a private CLAUDE.local.md or vault note stays
    # private); the temporary copy is never more open than that.
    mode = stat.S_IMODE(os.lstat(full).st_mode) if full.exists() else 0o644
    tmp = full.with_name(f".{full.name}.mdmem-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, full)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def export_vault(repo: MemoryRepo, folder: str | Path, *, as_user: str, root: str | None = None,
                 subject_prefix: str | None = None, now: Any = None) -> list[str]:
    """The live notes the person may read (in ``root``; about subjects under ``subject_prefix``)
    as a basic-memory / Obsidian vault in ``folder``. Returns the files written."""
    folder = Path(folder)
    if folder.is_symlink():
        raise BadInput(f"{folder}: a symbolic link; give the vault folder itself")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    seen: set[str] = set()
    for stored in repo.listing(as_user=as_user, root=root, now=now):
        if subject_prefix and not (stored.note.subject == subject_prefix
                                   or stored.note.subject.startswith(subject_prefix + ":")):
            continue
        rel = vault_path(stored)
        if rel in seen:  # two notes that would share a file: the second keeps its mdmem place
            rel = stored.path
        seen.add(rel)
        write_file(folder, rel, render_file(stored))
        written.append(rel)
    return written
