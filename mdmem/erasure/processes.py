"""Running mdmem processes of a repository: what a proof cannot look into. A long-lived process
(an MCP server, a watcher, the daemon) may hold erased text in memory it freed but has not given
back; only a fresh process image clears that (a server re-executes itself once an erasure ends,
the daemon exits), so prove-gone names each one whose image predates the last erasure (read
from /proc: Linux)."""
from __future__ import annotations

import json
import os
from pathlib import Path

LONG_LIVED = ("serve", "daemon", "watch")
HANDOVER_ENV = b"MDMEM_SERVE_HANDOVER="  # mcp/reexec.py: what a re-executed server was handed


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
        # An option's value may follow "=" (--repo=PATH), and MDMEM_REPO names the repository
        # as well as --repo does.
        given = argv + [a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a]
        given += _repo_in_environment(entry)
        named = any(_inside(str(cwd / a), root) for a in given)
        if named or _inside(str(cwd), root):
            what = next(a for a in argv if a in LONG_LIVED)
            out.append((int(entry.name), f"mdmem {what}"))
    return sorted(out)


def _repo_in_environment(entry: Path) -> list[str]:
    """The MDMEM_REPO a process was started with ([] if none, or its environment is not ours to read)."""
    try:
        env = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return []
    return [item[len(b"MDMEM_REPO="):].decode("utf-8", "replace") for item in env
            if item.startswith(b"MDMEM_REPO=") and len(item) > len(b"MDMEM_REPO=")]


def _inside(path: str, root: Path) -> bool:
    try:
        p = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return p == root or root in p.parents


def image_since_ns(pid: int) -> int | None:
    """When the process's memory image began at the latest (ns since the epoch): its last exec
    when it is a server that re-executed itself (the time it was handed), else its start, a
    second early (the boot time /proc gives is in whole seconds); None when /proc does not say
    (another user's process, or it ended)."""
    proc = Path("/proc") / str(pid)
    try:
        for entry in (proc / "environ").read_bytes().split(b"\0"):
            if entry.startswith(HANDOVER_ENV):
                since = json.loads(entry[len(HANDOVER_ENV):]).get("since_ns")
                if isinstance(since, int):
                    return since
        # Field 22 of stat: clock ticks from boot to the start (after the command's name, which
        # may hold spaces and parentheses: count from the last ")").
        ticks = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration, AttributeError):
        return None
    return (boot - 1) * 10**9 + ticks * 10**9 // os.sysconf("SC_CLK_TCK")
