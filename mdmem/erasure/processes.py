"""Running mdmem processes of a repository: what a proof cannot look into. A long-lived process
(an MCP server, a watcher, the daemon) may hold erased text in memory it freed but has not given
back; only its exit clears that, so prove-gone names each one (read from /proc: Linux)."""
from __future__ import annotations

import os
from pathlib import Path

LONG_LIVED = ("serve", "daemon", "watch")


def running(root: Path) -> list[tuple[int, str]]:
    """(pid, command) of every other running mdmem process whose repository is ``root`` (named
    on its command line or its working folder there); empty where /proc does not exist."""
    root = Path(root).resolve()
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    skip = {os.getpid(), os.getppid()}
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            argv = [a.decode("utf-8", "replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if not any("mdmem" in a for a in argv) or not any(a in LONG_LIVED for a in argv):
            continue
        # A relative argument means what it means in that process's folder, never in ours (else
        # every word on its command line, "serve" included, would land inside the prover's repo).
        named = any(_inside(str(cwd / a), root) for a in argv)
        if named or _inside(str(cwd), root):
            what = next(a for a in argv if a in LONG_LIVED)
            out.append((int(entry.name), f"mdmem {what}"))
    return sorted(out)


def _inside(path: str, root: Path) -> bool:
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return p == root or root in p.parents
