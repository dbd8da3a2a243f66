"""The erasure journal: what an erasure is doing, written inside ``.git`` before anything
changes, so a crash (kill -9, power loss) leaves a job that the next mdmem command finishes.

It holds the plan (erased texts included: it must be able to finish scrubbing them), so it
lives in ``.git/mdmem-erasure/`` with mode 0600 in a 0700 folder, removed when the job ends;
while it exists, prove-gone fails.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from ..errors import BadInput
from ..storage.gitdir import common_git_dir, erasure_done_path  # the shared git dir

FOLDER = "mdmem-erasure"


class Journal:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.folder = common_git_dir(self.root) / FOLDER
        self.path = self.folder / "journal.json"

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict:
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(state, dict) or "phase" not in state or "plan" not in state:
                raise ValueError("no phase or plan")
            return state
        except (ValueError, OSError) as exc:
            # Written atomically, so this is damage from outside: say so, change nothing.
            raise BadInput(f"{self.path}: erasure journal unreadable ({exc}); the interrupted erasure cannot be "
                           "finished from it. Inspect the repository (git log --all), then remove that folder "
                           "and run the forget again") from None

    def save(self, state: dict) -> None:
        """Atomically: the new journal is complete on disk before it replaces the old one."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.folder, 0o700)
        tmp = self.folder / "journal.json.new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def advance(self, state: dict, phase: str) -> None:
        state["phase"] = phase
        self.save(state)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def finished(self) -> None:
        """The erasure ended: the journal goes and its done stamp moves. A process holding
        notes in memory (the daemon, an MCP server) that sees it move lets go of everything by
        ending or re-executing itself -- also after an erasure that rewrote no commit (text only
        in the work tree), which a check of the branch cannot see; a writer drops what it kept
        of the old history (storage/erasures_seen.py says who follows it)."""
        self.remove()
        stamp_erasure_ended(self.root)


def stamp_erasure_ended(root: Path) -> None:
    """Move the done stamp of the repository at ``root``: an erasure ended there (forget's, or
    one made elsewhere that `sync --replay` brought in), and every process following it lets go."""
    done = erasure_done_path(root)
    try:
        tmp = done.with_name(done.name + ".new")
        tmp.write_text(f"{time.time_ns()}\n", encoding="utf-8")
        os.replace(tmp, done)
    except OSError:  # (a linked worktree's .git is a file: no journal there either)
        pass


def pending(root: Path) -> bool:
    """An erasure was interrupted here (cheap: one stat)."""
    return (common_git_dir(root) / FOLDER / "journal.json").exists()
