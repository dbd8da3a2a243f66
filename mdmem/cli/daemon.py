"""The daemon: one process per repo, started by `mdmem daemon start`, that answers read-only
CLI calls with the repo kept open between them (cli/launch.py is its client).

What it keeps is what a fresh process pays for on every call: the imports, the open search
index and embedder, and -- instead of a look at every note for hand edits -- the index's
inotify watch (storage/tree_watch.py). Each call runs the ordinary command code (cli/main.py)
with the caller's arguments, environment and folder, so its answer is the one the caller's
own process would have given:

- Who may see what is decided per call from the call's own identity, exactly as in-process:
  the daemon holds no identity of its own. Its socket sits in the repo's git directory with
  mode 0600 and each connection's peer must be the daemon's own user (SO_PEERCRED).
- Only READ_ONLY commands (launch.py) run here; anything else is answered "run it yourself".
- A call for another repo (a --repo the client's guess missed) is answered the same way.
- A change of mdmem.toml (teams, trust, kinds) counts at the next call: the repo follows it
  (RepoState.follow_config), as any repo kept open does.
- When history was rewritten (an erasure, a sync that reset) the repo is reopened; a rewrite
  is also looked for every second while idle. Either way the daemon then exits once the call
  in hand is answered: erased text does not wait in this process's memory -- not even in
  memory it freed -- and the next call starts a new daemon (launch.py).
- Code: a call from a client whose mdmem files differ (an upgrade) is answered "run it
  yourself" and the daemon exits.
- An erasure under way or cut short (its journal, erasure/journal.py): everything held is
  dropped and the call opens the repo as a fresh process does -- finishing the erasure, or
  waiting for the one running -- so no text being erased is answered.
- The caller's environment must match the daemon's wherever the library or git read the
  process's own (PATH, HOME, GIT_*, locale, proxies, TLS settings, COLUMNS: MUST_MATCH);
  else the call runs in the caller's process.
- Connections are handled on threads (a stuck or slow client holds only its own); the calls
  themselves run one at a time (stdout/stderr are swapped per call). A call that cannot start
  within RUN_WAIT_SECONDS is answered "run it yourself"; the client gives up on a daemon that
  does not acknowledge its call (stopped, frozen) the same way.
- It exits after ``idle_seconds`` without a call, on `mdmem daemon stop`, SIGTERM, or when its
  socket is no longer where it bound it (the repo moved, .git/mdmem removed).
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..erasure.journal import pending as erasure_pending
from ..errors import BadInput, Conflict, LockTimeout
from ..repo import MemoryRepo
from ..storage.erasures_seen import ErasureFollower
from ..storage.gitdir import locks_dir
from ..storage.locks import Lock
from .launch import (ACK, PROTOCOL, READ_ONLY, SOCKET_NAME, code_stamp, exchange, forget_autostart, peer_uid,
                     read_message, send_message, socket_path)

MAX_REQUEST = 16 << 20  # argv + environment
REQUEST_SECONDS = 1.0  # a client sends at once: the whole request within this, or it is dropped
RUN_WAIT_SECONDS = 2.0  # a call waits this long for the one before it, then runs in its own process
SEND_SECONDS = 10.0  # a client that does not read its answer (stopped, Ctrl-Z) is dropped after this
MAX_CONNECTIONS = 64  # connections handled at once; more are closed (their clients run the call)
POOL_SIZE = 3  # repos kept open (one per embedder/fusion/user-config combination asked for)
IDLE_SECONDS = 30 * 60
CHECK_SECONDS = 1.0  # how often the held repos are looked at for a rewrite (an erasure)


class _OtherRepo(Exception):
    """A call for a repo other than the daemon's."""


@dataclass
class _Held:
    root: Path  # as the caller spelled it
    settings: dict[str, Any]
    secret: str | None  # what the caller's environment gives the embedder (UserConfig ignores it in ==)
    repo: MemoryRepo
    state: str | None  # the branch tip last seen


def must_match(name: str) -> bool:
    """Environment variables the library, git or httpx read from the process itself: a call
    whose values differ from the daemon's would not get its own process's answer."""
    return (name in ("PATH", "HOME", "TZ", "LANG", "LANGUAGE", "TMPDIR", "COLUMNS", "LINES", "XDG_CONFIG_HOME",
                     "PYTHONIOENCODING", "PYTHONUTF8", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")
            or name.startswith(("LC_", "GIT_", "SSL_")) or name.lower().endswith("_proxy"))


def _relevant(env: dict[str, str] | os._Environ) -> dict[str, str]:
    return {k: v for k, v in env.items() if must_match(k)}


def _secret(settings: dict[str, Any]) -> str | None:
    config = settings.get("user_config")
    name = getattr(config, "api_key_env", None)
    return config.secret(name) if config is not None and name else None


@dataclass
class Daemon:
    root: Path
    idle_seconds: float = IDLE_SECONDS
    code: str = field(default_factory=code_stamp)
    served: int = 0
    started: float = field(default_factory=time.time)
    _held: list[_Held] = field(default_factory=list)
    _stop: bool = False
    _other_repo: bool = False
    _env: dict[str, str] = field(default_factory=lambda: _relevant(os.environ))
    _run_lock: threading.Lock = field(default_factory=threading.Lock)
    _last_call: float = field(default_factory=time.monotonic)
    _erasures: ErasureFollower = field(init=False)  # the erasures seen since it started
    _rewritten: bool = False  # stopping because of a rewrite or an erasure

    def __post_init__(self) -> None:
        self._erasures = ErasureFollower([self.root])

    # --- the repos it keeps open ------------------------------------------------------
    def opener(self, path: str | None, cwd: str, settings: dict[str, Any]) -> tuple[MemoryRepo, bool]:
        """Ctx's opener (cli/context.py): this daemon's repo, kept open, never closed by the call."""
        # Spelled as the caller's own process would open it (a path through a symlink stays so
        # in what the command prints), but only this daemon's repo.
        here = Path(cwd, path).absolute() if path else MemoryRepo.locate(cwd)
        if here.resolve() != self.root:
            self._other_repo = True
            raise _OtherRepo(str(here))
        self.drop_rewritten()  # an erasure: the open below finishes it or waits, as a fresh process
        secret = _secret(settings)
        for held in self._held:
            if held.root == here and held.settings == settings and held.secret == secret:
                return held.repo, False
        repo = MemoryRepo.open(here, **settings)
        self._held.insert(0, _Held(here, settings, secret, repo, repo.store.head()))
        while len(self._held) > POOL_SIZE:
            self._drop(self._held[-1])
        return repo, False

    def _changed(self, held: _Held) -> bool:
        """History was rewritten under the held repo (an erasure, a sync that reset): its caches
        may hold erased text. (A change of mdmem.toml the repo follows itself: follow_config.)"""
        before, now = held.state, held.repo.store.head()
        if before and now and before != now:
            try:
                if not held.repo.store.is_ancestor(before, now):
                    return True
            except Exception:  # noqa: BLE001 -- the old tip is gone: rewritten
                return True
        held.state = now
        return False

    def _drop(self, held: _Held) -> None:
        self._held.remove(held)
        with contextlib.suppress(Exception):
            held.repo.close()

    def drop_rewritten(self) -> None:
        """Drop what may hold text an erasure removes -- everything while one is under way or was
        cut short (its journal) or once one has ended (its stamp moved: also an erasure of text
        never committed, which rewrites nothing), a repo whose history was rewritten -- and stop:
        the process's freed memory may still hold that text, and only its exit returns it."""
        if self._erasures.ended() or erasure_pending(self.root):  # (stats, per call and per idle second)
            self.close()
            self._stopping_for_rewrite()
            return
        for held in list(self._held):
            with contextlib.suppress(Exception):
                if self._changed(held):
                    self._drop(held)
                    self._stopping_for_rewrite()

    def _stopping_for_rewrite(self) -> None:
        self._stop = self._rewritten = True

    def close(self) -> None:
        for held in list(self._held):
            self._drop(held)

    # --- calls --------------------------------------------------------------------------
    def answer(self, request: object) -> dict:
        if not isinstance(request, dict):
            return {"error": "a request is a JSON object"}
        op = request.get("op")
        if op == "ping":
            return self.status()
        if op == "stop":
            self._stop = True
            return {"stopped": True, "pid": os.getpid()}
        if op == "idle":  # `mdmem daemon start --idle` finding one that runs (started by a call)
            seconds = request.get("seconds")
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < 1e9:
                return {"error": "idle: seconds, a number above 0"}
            self.idle_seconds = float(seconds)
            return self.status()
        if op != "run":
            return {"error": f"unknown op {op!r}"}
        if request.get("protocol") != PROTOCOL or request.get("code") != self.code:
            self._stop = True
            return {"notice": "the daemon ran other mdmem code (an upgrade?) and has stopped; "
                              "this call ran in its own process"}
        argv, env, cwd, columns = request.get("argv"), request.get("env"), request.get("cwd"), request.get("columns")
        if (not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(env, dict)
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
                or not isinstance(cwd, str)):
            return {"error": "run: argv (list of strings), env (object of strings), cwd (string)"}
        if not argv or argv[0] not in READ_ONLY or _relevant(env) != self._env:
            return {}  # run it yourself
        if not (isinstance(columns, int) and not isinstance(columns, bool) and 0 < columns < 100_000):
            columns = None
        return self.run(argv, env, cwd, columns)

    def run(self, argv: list[str], env: dict[str, str], cwd: str, columns: int | None = None) -> dict:
        from .main import main

        out, err = io.StringIO(), io.StringIO()
        self._other_repo = False
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        # The caller's terminal width where its process would have measured one (argparse's
        # help and usage, rich): this process writes to no terminal. COLUMNS in the caller's
        # environment is the daemon's own (must_match).
        width = "COLUMNS" not in env and columns is not None
        if width:
            os.environ["COLUMNS"] = str(columns)
        try:
            try:
                rc = main(argv, env=env, cwd=cwd, opener=self.opener)
            except SystemExit as exc:  # argparse on bad arguments (usage is on err)
                rc = exc.code if isinstance(exc.code, int) else 2
        finally:
            sys.stdout, sys.stderr = saved
            if width:
                os.environ.pop("COLUMNS", None)
        if self._other_repo:
            return {}  # another repo's call: the client runs it itself
        self.served += 1
        return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}

    @property
    def rewritten(self) -> bool:
        """It stopped because history was rewritten or an erasure ended."""
        return self._rewritten

    def status(self) -> dict:
        return {"pid": os.getpid(), "root": str(self.root), "code": self.code, "served": self.served,
                "started": self.started, "idle_seconds": self.idle_seconds,
                "walks": sum(h.repo.index.tree_walks for h in self._held),  # whole work-tree walks made
                "warm_passes": sum(h.repo.index.warm_passes for h in self._held),  # search/warm.py
                "open": [{k: v for k, v in h.settings.items() if k != "user_config"} for h in self._held]}

    # --- the loop -----------------------------------------------------------------------
    def serve(self, listener: socket.socket, bound: tuple[int, int] | None = None) -> None:
        """Accept until stopped, idle, or the socket at its path is no longer ours (``bound``:
        its device and inode)."""
        listener.settimeout(CHECK_SECONDS)
        checked = time.monotonic()
        path = listener.getsockname()
        while not self._stop:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                conn = None
            if conn is not None:
                if threading.active_count() > MAX_CONNECTIONS:
                    conn.close()  # its client runs the call itself
                else:
                    threading.Thread(target=self._connection, args=(conn,), daemon=True,
                                     name="mdmem-daemon-call").start()
            now = time.monotonic()
            if now - checked >= CHECK_SECONDS:
                checked = now
                if bound is not None and _identity(path) != bound:
                    return  # moved with its repo, or .git/mdmem removed: nobody can reach it
                if self._run_lock.acquire(blocking=False):
                    try:
                        self.drop_rewritten()
                    finally:
                        self._run_lock.release()
            if now - self._last_call > self.idle_seconds:
                return

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            self._serve_one(conn)

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            if peer_uid(conn) not in (None, os.getuid()):
                return
            request = read_message(conn, MAX_REQUEST, deadline=time.monotonic() + REQUEST_SECONDS)
        except (OSError, ValueError) as exc:
            self._send(conn, {"error": f"bad request: {exc}"})
            return
        if not (isinstance(request, dict) and request.get("op") == "run"):
            self._send(conn, self.answer(request))
            return
        # One call at a time; the answer is sent after the next may start (a client that does not
        # read holds only its own thread).
        if not self._run_lock.acquire(timeout=RUN_WAIT_SECONDS):
            self._send(conn, {})  # busy: run it yourself
            return
        try:
            if not self._send(conn, ACK):
                return  # the client gave up waiting
            reply = self.answer(request)
            if "rc" in reply:
                self._last_call = time.monotonic()  # only calls it answered keep it alive
        except Exception as exc:  # noqa: BLE001 -- a bug in one call must not end the daemon
            reply = {"error": f"internal: {exc!r}"}
        finally:
            self._run_lock.release()
        self._send(conn, reply)

    def _send(self, conn: socket.socket, message: dict) -> bool:
        try:
            conn.settimeout(SEND_SECONDS)
            send_message(conn, message)
            return True
        except (OSError, ValueError):
            return False

    def shutdown(self) -> None:
        """Drop the held repos once a call in progress has ended."""
        self._run_lock.acquire(timeout=60)
        self.close()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def listen_path(root: Path) -> Path:
    path = socket_path(str(root))
    if path is None:
        raise BadInput(f"{root}: the daemon's socket path would be longer than a Unix socket allows "
                       "(108 bytes), and no runtime folder of yours ($XDG_RUNTIME_DIR/mdmem or /tmp/mdmem-<uid>, "
                       "0700) can hold it")
    return Path(path)


def _lock(root: Path) -> Lock:
    return Lock(locks_dir(root) / "daemon.lock")


def starting(root: Path) -> bool:
    """Whether a daemon of ``root`` holds its lock (running, or still warming up)."""
    lock = _lock(root)
    try:
        lock.acquire(timeout=0.5)  # (not 0: `starting` may be probing it this moment)
    except LockTimeout:
        return True
    lock.release()
    return False


def run(root: Path, *, idle_seconds: float = IDLE_SECONDS, warm: Any = None) -> int:
    """Be the daemon of ``root`` until stopped. One per repo: a lock held for its whole life;
    a second start finds it taken (Conflict). ``warm(daemon)`` runs once before listening."""
    root = root.resolve()
    path = listen_path(root)
    lock = _lock(root)
    try:
        lock.acquire(timeout=0.5)  # (not 0: `starting` may be probing it this moment)
    except LockTimeout as exc:
        raise Conflict(f"{root}: a daemon already runs for this repo (`mdmem daemon status`)") from exc
    daemon = Daemon(root, idle_seconds=idle_seconds)
    signal.signal(signal.SIGTERM, lambda *_: setattr(daemon, "_stop", True))
    try:
        if warm is not None:
            warm(daemon)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by a daemon killed before: the lock says it is gone
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(path))  # mode 0600: only this user may connect
        finally:
            os.umask(old)
        listener.listen(64)
        bound = _identity(str(path))
        try:
            daemon.serve(listener, bound)
        finally:
            listener.close()
            if _identity(str(path)) == bound:  # still ours (not a socket another daemon bound since)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
    finally:
        daemon.shutdown()
        lock.release()
        if daemon.rewritten:
            forget_autostart(root)  # the next call starts a new daemon at once
    return 0


def ask(root: Path, op: str, *, timeout: float = 5.0, **fields: Any) -> dict | None:
    """``ping``, ``stop`` or ``idle`` (seconds=) the daemon of ``root`` (None: none answers)."""
    path = socket_path(str(root.resolve()))
    return None if path is None else exchange(path, {"op": op, **fields}, timeout=timeout)


__all__ = ["Daemon", "run", "ask", "starting", "listen_path", "must_match", "SOCKET_NAME"]
