"""mdmem: memory for AI agents that people can read, edit, review and erase.

Each memory is a markdown note with YAML frontmatter in a git repository. The public
surface is :class:`MemoryRepo` and the result and error types below.
"""
from __future__ import annotations

from .errors import (BadInput, BranchMoved, Conflict, EmbedderError, GitFailed, Internal, LockTimeout, MdmemError,
                     NoteInvalid, NotFound, ProofFailed, Refused)
from .model.note import Note
from .search.recall import Hit
from .repo import MemoryRepo
from .results import (BatchResult, ErasurePlan, ErasureReceipt, IndexReport, KeyInfo, ProgressCallback, ProofReport,
                      RenderResult, ReviewItem,
                      SweepResult, Version, WriteResult)
from .storage.worktree import StoredNote

__all__ = [
    "MemoryRepo", "Note", "StoredNote", "Hit", "WriteResult", "Version", "ReviewItem", "KeyInfo", "SweepResult",
    "BatchResult", "ProgressCallback", "ErasurePlan", "ErasureReceipt", "ProofReport", "RenderResult", "IndexReport",
    "MdmemError", "BadInput", "NoteInvalid", "Refused", "Conflict", "BranchMoved", "LockTimeout", "NotFound",
    "ProofFailed", "EmbedderError", "GitFailed", "Internal",
]
__version__ = "0.1.0"
