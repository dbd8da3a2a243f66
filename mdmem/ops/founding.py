"""Making a new memory repo on disk: the first commit (config, guides, attributes), by a named person; its hooks."""
from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

from ..config import CONFIG_NAME, Config, render_config
from ..errors import BadInput
from ..storage.gitstore import GitStore
from ..storage.trailers import Trailers
from ..template import read_template


def found(path: str | Path, *, teams: dict[str, list[str]] | None, erasers: list[str] | None, as_user: str,
          when: _dt.datetime, people: list[str] | None = None, emails: dict[str, list[str]] | None = None,
          scope_root: str | None = None) -> Path:
    """Create the repo at ``path`` (an empty or new folder) and return its root."""
    root = Path(path)
    if (root / CONFIG_NAME).exists():
        raise BadInput(f"{root}: already a memory repo ({CONFIG_NAME} exists); nothing changed")
    if (root / ".git").exists():
        raise BadInput(f"{root}: already a git repository; mdmem init makes a new one")
    if root.exists() and any(root.iterdir()):
        raise BadInput(f"{root}: folder is not empty; give mdmem init an empty or new folder")
    from ..hooks import install as hooks

    teams = teams or {}
    config = render_config(teams, erasers, people=[as_user, *(people or [])], emails=emails,
                           scope_root=scope_root).encode()
    files = {
        CONFIG_NAME: config,
        "README.md": read_template("README.md").encode(),
        "MEMORY.md": read_template("MEMORY.md").encode(),
        ".gitignore": read_template("gitignore").encode(),
        **hooks.committed_files(),
    }
    root.mkdir(parents=True, exist_ok=True)
    # The first commit is signed with the identity the config gives its founder (their own
    # git address when recorded), as every later commit of theirs is.
    GitStore.init(root, files, actor=as_user, when=when, identity=Config.parse(config, where=CONFIG_NAME).identity,
                  message="mdmem init\n\n" + Trailers("init", as_user, "system:init").render())
    # The hooks come from mdmem's package into this clone's .git/hooks (never committed).
    hooks.configure(root, sys.executable)
    return root
