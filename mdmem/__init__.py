"""mdmem: memory for AI agents that people can read, edit, review and erase.

Each memory is a markdown note with YAML frontmatter in a git repository. The public
surface is :class:`MemoryRepo` and the result and error types below.

The names are imported when first used (PEP 562): ``import mdmem.cli.launch`` -- every CLI
call -- must not pay ~230 ms for git, Whoosh and numpy before it knows whether it needs them.
"""
from __future__ import annotations

import importlib

# Not typing's: importing typing costs every CLI call (and each agent's prompt hook) ~5 ms;
# type checkers read any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .errors import (BadInput, BranchMoved, Conflict, EmbedderError, GitFailed, Internal, LockTimeout,
                         Incomplete, MdmemError, NoteInvalid, NotFound, ProofFailed, Refused)
    from .model.note import Note
    from .repo import MemoryRepo
    from .results import (BatchResult, ErasurePlan, ErasureReceipt, IndexReport, KeyInfo, ProgressCallback,
                          ProofReport, RenderResult, ReviewItem, SweepResult, Version, WriteResult)
    from .search.recall import Hit
    from .storage.worktree import StoredNote

# public name -> the module that defines it
_HOMES = {
    **dict.fromkeys(["MdmemError", "BadInput", "NoteInvalid", "Refused", "Conflict", "BranchMoved", "LockTimeout",
                     "NotFound", "ProofFailed", "Incomplete", "EmbedderError", "GitFailed", "Internal"], ".errors"),
    **dict.fromkeys(["WriteResult", "Version", "ReviewItem", "KeyInfo", "SweepResult", "BatchResult",
                     "ProgressCallback", "ErasurePlan", "ErasureReceipt", "ProofReport", "RenderResult",
                     "IndexReport"], ".results"),
    "MemoryRepo": ".repo", "Note": ".model.note", "StoredNote": ".storage.worktree", "Hit": ".search.recall",
}

__all__ = [
    "MemoryRepo", "Note", "StoredNote", "Hit", "WriteResult", "Version", "ReviewItem", "KeyInfo", "SweepResult",
    "BatchResult", "ProgressCallback", "ErasurePlan", "ErasureReceipt", "ProofReport", "RenderResult", "IndexReport",
    "MdmemError", "BadInput", "NoteInvalid", "Refused", "Conflict", "BranchMoved", "LockTimeout", "NotFound",
    "ProofFailed", "Incomplete", "EmbedderError", "GitFailed", "Internal",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mdmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
