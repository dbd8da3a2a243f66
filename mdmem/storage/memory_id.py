"""Which memory a folder holds, as a name no other memory has: a random id in a file the memory
never commits (a repository's git directory, a workspace's folder).

A static token names the memory it was added for (auth/static_tokens.py). By path, a memory made
anew where another had been took the old one's tokens, and the same folder reached by another
path (a bind mount, a container's) refused its own. The id moves with the folder (``mv``), is
the same through any path to it, and a new memory (``mdmem init``, a fresh clone, a new
workspace) makes its own."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ..errors import BadInput

REPO_ID_FILE = "mdmem-memory-id"  # in the repository's common git directory
WORKSPACE_ID_FILE = ".mdmem-memory-id"  # beside the workspace's .mdmem-workspace.toml


def read_or_make(path: Path) -> str:
    """The id kept at ``path``, made (and kept) if there is none. Made whole in a temporary file
    and linked into place: two processes making one at once agree on the first, and nobody
    reads half of one."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(secrets.token_hex(16) + "\n", encoding="ascii")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the id
    except OSError as exc:
        raise BadInput(f"{path}: cannot keep this memory's id there ({exc.strerror}); the account serving "
                       "the memory must be able to write its folder") from None
    finally:
        tmp.unlink(missing_ok=True)
    return _read(path)


def _read(path: Path) -> str:
    """The id in the plain file at ``path`` (FileNotFoundError if there is none): never through a
    link (one to another memory's id would take its tokens), never a pipe that blocks or a
    device that never ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except PermissionError as exc:
        raise BadInput(f"{path}: cannot read this memory's id ({exc.strerror}); let this account read it "
                       "(the tokens added for this memory name it)") from None
    except OSError as exc:
        raise _unusable(path, f"cannot read this memory's id ({exc.strerror}); it is a plain file written by mdmem") \
            from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _unusable(path, "not a plain file; this memory's id is one written by mdmem")
        text = os.read(fd, 64).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
        raise _unusable(path, "not a memory id (32 hex digits, written by mdmem)")
    return text


def _unusable(path: Path, why: str) -> BadInput:
    """An id file that cannot be mended in place: the way out is a new id, and new tokens."""
    return BadInput(f"{path}: {why}: remove it and add this memory's tokens again")
