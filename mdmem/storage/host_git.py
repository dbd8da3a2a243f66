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
    # The host's own words (gitolite: "FATAL: R any ... DENIED by fallthru") come first; git's
    # generic "make sure you have the correct access rights" after them says less.
    detail = [line.strip() for line in (r.stderr or r.stdout or "").splitlines() if line.strip()]
    return GitFailed(f"{what}: exited {r.returncode}: {' / '.join(detail[:4]) or 'no output'}")


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


def _git(root: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise _failed(f"git {' '.join(args[:2])} in {root}", r)
    return r.stdout


def copy_branches(source: Path, dest: Path, *, checkout: str | None = None) -> None:
    """A new repository at ``dest`` holding ``source``'s branches and tags and only the objects
    they reach (fetched through git's pack protocol, never by copying the object folder); with
    ``checkout`` that branch is checked out in its work tree."""
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "-q", "-b", checkout or "main")
    _git(dest, "fetch", "-q", "--no-tags", "--update-head-ok", str(Path(source).resolve()),
         "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
    if checkout:
        _git(dest, "checkout", "-q", "-f", checkout)


def changed_paths(root: Path, commit: str) -> list[str]:
    """The paths ``commit`` changes against its first parent (all of them for a root commit)."""
    out = _git(root, "diff-tree", "--root", "--no-commit-id", "-r", "--name-only", "-z", commit)
    return [p for p in out.split("\0") if p]


def head(root: Path) -> str:
    return _git(root, "rev-parse", "HEAD").strip()


def count_commits(root: Path) -> int:
    return int(_git(root, "rev-list", "--count", "HEAD").strip())


def set_remote(root: Path, name: str, url: str) -> None:
    if name in _git(root, "remote").split():
        _git(root, "remote", "set-url", name, url)
    else:
        _git(root, "remote", "add", name, url)
