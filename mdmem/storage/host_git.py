"""Git and ssh against a git host: what a key may read there (gitolite's ``info``), cloning a
repository, and changing the host's admin repository (commit + push). The ssh command (which
key, which port) is the caller's: the boundary resolves it from GIT_SSH_COMMAND."""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import GitFailed

DEFAULT_SSH = "ssh"
TIMEOUT = 120


def _env(ssh_command: str | None) -> dict[str, str]:
    env = {**os.environ}
    if ssh_command:
        env["GIT_SSH_COMMAND"] = ssh_command
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def _failed(what: str, r: "subprocess.CompletedProcess[str]") -> GitFailed:
    detail = (r.stderr or r.stdout or "").strip().splitlines()
    return GitFailed(f"{what}: exited {r.returncode}: {' / '.join(detail[-3:]) or 'no output'}")


def ssh_call(target: str, port: int | None, command: list[str], *, ssh_command: str | None) -> str:
    """Run a command of the host's shell (gitolite: ``info``) over ssh as the caller's key."""
    argv = [*shlex.split(ssh_command or DEFAULT_SSH), "-o", "BatchMode=yes"]
    if port:
        argv += ["-p", str(port)]
    try:
        r = subprocess.run([*argv, target, *command], capture_output=True, text=True, timeout=TIMEOUT,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise GitFailed(f"ssh {target} {' '.join(command)}: no answer in {TIMEOUT}s") from None
    if r.returncode != 0:
        raise _failed(f"ssh {target} {' '.join(command)}", r)
    return r.stdout


def clone(url: str, dest: Path, *, ssh_command: str | None) -> None:
    r = subprocess.run(["git", "clone", "-q", "--", url, str(dest)], capture_output=True, text=True,
                       env=_env(ssh_command), timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise _failed(f"git clone {url}", r)


def push_all(root: Path, url: str, *, ssh_command: str | None) -> None:
    """Push every branch of ``root`` to ``url`` (a fresh scope repository's first push)."""
    r = subprocess.run(["git", "-C", str(root), "push", "-q", url, "refs/heads/*:refs/heads/*"],
                       capture_output=True, text=True, env=_env(ssh_command), timeout=TIMEOUT,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise _failed(f"git push {url}", r)


def edit_and_push(url: str, edit: Callable[[Path], str | None], *, identity: tuple[str, str],
                  ssh_command: str | None) -> str | None:
    """Clone ``url`` into a scratch folder, let ``edit`` change its files and name the change
    (None: nothing to do), commit everything as ``identity`` and push. Returns the commit id."""
    with tempfile.TemporaryDirectory(prefix="mdmem-host-") as scratch:
        work = Path(scratch) / "admin"
        clone(url, work, ssh_command=ssh_command)
        message = edit(work)
        if message is None:
            return None

        def git(*args: str) -> str:
            r = subprocess.run(["git", "-C", str(work), "-c", f"user.name={identity[0]}",
                                "-c", f"user.email={identity[1]}", *args], capture_output=True, text=True,
                               env=_env(ssh_command), timeout=TIMEOUT, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise _failed(f"git {args[0]} in {url}", r)
            return r.stdout

        git("add", "-A")
        if not git("status", "--porcelain").strip():
            return None
        git("commit", "-q", "-m", message)
        git("push", "-q", "origin", "HEAD")
        return git("rev-parse", "HEAD").strip()
