"""Children a process starts for work nobody waits on (git housekeeping, a server's index
catch-up to disk): in a session of their own, at a lower CPU priority than the process that
serves calls. On 2 cores, a repack at the same priority (git packs on every core) or a
child's imports and catch-up (~1 s of a core) slowed every recall around them."""
from __future__ import annotations

import os
import subprocess

BACKGROUND_NICE = 10


def start_in_background(argv: list[str]) -> subprocess.Popen:
    """``argv`` started detached from this process's terminal and signals, BACKGROUND_NICE
    below this process's priority (the git it runs inherits it), its output discarded."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICE))
    except OSError:  # gone already: nothing to lower
        pass
    return proc
