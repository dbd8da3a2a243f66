"""Scope repositories on local bare remotes and workspaces over them, for tests/test_workspace*.py.

Each scope repository is made with `MemoryRepo.init(..., scope_root=...)` in a scratch folder and
pushed to a bare repository, which is the remote a workspace clones (file paths as remotes)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mdmem import MemoryRepo
from mdmem.workspace import Workspace

T0 = "2026-10-01T09:00:00Z"
SETTINGS = {"embedder": "none"}


def git(root, *args, check=True) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check).stdout


def scope_remote(base: Path, root: str, *, members: list[str] | None = None, erasers: list[str] | None = None,
                 founder: str = "alice") -> Path:
    """A bare remote holding a new scope repository for ``root``."""
    scope, name = root.split("/")
    work = base / "src" / f"{scope}-{name}"
    teams = {name: members or [founder]} if scope == "team" else None
    repo = MemoryRepo.init(work, teams=teams, erasers=erasers, as_user=founder if scope == "team" else name,
                           now=T0, scope_root=root, embedder="none")
    repo.close()
    bare = base / "remotes" / f"{scope}-{name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


def team_of_three(base: Path) -> dict[str, Path]:
    """team/payments (alice, bob; carol erases), team/search (bob only), private/alice, private/bob."""
    return {
        "team/payments": scope_remote(base, "team/payments", members=["alice", "bob", "carol"], erasers=["carol"]),
        "team/search": scope_remote(base, "team/search", members=["bob"], founder="bob"),
        "private/alice": scope_remote(base, "private/alice"),
        "private/bob": scope_remote(base, "private/bob"),
    }


def workspace(base: Path, user: str, remotes: dict[str, Path], roots: list[str]) -> Workspace:
    ws = Workspace.init(base / f"ws-{user}", as_user=user, now=T0, **SETTINGS)
    ws.add_many({root: str(remotes[root]) for root in roots}, as_user=user)
    return ws


def files_under(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` (.git included), symlinks not followed."""
    out = {}
    # os.walk, not rglob: a store's background housekeeping (git repack -d) may delete loose
    # objects and their folders mid-walk; rglob raised on the vanished folder. A file gone
    # mid-walk holds nothing any more (its object is in a pack `git cat-file` still reads).
    for top, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(top) / name
            if path.is_symlink():
                continue
            try:
                out[str(path.relative_to(folder))] = path.read_bytes()
            except (FileNotFoundError, IsADirectoryError):
                continue
    return out
