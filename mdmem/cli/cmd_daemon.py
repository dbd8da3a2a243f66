"""mdmem daemon start|stop|status|run [--idle SECONDS]: a process that answers this repo's (or this
workspace's) read-only calls (recall, get, keys, history, ls, show, startup) with everything kept
warm (cli/daemon.py)."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from ..errors import BadInput, Internal, NotFound
from ..repo import MemoryRepo
from ..workspace.layout import locate as locate_workspace
from . import daemon, launch
from .context import add_common, is_workspace

START_SECONDS = 600.0  # a first start may build the search index (with a model: minutes)


def register(sub) -> None:
    p = sub.add_parser("daemon", help="keep a process that answers read-only calls fast (start/stop/status)")
    p.add_argument("action", choices=["start", "stop", "status", "run"],
                   help="start in the background, stop, show it; run: in the foreground")
    p.add_argument("--idle", type=float, default=daemon.IDLE_SECONDS, metavar="SECONDS",
                   help=f"exit after this long without a call (default {daemon.IDLE_SECONDS:.0f})")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    if not math.isfinite(ctx.args.idle) or ctx.args.idle <= 0:
        raise BadInput(f"daemon --idle {ctx.args.idle}: give a number of seconds above 0")
    action = ctx.args.action
    if action in ("stop", "status"):
        # Found, not opened: a daemon can be stopped even when the repo no longer opens.
        given = getattr(ctx.args, "repo", None) or ctx.env.get("MDMEM_REPO")
        where = Path(ctx.cwd, given) if given else Path(ctx.cwd)
        root = (locate_workspace(where) or MemoryRepo.locate(where)).resolve()
    else:
        root = ctx.repo().root.resolve()
    daemon.listen_path(root)  # a path too long for a socket: said before anything starts
    if action == "run":
        settings = {**ctx.settings(), "user_config": ctx.user_config()}
        ctx.close()  # the daemon opens its own

        def warm(d: daemon.Daemon) -> None:
            repo, _ = d.opener(str(root), str(root), settings)
            if is_workspace(repo):
                repo.reindex()  # every mount's index caught up (each one's first walk)
                repo.keep_warm()
                return
            # A process's first catch-up walks the work tree, the second starts the inotify
            # watch (note_index.py): calls then walk nothing.
            repo.index.sync()
            repo.index.sync()  # (no inotify here: the spaced walk, as in any process)
            assert repo.recaller is not None and repo.trust is not None  # made now, not by the first call
            if repo.index.embedder is not None:
                repo.index.embedder.embed_query("warm up")
            repo.keep_warm()  # first-time words read and weighed now (search/warm.py)

        return daemon.run(root, idle_seconds=ctx.args.idle, warm=warm)
    if action == "status":
        info = daemon.ask(root, "ping")
        if info is None or "pid" not in info:
            what = "workspace" if launch.is_workspace(root) else "repo"
            raise NotFound(f"{root}: no mdmem daemon runs for this {what} (`mdmem daemon start`)")
        ctx.emit(info, f"daemon of {root}: pid {info['pid']}, {info['served']} calls answered, "
                       f"up {time.time() - info['started']:.0f} s, exits after {info['idle_seconds']:.0f} s idle")
        return 0
    if action == "stop":
        info = daemon.ask(root, "stop")
        if info is None:
            ctx.emit({"stopped": False, "root": str(root)}, f"no daemon was running for {root}")
            return 0
        _wait_gone(root)
        # A daemon stopped on purpose is not one that could not start: the next read-only call
        # may start one at once, not a minute after the last start (AUTOSTART_RETRY_SECONDS).
        # Who wants none sets MDMEM_DAEMON_AUTOSTART=0.
        launch.forget_autostart(root)
        ctx.emit({"stopped": True, "root": str(root), "pid": info.get("pid")},
                 f"stopped the daemon of {root} (pid {info.get('pid')})")
        return 0
    return _start(ctx, root)


def _start(ctx, root: Path) -> int:
    info = daemon.ask(root, "ping")
    if info is not None and "pid" in info:
        if info.get("idle_seconds") != ctx.args.idle:  # started by a call (or by hand with another)
            info = daemon.ask(root, "idle", seconds=ctx.args.idle) or info
        ctx.emit({**info, "already": True}, f"the daemon of {root} already runs (pid {info['pid']}); "
                                            f"it exits after {ctx.args.idle:.0f} s idle")
        return 0
    log = Path(launch.daemon_folder(root)) / launch.LOG_NAME
    fd = launch.open_log(str(root))
    try:
        child = launch.spawn_daemon(str(root), ctx.args.idle, ctx.env, fd)
    finally:
        os.close(fd)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        info = daemon.ask(root, "ping", timeout=1.0)
        if info is not None and "pid" in info:
            ctx.emit({**info, "already": info["pid"] != child.pid, "log": str(log)},
                     f"started the daemon of {root} (pid {info['pid']}); read-only calls now go to it")
            return 0
        if child.poll() is not None and not daemon.starting(root):
            # (a start beside this one won the race: its daemon holds the lock, warming up; wait for it)
            raise Internal(f"the daemon exited with status {child.returncode} before it listened: "
                           f"{_tail(log)} (log: {log})")
        time.sleep(0.05)
    child.terminate()
    raise Internal(f"the daemon did not listen within {START_SECONDS:.0f} s (log: {log})")


def _wait_gone(root: Path, seconds: float = 15.0) -> None:
    path = daemon.listen_path(root)
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""

