"""A workspace from a host, and the check that a workspace's mounts agree with their declarations.

``from_host``: ask the host which repositories this person's key may read (the host decides, not
mdmem), clone each scope repository among them and mount it at its root. A repository the host
lists but that cannot be mounted (empty, not a memory) is named and kept in the workspace's
``known`` roots, so prove-gone names it as unread.

``undeclared``: a mount its own mdmem.toml does not let the person read, though the host let
them clone it: the host's rules and the declarations have drifted (a member removed in the
config, rules not regenerated), and the person still holds bytes they are no longer meant to.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MdmemError
from ..workspace import Workspace
from ..workspace.layout import WORKSPACE_FILE
from . import gitolite


@dataclass
class FromHost:
    workspace: Path
    host: str
    mounted: list[str] = field(default_factory=list)    # newly mounted roots
    already: list[str] = field(default_factory=list)    # mounted before
    failed: dict[str, str] = field(default_factory=dict)  # root -> why it is not mounted

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": str(self.workspace), "host": self.host, "mounted": self.mounted,
                "already": self.already, "failed": self.failed}


def from_host(path: Path, address: gitolite.Address, *, as_user: str, prefix: str = "",
              ssh_command: str | None = None, **settings: Any) -> FromHost:
    """Make (or complete) the workspace at ``path`` from every scope repository ``as_user``'s key
    may read on the host. The clones run with the caller's environment (its GIT_SSH_COMMAND)."""
    listed = gitolite.scope_repos(gitolite.readable(address, ssh_command=ssh_command), prefix=prefix)
    path = Path(path)
    ws = Workspace.open(path, **settings) if (path / WORKSPACE_FILE).exists() else \
        Workspace.init(path, as_user=as_user, **settings)
    out = FromHost(workspace=ws.root, host=str(address))
    with ws:
        ws.check_user(as_user)
        for root, repo in listed:
            if root in ws.file.mounts:
                out.already.append(root)
                continue
            try:
                ws.add(root, address.url(repo.name), as_user=as_user)
                out.mounted.append(root)
            except MdmemError as exc:
                out.failed[root] = str(exc)
        if out.failed:
            ws.file.known = sorted(set(ws.file.known) | set(out.failed))
            ws.file.save(ws.root)
    return out


def undeclared(ws: Workspace) -> list[str]:
    """One line per mount whose own mdmem.toml does not declare the workspace's person a reader
    (nor an eraser the host may grant a clone to), naming the root and the remote it came from."""
    out = []
    for info in ws.mount_list():
        if info.head is None or info.readable:
            continue
        repo = ws.repo_for(info.root)
        if ws.user in repo.access.rewriters_of_root(info.root):
            continue
        out.append(f"{info.root}: {ws.user} could clone it from {info.remote}, but its mdmem.toml does not "
                   f"declare {ws.user} a reader; the host's rules and the declaration disagree (an admin "
                   "regenerates them: mdmem host rules --gitolite --apply ADMIN_URL), and this clone holds "
                   f"what {ws.user} may no longer read (mdmem workspace remove {info.root})")
    return out
