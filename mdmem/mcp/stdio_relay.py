"""The stdio server's hand-over: a relay between the client's pipes and the MCP SDK's stdio
transport, so the process can re-execute itself (mcp/reexec.py) without the client seeing it.

The SDK reads fd 0 and writes fd 1; here those become pipes of this process, and two threads
move whole JSON-RPC lines between them and the client's pipes, noting which requests are
still unanswered. When the server must restart (an erasure ended), the relay passes no further
request to the SDK, waits until every request it passed is answered on the client's pipe, then
re-executes with the client's pipes back on fd 0 and 1. What the client sent and the old
process read but did not pass on is the fresh process's first input (the rest waits in the
pipe, which the fresh process inherits); the
client's ``initialize`` is replayed to the fresh SDK first (its answer kept from the client),
so the session goes on as it was: the SDK refuses every request before one."""
from __future__ import annotations

import fcntl
import json
import os
import select
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from .reexec import reexec

# The id of the replayed initialize: a string no client numbers its requests with.
REPLAYED_ID = "mdmem-resumed-session"
CHUNK = 1 << 16


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _message(line: bytes) -> dict[str, Any] | None:
    try:
        out = json.loads(line)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _key(request_id: Any) -> str:
    return json.dumps(request_id)  # 1 and "1" are different requests


class StdioRelay:
    """``must_restart()``: looked at before each request is passed on (one stat); True when the
    server must restart before answering more. ``before_exec()``: what the server does between
    its last answer and the exec (writes git's index, stops its watchers). ``handover``: what
    the process this one replaced passed (reexec.taken_over), {} on a fresh start."""

    def __init__(self, must_restart: Callable[[], bool], before_exec: Callable[[], None],
                 handover: dict[str, Any], *, drain_seconds: float = 60.0):
        self.must_restart = must_restart
        self.before_exec = before_exec
        self.drain_seconds = drain_seconds
        self.initialize: dict[str, Any] | None = handover.get("initialize")
        self._replay = self._taken_input(handover)
        self._pending: set[str] = set()
        self._answered = threading.Condition()
        self._writing = threading.Lock()  # held while a line goes to the client, and from the exec on
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False

    # --- setting up -------------------------------------------------------------------
    def start(self) -> None:
        """Take fd 0 and 1 over: the client's pipes move to private descriptors, the SDK gets
        this process's pipes in their place."""
        self.wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        self.wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        to_sdk_r, self.to_sdk = os.pipe()
        self.from_sdk, from_sdk_w = os.pipe()
        os.dup2(to_sdk_r, 0)
        os.dup2(from_sdk_w, 1)
        os.close(to_sdk_r)
        os.close(from_sdk_w)
        threading.Thread(target=self._read_client, name="mdmem-stdio-in", daemon=True).start()
        self._writer = threading.Thread(target=self._write_client, name="mdmem-stdio-out", daemon=True)
        self._writer.start()

    def stop(self) -> None:
        """The SDK ended (the client closed its end): what it wrote last reaches the client,
        and fd 0 and 1 are the client's pipes again."""
        self._stopping = True
        self._writer.join(5)
        with self._writing:
            os.dup2(self.wire_in, 0)
            os.dup2(self.wire_out, 1)

    @staticmethod
    def _taken_input(handover: dict[str, Any]) -> bytes:
        fd = handover.get("input_fd")
        if not isinstance(fd, int):
            return b""
        chunks = []
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            while chunk := os.read(fd, CHUNK):
                chunks.append(chunk)
        except OSError:
            pass
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        return b"".join(chunks)

    # --- client -> SDK ------------------------------------------------------------------
    def _read_client(self) -> None:
        buf = bytearray()
        if self.initialize is not None:  # a session taken over: the SDK hears its handshake again
            _write_all(self.to_sdk, json.dumps({"jsonrpc": "2.0", "id": REPLAYED_ID, "method": "initialize",
                                                "params": self.initialize}).encode() + b"\n")
            _write_all(self.to_sdk, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        buf += self._replay
        poller = select.poll()
        poller.register(self.wire_in, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            while (end := buf.find(b"\n")) >= 0:
                line = bytes(buf[:end + 1])
                if not self._pass_on(line):
                    return self._restart(bytes(buf))
                del buf[:end + 1]
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                return self._restart(bytes(buf))
            data = os.read(self.wire_in, CHUNK)
            if not data:  # the client closed its end: so does the SDK's
                if buf:
                    self._pass_on(bytes(buf))
                os.close(self.to_sdk)
                return None
            buf += data

    def _pass_on(self, line: bytes) -> bool:
        """Give one line to the SDK; False (and nothing given) when the server must restart first."""
        message = _message(line)
        if message is not None and "method" in message:
            if "id" in message:
                if self.must_restart():
                    return False
                with self._answered:
                    self._pending.add(_key(message["id"]))
                if message["method"] == "initialize" and isinstance(message.get("params"), dict):
                    self.initialize = message["params"]
            elif message["method"] == "notifications/cancelled":
                # The SDK sends no answer to a request the client gave up on.
                params = message.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self._answer_seen(_key(params["requestId"]))
        _write_all(self.to_sdk, line)
        return True

    def wake(self) -> None:
        """Restart now, between requests (the erasure follower's thread calls this)."""
        os.write(self._wake_w, b"x")

    # --- SDK -> client ------------------------------------------------------------------
    def _write_client(self) -> None:
        buf = bytearray()
        poller = select.poll()
        poller.register(self.from_sdk, select.POLLIN)
        while True:
            if not poller.poll(200):
                if self._stopping:
                    return
                continue
            data = os.read(self.from_sdk, CHUNK)
            if not data:
                return
            buf += data
            while (end := buf.find(b"\n")) >= 0:
                self._forward(bytes(buf[:end + 1]))
                del buf[:end + 1]

    def _forward(self, line: bytes) -> None:
        message = _message(line)
        answer = (_key(message["id"]) if message is not None and "id" in message and "method" not in message
                  else None)
        if answer != _key(REPLAYED_ID):
            with self._writing:
                _write_all(self.wire_out, line)
        if answer is not None:
            self._answer_seen(answer)

    def _answer_seen(self, key: str) -> None:
        with self._answered:
            self._pending.discard(key)
            self._answered.notify_all()

    # --- the restart --------------------------------------------------------------------
    def _restart(self, unread: bytes) -> None:
        """Every request passed on answered (or, after drain_seconds, answered with an error
        saying why), then the exec, the client's unread input handed over."""
        with self._answered:
            self._answered.wait_for(lambda: not self._pending, self.drain_seconds)
            unanswered = sorted(self._pending)
        self._writing.acquire()  # kept: nothing more reaches the client from this process
        for key in unanswered:
            _write_all(self.wire_out, json.dumps({"jsonrpc": "2.0", "id": json.loads(key), "error": {
                "code": -32603, "message": "the server restarted after an erasure before it answered; "
                                           "call again"}}).encode() + b"\n")
        try:
            self.before_exec()
        except Exception:  # noqa: BLE001 -- the fresh process repairs what a write left (the journal)
            pass
        memory = _unnamed_file()
        _write_all(memory, unread)
        os.dup2(self.wire_in, 0)
        os.dup2(self.wire_out, 1)
        handover: dict[str, Any] = {"input_fd": memory}
        if self.initialize is not None:
            handover["initialize"] = self.initialize
        try:
            reexec(handover, [memory])
        except OSError as exc:
            # No fresh process: end this one, so the client sees the server gone, not a hang.
            print(f"mdmem serve: an erasure ended and the restart failed ({exc}); start the server again",
                  file=sys.stderr, flush=True)
            os._exit(1)


def _unnamed_file() -> int:
    """A file in memory (Linux), else one already unlinked: the client's unread input, for the
    fresh process; it never has a name on disk."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("mdmem-client-input", 0)
    with tempfile.TemporaryFile() as f:
        return os.dup(f.fileno())
