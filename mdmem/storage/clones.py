"""Git for a workspace's mounts (mdmem/workspace/): cloning a scope repository from its remote and
reading a clone's state (its tip, how far it is ahead of or behind what it last fetched, edits
not committed). Only git commands; what a mount means is the workspace's."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitFailed


def _git(path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitFailed(f"{path}: git {' '.join(args)} failed: {proc.stderr.strip()[:300]}")
    return proc


def clone(remote: str, dest: Path) -> None:
    """Clone ``remote`` into ``dest`` (a new folder). A clone that fails leaves no folder behind, so
    a second try starts clean; the error names the remote and git's own words."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", "--", remote, str(dest)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        said = proc.stderr.strip()[:300] or f"git clone exited {proc.returncode}"
        raise GitFailed(f"clone of {remote} failed: {said}")


@dataclass(frozen=True)
class CloneState:
    """A clone as `mdmem workspace list` shows it. ``ahead``/``behind``: commits on its branch not on
    the remote's branch as last fetched, and the reverse (None without one)."""

    head: str | None
    branch: str | None
    ahead: int | None
    behind: int | None
    dirty: list[str]
    remote_url: str | None


def state(path: Path) -> CloneState:
    head = _git(path, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).stdout.strip() or None
    branch = _git(path, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip() or None
    ahead = behind = None
    if head and branch:
        counts = _git(path, "rev-list", "--left-right", "--count", f"HEAD...refs/remotes/origin/{branch}",
                      check=False)
        if counts.returncode == 0 and counts.stdout.split():
            ahead, behind = (int(x) for x in counts.stdout.split()[:2])
    status = _git(path, "status", "--porcelain=v1", "-z", "--untracked-files=no", check=False).stdout
    dirty = sorted(entry[3:] for entry in status.split("\0") if len(entry) > 3)
    url = _git(path, "config", "--get", "remote.origin.url", check=False).stdout.strip() or None
    return CloneState(head=head, branch=branch, ahead=ahead, behind=behind, dirty=dirty, remote_url=url)


def unpublished(path: Path) -> int:
    """Commits of the clone's branch that no remote-tracking branch has (what removing it would lose)."""
    proc = _git(path, "rev-list", "--count", "HEAD", "--not", "--remotes", check=False)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0
