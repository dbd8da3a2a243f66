"""Every error mdmem raises, in one tree, each with the CLI exit code it maps to.

    MdmemError              1  anything else mdmem could not do (message says what)
    ├── BadInput            2  an argument, file or field is wrong (names it and what would be right)
    │   └── NoteInvalid     2  a note on disk does not parse or breaks its kind's contract
    ├── Refused             3  the write gate, a permission or a capability said no; nothing written
    ├── Conflict            5  the state moved under the caller; read again and retry
    │   ├── BranchMoved     5  a branch tip changed between reading it and moving it (CAS lost)
    │   └── LockTimeout     5  another process held a repo or index lock too long
    ├── NotFound            6  no such note, or not visible to the acting user (the same on purpose)
    ├── ProofFailed         7  prove-gone found an erased text somewhere it checks
    ├── Incomplete         11  a proof or an erasure could not reach every place (names who can finish it)
    ├── EmbedderError       8  an embedding backend is unreachable or answered wrongly
    ├── GitFailed           9  git (the binary or libgit2) failed; the message carries git's own
    └── Internal           70  a bug: an exception mdmem did not expect (never a user error)

Exit code 4 is not an error: a write held for review (``HELD_EXIT_CODE``); nor is 10, an
import that wrote some items and held or refused others, each listed (``PARTIAL_EXIT_CODE``).

The library raises only these. The two boundaries, the CLI (``cli/main.py``) and the MCP
server (``mcp/server.py``), map whatever reaches them through :func:`as_mdmem_error`, once.
"""
from __future__ import annotations

from typing import Any

HELD_EXIT_CODE = 4
PARTIAL_EXIT_CODE = 10


class MdmemError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; ``kind`` names the error in JSON."""

    exit_code = 1
    kind = "error"

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.kind, "message": str(self)}

    def lines(self) -> list[str]:
        """The message as the lines a terminal shows it in: one, unless the error is a list (a
        note's several problems). The CLI escapes line breaks within a line, so a name or a
        value in a message cannot start a line of its own."""
        return [str(self)]


class BadInput(MdmemError):
    """An argument, file or field is wrong; says which and what would be right."""

    exit_code = 2
    kind = "bad_input"


class NoteInvalid(BadInput):
    """A note on disk does not parse or breaks the schema."""

    kind = "invalid_note"

    def __init__(self, path: str, field: str, reason: str, *, problems: list[tuple[str, str]] | None = None):
        self.path, self.field, self.reason = path, field, reason
        # Every problem of the note (the first is field/reason), so one check lists them all.
        self.problems = list(problems or [(field, reason)])
        # A committed file's name is anyone's text: shown with its control characters escaped,
        # so a name cannot write terminal escapes or fake a line of its own.
        from .model.text import escape_controls
        shown = escape_controls(path, newlines=False)
        self._lines = [f"{shown}: {f}: {r}" for f, r in self.problems]
        super().__init__("\n".join(self._lines))

    def lines(self) -> list[str]:
        return list(self._lines)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "path": self.path, "field": self.field, "reason": self.reason,
                "problems": [{"field": f, "reason": r} for f, r in self.problems]}


class Refused(MdmemError):
    """The write gate (or the delete capability) refused; nothing was written."""

    exit_code = 3
    kind = "refused"

    def __init__(self, reason: str, existing_keys: list[str] | None = None):
        self.reason = reason
        self.existing_keys = list(existing_keys or [])
        msg = reason
        if self.existing_keys:
            msg += " Existing keys: " + ", ".join(self.existing_keys)
        super().__init__(msg)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "reason": self.reason, "existing_keys": self.existing_keys}


class Conflict(MdmemError):
    """The note changed since the version the caller read."""

    exit_code = 5
    kind = "conflict"


class BranchMoved(Conflict):
    """The branch tip changed between reading it and moving it; nothing was written."""

    kind = "branch_moved"


class LockTimeout(Conflict):
    """Another process held a lock (the repo's write lock, the index lock) past the timeout."""

    kind = "lock_timeout"


class NotFound(MdmemError):
    """No such note, or the acting user may not see it (indistinguishable on purpose)."""

    exit_code = 6
    kind = "not_found"


class ProofFailed(MdmemError):
    """prove-gone found a needle somewhere it checks."""

    exit_code = 7
    kind = "proof_failed"


class Incomplete(MdmemError):
    """A proof could not read every place the text could be (roots, caches or git files the
    asker may not read), or an erasure could not make a remote drop the erased objects: no
    verdict of PASS either way; the message names who or what can complete it."""

    exit_code = 11
    kind = "incomplete"


class EmbedderError(MdmemError):
    """An embedding backend could not be reached or answered wrongly."""

    exit_code = 8
    kind = "embedder"


class GitFailed(MdmemError):
    """A git operation failed (the git binary or libgit2); the message carries git's words."""

    exit_code = 9
    kind = "git"


class Internal(MdmemError):
    """An exception mdmem did not expect: a bug to report, not something the caller did."""

    exit_code = 70
    kind = "internal"


def as_mdmem_error(exc: BaseException) -> MdmemError:
    """The one mapping from whatever reached a boundary (CLI, MCP) to the error tree."""
    if isinstance(exc, MdmemError):
        return exc
    import pygit2

    if isinstance(exc, pygit2.GitError):  # libgit2: a corrupt object, a broken ref
        return GitFailed(f"git: {exc}")
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return MdmemError(f"{where}{exc.strerror or exc}")
    return Internal(f"{type(exc).__name__}: {exc} (a bug in mdmem; please report it)")
