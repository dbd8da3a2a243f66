"""Workspaces: the scope repositories one person may read, each its own git repository, mounted at
their roots in one folder and used as one memory (issue 32).

Above ops/, erasure/ and the MemoryRepo facade, below cli/ and mcp/: a Workspace is made of
MemoryRepos and offers their method names, so the boundaries take either. Git only through
storage/ (storage/clones.py clones and reads a mount's state).
"""
from .layout import WORKSPACE_FILE, locate
from .workspace import Workspace

__all__ = ["WORKSPACE_FILE", "Workspace", "locate"]
