"""An HTTP server's remembers, made in a process of their own.

A write holds Python's one lock (the GIL) for 20-30 ms of CPU: the draft, the gate, the
views, and git's objects through libgit2, which keeps the GIL through its file calls. Every
recall of the server waits through that too, holding the index mutex while it does, and the
recalls queued behind it wait longer still: at 10,000 notes with 32 clients, recall p99 was
35 ms with no writes and 60-120 ms with one call in ten a remember. So a server over one
repository hands its remembers to a child process (its own GIL, the machine's other core),
one at a time over a socket pair, and is told of each commit as if it had made it
(``RepoState.committed``: the index, trust and the views move on without asking git), so
the next recall finds the note as before.

The child is this module run as ``python -m mdmem.mcp.write_process FD``. It ignores SIGTERM
and SIGINT (a supervisor signals the whole group: a write under way still finishes and is
answered); it ends when the server closes its end, after writing git's index (deferred, as
the server's own), or when the server is gone (the same end of file). Only the server's
tools call it: the token, the capability and the person are checked there first, and the
child refuses what the write path refuses (the same MemoryRepo).
"""
from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from collections.abc import Callable
from typing import Any

from ..errors import MdmemError, as_mdmem_error, from_dict
from ..model.note import Note
from ..repo import MemoryRepo
from ..results import WriteResult
from ..search.embedders import is_local

log = logging.getLogger("mdmem.mcp")

# How long the server waits for a write process to open the repository (its writes' caches
# warmed: trust and the views, a whole-memory pass at 100k notes).
OPEN_SECONDS = 120.0


def no_secret(name: str) -> str | None:
    """The write process sends no note text anywhere: it is given no secret to send with it."""
    return None


class WriteProcess:
    """The child process that makes a server's remembers (see the module's doc); started at
    once, made again when it has ended. ``remember`` takes MemoryRepo.remember's arguments."""

    def __init__(self, repo: MemoryRepo) -> None:
        self.repo = repo
        # One write at a time through the pipe (the child makes them one by one anyway); each
        # commit's notice then reaches this process's caches in the order they were made.
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        """Start the child beside the caller; the first remember waits for it to be ready."""
        started = threading.Event()

        def run() -> None:
            with self._lock:
                started.set()
                try:
                    self._ready()
                except MdmemError as exc:  # said again to the first remember, which starts it anew
                    log.warning("mdmem: the write process did not start: %s", exc)

        threading.Thread(target=run, name="mdmem-write-process", daemon=True).start()
        started.wait()

    def remember(self, text: str, **kwargs: Any) -> WriteResult:
        with self._lock:
            conn = self._ready()
            try:
                conn.send(("remember", text, kwargs))
                reply = conn.recv()
                while reply[0] in ("writing", "vectors"):
                    if reply[0] == "writing":  # its notes checked: embedded here while it commits
                        self.repo.writing(reply[1])
                    else:  # made there, before the commit: the catch-up that finds it takes them
                        self.repo.index.made_elsewhere(reply[1])
                        conn.send(("taken",))
                    reply = conn.recv()
            except (EOFError, OSError):
                code = self._ended()
                raise MdmemError(f"the server's write process ended during this write (exit code {code}); it may "
                                 "or may not be in git: look for it (recall, get) before writing it again") from None
            if reply[0] == "error":
                raise from_dict(reply[1])
            _, result, told = reply
            for commit, parent, changes, email in told:
                self.repo.committed(commit, parent, changes, email)
            return result

    def stop(self, timeout: float = 30.0) -> None:
        """End the child once the write under way is answered: it writes git's index and exits.
        The next remember starts a fresh one (after an erasure: no cache of the erased text)."""
        with self._lock:
            self._ended(timeout)

    # --- the child, from here ---------------------------------------------------------
    def _ready(self) -> Connection:
        """The pipe to a child that has the repository open (started now if none is running)."""
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            return self._conn
        if self._proc is not None:
            log.warning("mdmem: the write process ended (exit code %s); starting another", self._ended())
        ours, theirs = Pipe()
        try:
            # -P: the repository (the working folder) is not where Python looks for modules
            proc = subprocess.Popen([sys.executable, "-P", "-m", __name__, str(theirs.fileno())],
                                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, cwd=self.repo.root)
        except OSError as exc:
            ours.close()
            raise MdmemError(f"the server could not start its write process: {exc}") from None
        finally:
            theirs.close()
        self._proc, self._conn = proc, ours
        config = dataclasses.replace(self.repo.user_config, secret=no_secret)
        try:
            ours.send(("open", str(self.repo.root), config, self.repo.store.index_delay,
                       self.repo.config.embedder.backend))
            if not ours.poll(OPEN_SECONDS):
                raise MdmemError(f"the server's write process did not open {self.repo.root} in "
                                 f"{OPEN_SECONDS:g} s")
            reply = ours.recv()
        except (EOFError, OSError):
            reply = ("error", {"error": "error", "message": f"the server's write process ended as it opened "
                                                            f"{self.repo.root} (exit code {self._ended()})"})
        except MdmemError:
            self._ended()
            raise
        if reply[0] != "ready":
            self._ended()
            raise from_dict(reply[1])
        return ours

    def _ended(self, timeout: float = 5.0) -> int | None:
        """Let the child go (its end of the pipe closed, so it exits once its write is done);
        its exit code, once it has exited (killed if it has not within ``timeout``)."""
        conn, proc = self._conn, self._proc
        self._conn = self._proc = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


class _Writing(MemoryRepo):
    """The repository as the write process holds it: each commit's notice to the caches is
    kept, for the server's own caches to be given the same. A write's notes, once checked, are
    embedded here beside the commit when the embedder is local (MiniLM), their vectors handed
    over with the answer; else they are told to the server at once, whose index embeds them
    while the commit is made here (a remote embedder's secret is not given to this process)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.told: list[tuple[str, str | None, dict[str, bytes | None], str]] = []
        self.written: list[Note] = []
        self.tell: Callable[[Any], None] | None = None
        self.hear: Callable[[], Any] = lambda: None
        self.embeds = False
        super().__init__(*args, **kwargs)

    def writing(self, notes: list[Note]) -> None:
        super().writing(notes)  # with a local embedder, embedded from now on its own thread
        self.written += notes
        if self.tell is not None and not self.embeds:
            self.tell(("writing", list(notes)))

    def committing(self, changes: dict[str, bytes | None]) -> None:
        # The vectors go over before the commit is made: a recall of the server that finds
        # the commit finds them taken (handed over with the answer, after, a recall in between
        # embedded the note itself holding the index: 22-30 ms).
        super().committing(changes)
        if self.embeds and self.written and self.tell is not None:
            try:
                vectors = self.index.vectors_of(self.written)
            except Exception:  # noqa: BLE001 -- only a head start: the server's catch-up embeds itself
                vectors = {}
            self.written = []
            if vectors:
                self.tell(("vectors", vectors))
                self.hear()

    def committed(self, commit: str, parent: str | None, changes: dict[str, bytes | None], email: str) -> None:
        super().committed(commit, parent, changes, email)
        self.told.append((commit, parent, changes, email))


def _serve(conn: Connection) -> None:
    try:
        _, root, user_config, index_delay, backend = conn.recv()
        repo = _Writing.open(Path(root), user_config=user_config, embedder=backend)
        repo.store.index_delay = index_delay
        try:
            repo.warm_writes()
        except Exception:  # noqa: BLE001 -- a cache: the first write builds what it needs
            pass
        try:
            embedder = repo.index.embedder
            if is_local(embedder):
                embedder.embed_documents(["mdmem"])  # the model loaded now, not in the first write
                repo.embeds = True
        except Exception:  # noqa: BLE001 -- the server's index then embeds the notes itself
            repo.embeds = False
    except Exception as exc:  # noqa: BLE001 -- told to the server, which says it
        conn.send(("error", as_mdmem_error(exc).to_dict()))
        return
    conn.send(("ready",))
    repo.tell, repo.hear = conn.send, conn.recv
    try:
        while True:
            try:
                call = conn.recv()
            except EOFError:
                return  # the server closed its end, or is gone
            op, text, kwargs = call
            repo.told, repo.written = [], []
            try:
                if op != "remember":
                    raise MdmemError(f"the write process makes remembers, not {op!r}")
                answer = repo.remember(text, **kwargs)
                result: Any = ("ok", answer, repo.told)
            except Exception as exc:  # noqa: BLE001 -- every error is the caller's answer
                result = ("error", as_mdmem_error(exc).to_dict())
            try:
                conn.send(result)
            except OSError:
                return  # the server is gone: what was committed stays committed
    finally:
        repo.close()  # git's index gets the entries deferred


def main(argv: list[str]) -> int:
    # A supervisor signals the whole group (systemd's default): the server finishes its calls
    # and then closes the pipe; a write under way here is not cut short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    try:
        _serve(conn)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
