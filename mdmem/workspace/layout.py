"""The workspace file and folder layout: which scope repositories are mounted where, and who acts.

A workspace is a folder on one person's machine. Its file ``.mdmem-workspace.toml`` (never
committed anywhere) names the acting person and each mount: a scope root (``team/<team>`` or
``private/<user>``), the remote it is cloned from and the clone's folder. Clones live in
``.mdmem-mounts/<scope>-<name>/`` (each an ordinary git clone of an ordinary memory repo) and the
workspace shows each at its root path: ``<ws>/team/payments`` is a symlink to the clone's
``team/payments`` folder, so a file path an agent opens is the note's identity path.
"""
from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..model.layout import check_name

WORKSPACE_FILE = ".mdmem-workspace.toml"
MOUNTS_DIR = ".mdmem-mounts"
JOURNAL_DIR = ".mdmem-journal"  # multi-repository operations under way (journal.py)
VIEW_NAME = "MEMORY.md"  # the generated workspace view at the top


def check_root(root: str, what: str = "root") -> str:
    """A scope root as a workspace names a mount: ``team/<team>`` or ``private/<user>``."""
    parts = root.split("/") if isinstance(root, str) else []
    if len(parts) != 2 or parts[0] not in ("team", "private"):
        raise BadInput(f"{what}: {root!r} is not a scope root; give team/<team> or private/<user>")
    check_name(parts[1], what)
    return root


def mount_folder(root: str) -> str:
    """Where a root's clone lives, relative to the workspace: one folder per root."""
    scope, name = check_root(root).split("/")
    return f"{MOUNTS_DIR}/{scope}-{name}"


@dataclass(frozen=True)
class Mount:
    root: str
    remote: str
    path: str  # the clone's folder, relative to the workspace

    def to_dict(self) -> dict[str, str]:
        return {"root": self.root, "remote": self.remote, "path": self.path}


@dataclass
class WorkspaceFile:
    """``.mdmem-workspace.toml``: ``user``, ``[mounts."<root>"]`` (remote, path) and ``known``: roots
    a host says exist for this person that are not mounted (prove-gone names them as unread)."""

    user: str
    mounts: dict[str, Mount] = field(default_factory=dict)
    known: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path) -> WorkspaceFile:
        path = folder / WORKSPACE_FILE
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadInput(f"{folder}: not a workspace (no {WORKSPACE_FILE}); mdmem workspace init PATH --as USER "
                           "makes one") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: does not parse as TOML: {exc}") from None
        user = data.get("user")
        if not isinstance(user, str):
            raise BadInput(f"{path}: user: the person this workspace acts for, like user = \"alice\"")
        check_name(user, f"{path}: user")
        mounts = {}
        for root, entry in (data.get("mounts") or {}).items():
            check_root(root, f"{path}: mounts")
            if not isinstance(entry, dict) or not isinstance(entry.get("remote"), str):
                raise BadInput(f"{path}: mounts.\"{root}\": needs remote = \"URL or path\"")
            local = entry.get("path", mount_folder(root))
            if not isinstance(local, str) or local != mount_folder(root):
                raise BadInput(f"{path}: mounts.\"{root}\".path: {local!r}; a mount's clone is {mount_folder(root)}")
            mounts[root] = Mount(root, entry["remote"], local)
        known = data.get("known") or []
        if not isinstance(known, list):
            raise BadInput(f"{path}: known: a list of scope roots")
        return cls(user=user, mounts=mounts, known=[check_root(r, f"{path}: known") for r in known])

    def save(self, folder: Path) -> None:
        """Written whole to a temporary file and renamed over: a crash leaves the old file or the new."""
        q = json.dumps  # a JSON string is a TOML basic string
        lines = ["# An mdmem workspace (mdmem workspace --help). Local to this machine: never commit it.",
                 f"user = {q(self.user)}",
                 f"known = [{', '.join(q(r) for r in sorted(self.known))}]", ""]
        for root in sorted(self.mounts):
            m = self.mounts[root]
            lines += [f"[mounts.{q(root)}]", f"remote = {q(m.remote)}", f"path = {q(m.path)}", ""]
        target = folder / WORKSPACE_FILE
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text("\n".join(lines), encoding="utf-8")
        os.replace(tmp, target)


def locate(start: str | Path | None = None) -> Path | None:
    """The workspace at or above ``start``, or None. A memory repo met first counts only when it
    is not one of the workspace's own clones (cd into a mount's folder acts on the workspace)."""
    here = Path(start or Path.cwd()).absolute()
    repo_seen: Path | None = None
    for folder in (here, *here.parents):
        # A workspace never lies inside a memory repo's work tree (a mount's clone, a shared
        # repo): a workspace file there is one a teammate can commit, and must not decide what a
        # call acts on.
        if (folder / WORKSPACE_FILE).is_file() and not any(
                (above / "mdmem.toml").exists() for above in folder.resolve().parents):
            if repo_seen is None or MOUNTS_DIR in repo_seen.relative_to(folder).parts[:1]:
                return folder
            return None
        if repo_seen is None and (folder / "mdmem.toml").exists():
            repo_seen = folder
    return None
