"""The disposable caches under ``.git/mdmem/`` (index folders, state files, SQLite caches): how
one that cannot be read is moved aside and rebuilt, and how a rebuilt index folder replaces
the old one without a moment in which neither is usable.

Nothing here is the truth (the notes are): a cache that fails to read costs a rebuild and
one warning line (logger ``mdmem``; the CLI prints it on stderr), never a write or a recall.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger("mdmem")

ASIDE = "broken"  # broken/: caches moved aside, the newest few kept for a post-mortem
KEEP_ASIDE = 3


def move_aside(path: Path, reason: str) -> Path | None:
    """Move an unreadable cache file or folder out of the way (into ``broken/`` beside it),
    with one warning line. Returns where it went (None if it was already gone)."""
    if not os.path.lexists(path):
        return None
    aside_dir = path.parent / ASIDE
    aside_dir.mkdir(parents=True, exist_ok=True)
    target = aside_dir / f"{path.name}.{time.time_ns()}"
    try:
        os.replace(path, target)
    except OSError:
        remove(path)
        target = None
    log.warning("%s: unreadable cache (%s); moved aside%s and rebuilt from the notes", path,
                reason, f" to {target}" if target else "")
    olds = sorted(aside_dir.iterdir(), key=lambda p: p.name.rsplit(".", 1)[-1])
    for old in olds[:-KEEP_ASIDE]:
        remove(old)
    return target


# The files of an index folder: Whoosh's segments, table of contents and lock, and
# search/postings.py's files of long lists and their temporaries.
_INDEX_FILE = re.compile(r"^(_?MAIN_|\.MAIN_)")


def remove(path: Path) -> None:
    """A cache file or folder, gone (whatever it is). A folder that is a link to one elsewhere
    (an index moved to another disk) loses its index files there too: removing only the link
    left an erased note's words in the target. Nothing else there is touched."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        try:
            path.unlink()
        except OSError:
            pass
        if target.is_dir():
            for entry in target.iterdir():
                if _INDEX_FILE.match(entry.name) and entry.is_file() and not entry.is_symlink():
                    try:
                        entry.unlink()
                    except OSError:
                        pass
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def read_state(path: Path, valid: Callable[[dict], bool]) -> dict:
    """A JSON state file as a dict: {} if missing; moved aside (then {}) if it does not parse
    or has the wrong shape (``valid`` says which fields must have which types)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        move_aside(path, f"not JSON: {type(exc).__name__}")
        return {}
    try:
        ok = isinstance(data, dict) and valid(data)
    except Exception:  # noqa: BLE001 -- any shape the validator trips on is a wrong shape
        ok = False
    if not ok:
        move_aside(path, f"unexpected content ({type(data).__name__})")
        return {}
    return data


def write_state(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old state or the new one, never half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def is_corrupt(exc: BaseException) -> bool:
    """A SQLite error that means the file is damaged or not ours (not a busy/locked one)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return "locked" not in text and "busy" not in text


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, None if there is none: tells a file another
    process deleted or replaced from the one a connection opened."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def open_sqlite(path: Path, setup: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    """A SQLite cache, set up by ``setup`` (pragmas, tables). A file that is not a database or
    whose tables are not ours is moved aside and a fresh one made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path) and not path.is_file():
        move_aside(path, "not a file")
    for suffix in ("-journal", "-wal", "-shm"):
        # A folder (or link) where SQLite keeps its journal made every open fail ("unable to
        # open database file") and the good database was moved aside for it.
        # (A link to a file is left: it may be a hot journal SQLite must roll back.)
        side = path.with_name(path.name + suffix)
        if os.path.lexists(side) and not side.is_file():
            move_aside(side, "not a file")
    for attempt in (1, 2):
        db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        try:
            setup(db)
            return db
        except sqlite3.DatabaseError as exc:
            db.close()
            if attempt == 2 or not is_corrupt(exc):
                raise
            move_aside(path, str(exc))
    raise AssertionError("unreachable")


# --- index folders: build beside, then swap ------------------------------------------------

def fresh_folder(folder: Path) -> Path:
    """An empty ``<folder>.new`` to build a replacement index in."""
    new = folder.with_name(folder.name + ".new")
    remove(new)
    new.mkdir(parents=True)
    return new


def swap_in(folder: Path) -> None:
    """Replace ``folder`` with the finished ``<folder>.new``. A kill at any point leaves either
    the old or the new index in place, or both beside it for :func:`recover_folder`."""
    new = folder.with_name(folder.name + ".new")
    old = folder.with_name(folder.name + ".old")
    remove(old)
    if os.path.lexists(folder):
        os.replace(folder, old)
    os.replace(new, folder)  # only a finished .new is ever renamed in
    remove(old)


def recover_folder(folder: Path) -> None:
    """Finish or undo a swap a kill interrupted (call under the index lock). ``.new`` next
    to ``.old`` with no ``folder`` means the old one was moved away after the new one was
    finished; ``.new`` alone may be half built and goes."""
    new = folder.with_name(folder.name + ".new")
    old = folder.with_name(folder.name + ".old")
    if not os.path.lexists(folder):
        if new.is_dir() and old.is_dir():
            os.replace(new, folder)
        elif old.is_dir():
            os.replace(old, folder)
    remove(new)
    remove(old)
