"""The CLI called as a person calls it, and the daemon it talks to, for tests/test_*daemon.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mdmem.cli import daemon

# (Daemons here are started by name; the tests that autostart them pass their own env.)
ENV = {"MDMEM_EMBEDDER": "none", "MDMEM_DAEMON_AUTOSTART": "0"}


def cli(*args, cwd, via="launch", env=None):
    """A CLI call as a person makes it (`mdmem` = mdmem.cli.launch) or forced in-process."""
    full = {k: v for k, v in os.environ.items() if k not in ("MDMEM_USER", "MDMEM_NO_DAEMON", "MDMEM_REPO")}
    full.update({**ENV, **(env or {})})
    if via == "here":
        full["MDMEM_NO_DAEMON"] = "1"
    return subprocess.run([sys.executable, "-m", "mdmem.cli.launch", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=180)


def served(root: Path) -> int:
    info = daemon.ask(root, "ping")
    assert info is not None and "served" in info, info
    return info["served"]


def stop_daemon(folder: Path) -> None:
    """Stop the daemon serving ``folder`` (asked, then killed): none outlives its test."""
    info = daemon.ask(folder, "ping")
    cli("daemon", "stop", cwd=folder)
    if info and "pid" in info:
        try:
            os.kill(info["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
