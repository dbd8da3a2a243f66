"""The `mdmem` command's entry point: hand a read-only call to the repo's daemon when one runs,
else run the command in this process.

A CLI call in a fresh process pays ~250 ms for imports (git, Whoosh, numpy, onnxruntime) and
~50-200 ms to look at every note for hand edits before it can answer; the daemon keeps a
process beside the repo with all of that warm (and an inotify watch in place of the scan).
A read-only call that finds none runs here and then starts one in the background for the
calls that follow (it exits after AUTOSTART_IDLE_SECONDS without a call); `mdmem daemon
start` starts one by hand. This module is what every call imports first, so it imports only
the standard library's cheapest parts: a call the daemon answers never loads mdmem's
library at all.

MDMEM_NO_DAEMON=1: never ask a daemon, never start one. MDMEM_DAEMON_AUTOSTART=0: ask one
that runs, never start one.

Only the commands in READ_ONLY go to the daemon, and any doubt -- no socket, a refused or
dropped connection, a daemon of another user or of other code, a call it finds is for
another repo -- runs the command here instead: the daemon only ever saves time. Asking
again is always safe because these commands change nothing.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time

from ..storage.gitdir import DAEMON_LOG  # os and stat only

# Commands that only read: what the daemon may answer (cli/daemon.py checks it again).
READ_ONLY = frozenset({"recall", "get", "keys", "history", "ls", "show", "startup"})
SOCKET_NAME = "daemon.sock"
# mdmem/workspace/layout.py's names (this module imports only the standard library; a test pins them)
WORKSPACE_FILE = ".mdmem-workspace.toml"
WORKSPACE_MOUNTS = ".mdmem-mounts"
WORKSPACE_JOURNAL = ".mdmem-journal"  # a workspace's own hidden folder: its daemon's socket, lock, log and mark
PROTOCOL = 1
CONNECT_SECONDS = 0.5
ACK_SECONDS = 3.0  # a daemon that has not started the call by then (frozen, busy) is not waited for
ACK = {"running": True}  # the daemon's word that the call has started
MAX_REPLY = 256 << 20  # a reply is a command's whole output
AUTOSTART_IDLE_SECONDS = 600.0  # a daemon nobody asked for by name does not linger half an hour
# A daemon that did not come up (a repo it cannot open, a full disk) is not started again by
# every call: one try per this many seconds (the mark's change time).
AUTOSTART_RETRY_SECONDS = 60.0
AUTOSTART_MARK = "daemon.autostart"
LOG_NAME = DAEMON_LOG


def entry() -> None:
    sys.exit(main(sys.argv[1:]))


def main(argv: list[str]) -> int:
    if argv[:4] in (["hooks", "claude-code", "run", "UserPromptSubmit"], ["hooks", "codex", "run", "UserPromptSubmit"]):
        return prompt_hook(argv[4:])  # the agent waits on it before every prompt
    start_for = None  # the repo whose daemon to start once this call has run here
    if argv and argv[0] in READ_ONLY and not switch(os.environ, "MDMEM_NO_DAEMON", False) \
            and sys.stdout is not None and sys.stderr is not None:
        try:
            try:
                cwd = os.getcwd()
            except OSError:  # the folder was deleted under the shell: as the command says it
                cwd = None
            root = repo_root_for_call(argv, os.environ, cwd) if cwd is not None else None
            path = socket_path(root) if root is not None else None
            reply = ask_daemon(path, argv, os.environ, cwd) if path is not None and cwd is not None else None
            if reply is not None:
                if reply.get("notice"):
                    sys.stderr.write(f"mdmem: {reply['notice']}\n")
                if "rc" in reply:
                    return _relay(reply)
            elif path is not None and switch(os.environ, "MDMEM_DAEMON_AUTOSTART", True):
                # (also when a socket is there that did not answer: a daemon killed left it, and
                # a new one replaces it; one that still runs, frozen, holds its lock and the new
                # one exits -- at most one try per AUTOSTART_RETRY_SECONDS)
                start_for = root
        except KeyboardInterrupt:  # as cli/main.py
            return 130
    with_site()
    from .main import main as run_here

    rc = run_here(argv)
    if start_for is not None and rc == 0:  # (a call that failed may name no usable repo or user)
        autostart(start_for)
    return rc


def prompt_hook(rest: list[str]) -> int:
    """Claude Code's UserPromptSubmit hook (cli/prompt_hook.py): its recall handed to the daemon
    like any read-only call, else run here."""
    from . import prompt_hook as hook

    parsed = hook.parse(rest, sys.stdin.buffer.read(hook.MAX_INPUT_BYTES + 1))
    if isinstance(parsed, int):
        return parsed
    recall, cwd = parsed
    reply, start_for = None, None
    if not switch(os.environ, "MDMEM_NO_DAEMON", False):
        root = repo_root_for_call(recall, os.environ, cwd)
        path = socket_path(root) if root is not None else None
        reply = ask_daemon(path, recall, os.environ, cwd) if path is not None else None
        if reply is None and path is not None and switch(os.environ, "MDMEM_DAEMON_AUTOSTART", True):
            start_for = root
    if reply is not None and "rc" in reply:
        return hook.answer(int(reply["rc"]), reply.get("stdout", ""), reply.get("stderr", ""))
    with_site()
    rc, out, err = hook.run_here(recall)
    if start_for is not None and rc == 0:
        autostart(start_for)
    return hook.answer(rc, out, err)


def switch(env, name: str, default: bool) -> bool:
    """An on/off environment variable: "0" is off, any other value on, unset or empty ``default``."""
    value = env.get(name, "")
    return default if value == "" else value != "0"


def _relay(reply: dict) -> int:
    try:
        sys.stdout.write(reply.get("stdout", ""))
        sys.stdout.flush()
    except BrokenPipeError:  # `mdmem recall ... | head`, as cli/main.py
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except (OSError, ValueError) as exc:  # a full disk, a closed stdout: said as cli/main.py says it
        from ..errors import as_mdmem_error

        error = as_mdmem_error(exc)
        sys.stderr.write(f"mdmem: {error}\n")
        return error.exit_code
    sys.stderr.write(reply.get("stderr", ""))
    sys.stderr.flush()
    return int(reply["rc"])


def ask_daemon(path: str, argv: list[str], env, cwd: str) -> dict | None:
    """The answer of the daemon at ``path`` to this call, or None when it should run here."""
    request = {"op": "run", "protocol": PROTOCOL, "code": code_stamp(), "argv": argv, "env": dict(env), "cwd": cwd,
               "columns": terminal_columns()}
    return exchange(path, request)


def exchange(path: str, request: dict, *, timeout: float | None = None) -> dict | None:
    """Send one request to the daemon at ``path`` and read its reply (None: no usable daemon)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if st.st_uid != os.getuid():
        return None  # a socket someone else put there: never hand them our environment
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_SECONDS)
            sock.connect(path)
            if peer_uid(sock) != os.getuid():
                return None
            sock.settimeout(ACK_SECONDS if request.get("op") == "run" else timeout)
            send_message(sock, request)
            reply = read_message(sock, MAX_REPLY)
            if reply == ACK:  # started: its answer takes as long as the command does
                sock.settimeout(timeout)
                reply = read_message(sock, MAX_REPLY)
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


def terminal_columns() -> int | None:
    """The width of the terminal this call writes to (None: not a terminal): what argparse and
    rich measure in the caller's own process, which the daemon's has not got."""
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # as shutil.get_terminal_size
    except (AttributeError, ValueError, OSError):
        return None


def is_workspace(root) -> bool:
    """Whether ``root`` (what repo_root_for_call found) is a workspace rather than a memory repo."""
    return os.path.isfile(os.path.join(str(root), WORKSPACE_FILE))


def daemon_folder(root) -> str:
    """Where the daemon of ``root`` keeps its socket, log and autostart mark: a repo's cache
    folder in its git directory (storage/gitdir.py), a workspace's own hidden folder (never in
    any scope repository); as private as what it serves. os.path only (every call asks)."""
    from ..storage.gitdir import CACHE_NAME, git_dir_path  # os.path only

    root = str(root)
    return os.path.join(root, WORKSPACE_JOURNAL) if is_workspace(root) else os.path.join(git_dir_path(root), CACHE_NAME)


def daemon_lock_path(root) -> str:
    """The lock a daemon of ``root`` holds for its whole life (one daemon per repo or workspace)."""
    from ..storage.gitdir import LOCKS_NAME, git_dir_path  # os.path only

    root = str(root)
    if is_workspace(root):
        return os.path.join(daemon_folder(root), "daemon.lock")
    return os.path.join(git_dir_path(root), LOCKS_NAME, "daemon.lock")


def forget_autostart(root) -> None:
    """Let the next call start a daemon at once (the one of ``root`` ended for a reason that is
    not a failure to start: a history rewrite)."""
    _drop_mark(os.path.join(daemon_folder(root), AUTOSTART_MARK))


def _drop_mark(mark) -> None:
    """Remove the autostart mark, whatever is there (a folder or a link where the file belongs
    turned autostart off for good: the mark's file could never be written again, and
    `daemon stop` could not remove it; the cache folder is disposable)."""
    import shutil
    import stat

    try:
        if stat.S_ISDIR(os.lstat(mark).st_mode):
            shutil.rmtree(mark, ignore_errors=True)
        else:
            os.unlink(mark)
    except OSError:
        pass


def repo_root_for_call(argv: list[str], env, cwd: str) -> str | None:
    """The repo or workspace this call names: --repo, MDMEM_REPO, else the folder with
    mdmem.toml at or above ``cwd`` -- or the workspace that folder is in, as cli/context.py's
    open_repo finds it (a workspace file at or above, with no memory repo between but its own
    clones). A guess only -- the daemon resolves the call's repo exactly as the command would
    and refuses calls for another one."""
    given = _repo_argument(argv) or env.get("MDMEM_REPO")
    start = os.path.join(cwd, given) if given else cwd
    folder = os.path.abspath(start)
    found = None
    while True:
        if os.path.exists(os.path.join(folder, WORKSPACE_FILE)) and not in_repo_work_tree(folder):
            # A workspace (mdmem/workspace/) spans its mounts: its own daemon answers, never one
            # clone's (a repo met below it counts only when it is not one of its clones).
            if found is None or os.path.relpath(found, folder).split(os.sep)[0] == WORKSPACE_MOUNTS:
                return folder
            return start if given else found
        if found is None and os.path.exists(os.path.join(folder, "mdmem.toml")):
            found = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return start if given else found
        folder = parent


def in_repo_work_tree(folder: str) -> bool:
    """Whether a folder above ``folder`` (its real path) holds a memory repo: a workspace file
    there is one a teammate could commit, never a workspace (as workspace.layout.locate)."""
    here = os.path.realpath(folder)
    while True:
        parent = os.path.dirname(here)
        if parent == here:
            return False
        here = parent
        if os.path.exists(os.path.join(here, "mdmem.toml")):
            return True


def _repo_argument(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        if arg == "--repo" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--repo="):
            return arg[len("--repo="):]
    return None


def socket_path(root: str, env=os.environ) -> str | None:
    """The daemon's socket of the repo or workspace at ``root``: in its daemon_folder, so it is
    as private as what it serves; where that path is longer than a Unix socket allows (a repo in
    a deep folder), in this user's runtime folder (``env``'s $XDG_RUNTIME_DIR/mdmem, else
    /tmp/mdmem-<uid>; 0700 and ours, else none), named by a hash of the real path. None when
    neither fits."""
    path = os.path.join(daemon_folder(root), SOCKET_NAME)
    if len(os.fsencode(path)) < SUN_PATH_MAX:  # AF_UNIX's limit (sun_path)
        return path
    folder = runtime_folder(env)
    if folder is None:
        return None
    import hashlib

    key = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:32]
    path = os.path.join(folder, f"{key}.sock")
    return path if len(os.fsencode(path)) < SUN_PATH_MAX else None


SUN_PATH_MAX = 108


def runtime_folder(env) -> str | None:
    """This user's folder for daemon sockets, made 0700 if missing; None unless it is a real
    folder (not a link) this user owns that nobody else may enter (in /tmp anyone could have
    made it first, to catch the calls and their environments)."""
    import stat

    base = env.get("XDG_RUNTIME_DIR") or ""
    folder = os.path.join(base, "mdmem") if os.path.isabs(base) else f"/tmp/mdmem-{os.getuid()}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return folder


# The daemon's interpreter imports mdmem from the very folder this process imported it from:
# not by sys.path (`-I` ignored the PYTHONPATH or user site the caller found mdmem through, so
# the daemon ran other code or none), and never from the repo's folder where it
# starts (-P: a `mdmem/` committed there must not be what it runs).
_BOOT = ("import importlib.util, os, sys\n"
         "init = sys.argv[1]\n"
         "spec = importlib.util.spec_from_file_location('mdmem', init, "
         "submodule_search_locations=[os.path.dirname(init)])\n"
         "module = importlib.util.module_from_spec(spec)\n"
         "sys.modules['mdmem'] = module\n"
         "spec.loader.exec_module(module)\n"
         "sys.argv = ['mdmem', *sys.argv[2:]]\n"
         "from mdmem.cli.main import entry\n"
         "entry()\n")


# An agent's hook (Claude Code's, Codex's) starts a process per prompt: without `site` (-S) it
# skips the site-packages walk and every .pth (an editable install's finder alone imported
# pathlib, re and importlib.util: ~40 ms of each prompt), and loads mdmem from its own folder as
# the daemon's boot does. A call that must run here after all gets `site` then (with_site).
_HOOK_BOOT = _BOOT.replace("from mdmem.cli.main import entry", "from mdmem.cli.launch import entry")


def hook_command(agent: str) -> list[str]:
    """The command an agent's settings run for one of its hooks (the event and options follow)."""
    init = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")
    return [sys.executable, "-S", "-P", "-c", _HOOK_BOOT, init, "hooks", agent, "run"]


def with_site() -> None:
    """The site-packages (and .pth files) a process started without `site` (-S) skipped: what
    a command run in this process imports (pygit2, Whoosh...) lives there."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def spawn_daemon(root: str, idle_seconds: float, env, log: int):
    """Start `mdmem daemon run` for ``root`` in a session of its own, detached from this call's
    terminal and pipes (output to ``log``, a file descriptor): a shell reading this call's
    output (`$(mdmem recall ...)`, a CI step) gets its end of file when this call exits."""
    import subprocess

    init = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")
    argv = [sys.executable, "-P", "-c", _BOOT, init, "daemon", "run", "--repo", str(root),
            "--idle", repr(float(idle_seconds))]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=root, env=dict(env),
                            start_new_session=True)


# Non-blocking: a FIFO planted at the log's or the mark's name would hold the call forever.
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_regular(path, flags: int) -> int:
    """Open ``path`` to write, refusing anything but a regular file (OSError)."""
    import stat

    fd = os.open(path, flags, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return fd


def open_log(root: str) -> int:
    """The daemon's log in its daemon_folder, opened to append (OSError: cannot be had)."""
    folder = daemon_folder(root)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return _open_regular(os.path.join(folder, LOG_NAME), _OPEN_FLAGS | os.O_APPEND)


def autostart(root: str) -> bool:
    """Start the daemon of ``root`` in the background, for the calls after this one; at most one
    try per AUTOSTART_RETRY_SECONDS. Never an error: the daemon only ever saves time."""
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:  # argparse in the daemon could not take it as --repo
        return False
    import stat

    mark = os.path.join(daemon_folder(root), AUTOSTART_MARK)
    try:
        st = os.lstat(mark)
        if not stat.S_ISREG(st.st_mode):
            _drop_mark(mark)  # not ours to read a time from: replaced by a mark of our own below
        elif time.time() - st.st_mtime < AUTOSTART_RETRY_SECONDS and not _died(root):
            return False  # tried a moment ago: it is warming up, or it could not start
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        log = open_log(root)
    except OSError:  # a read-only repo, a full disk: calls keep running in their own process
        return False
    try:
        os.close(_open_regular(mark, _OPEN_FLAGS | os.O_TRUNC))
        os.utime(mark, follow_symlinks=False)
        spawn_daemon(root, AUTOSTART_IDLE_SECONDS, os.environ, log)
    except OSError:
        return False
    finally:
        os.close(log)
    return True


def _died(root: str) -> bool:
    """A daemon came up (its socket is there) and is gone (its lock is free: killed, crashed):
    started again at once, not after AUTOSTART_RETRY_SECONDS. One that never came up left no
    socket, and one warming up holds its lock: both wait for the retry time."""
    import fcntl

    path = socket_path(root)
    if path is None or not os.path.exists(path):
        return False
    try:
        fd = os.open(str(daemon_lock_path(root)), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: a daemon runs (or starts)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def code_stamp() -> str:
    """Which mdmem code and Python this is: a daemon started before an upgrade (or an edit of
    an editable install) would answer with old code. Sizes and change times of the package's
    files, hashed; ~1 ms."""
    import zlib

    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # The environment (sys.prefix) and the code's folder, not the interpreter's spelling:
    # `.venv/bin/mdmem`, `.venv/bin/python -m mdmem` and `.venv/bin/python3 -m mdmem` run the
    # same code and must share one daemon, not stop each other's.
    parts = [os.path.realpath(environment_prefix()), os.path.realpath(sys.base_prefix), sys.version, top]
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".json", ".md", ".toml")):
                st = os.stat(os.path.join(folder, name))
                parts.append(f"{os.path.relpath(os.path.join(folder, name), top)}:{st.st_size}:{st.st_mtime_ns}")
    text = "\n".join(parts).encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}{len(text):x}"


def environment_prefix() -> str:
    """``sys.prefix`` as `site` sets it: an agent's hook runs without `site` (-S), and there a
    virtual environment's prefix is still the base interpreter's. Found as site.venv finds it:
    a pyvenv.cfg beside the interpreter or one folder up names the folder above it."""
    if not sys.flags.no_site:
        return sys.prefix
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    if any(os.path.isfile(os.path.join(folder, "pyvenv.cfg")) for folder in (exe_dir, os.path.dirname(exe_dir))):
        return os.path.dirname(exe_dir)
    return sys.prefix


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end (Linux SO_PEERCRED; None elsewhere)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def send_message(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogateescape")
    sock.sendall(struct.pack(">Q", len(data)) + data)


def read_message(sock: socket.socket, limit: int, *, deadline: float | None = None) -> object:
    """One length-prefixed JSON message; ValueError when it is cut short or over ``limit``,
    OSError (a timeout) when it has not all come by ``deadline`` (time.monotonic())."""
    head = _read_exactly(sock, 8, deadline)
    (size,) = struct.unpack(">Q", head)
    if size > limit:
        raise ValueError(f"message of {size} bytes (at most {limit})")
    return json.loads(_read_exactly(sock, size, deadline).decode("utf-8", "surrogateescape"))


def _read_exactly(sock: socket.socket, size: int, deadline: float | None = None) -> bytes:
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the message did not come in time")
            sock.settimeout(left)  # a byte at a time must not stretch the wait
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            raise ValueError("connection closed mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


if __name__ == "__main__":
    entry()
