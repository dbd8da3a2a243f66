"""What the HTTP server admits before a request reaches the MCP transport: a rate per token
(429 + Retry-After), a cap on one token's requests in flight at once (429), no event stream
(any method but POST: 405), and a bounded body read within a deadline (413 too large, 408 too slow).

It runs after the bearer token is verified (the SDK's authentication middleware) and before
the transport reads anything: a request without a valid token is answered 401 without its
body being read at all. A body is read here, whole, with a cap and a clock, so a client that
sends 100 MB or stops halfway holds only its own coroutine, never a worker thread, and is
answered by itself while every other client goes on being served."""
from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RateLimiter:
    """A token bucket per key: ``rate`` requests a second on average, ``burst`` at once."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic):
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._mutex = threading.Lock()

    def take(self, key: str) -> float:
        """0 when the request may go now (and it is counted), else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        with self._mutex:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > 10_000:  # forget keys whose bucket is full again
                full = [k for k, (t, a) in self._buckets.items() if t + (now - a) * self.rate >= self.burst]
                for k in full:
                    del self._buckets[k]
            return (1.0 - tokens) / self.rate


# JSON-RPC's range for a server's own errors: the refusals below are answered as JSON-RPC errors
# (the request's id is not read yet: null), which the SDK's client surfaces with their message;
# any other body at a non-2xx status it reported as "Server returned an error response".
REFUSED_CODE = -32000


async def refuse(send: Send, status: int, kind: str, message: str,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ``status`` with a JSON-RPC error whose message starts with ``kind`` (its ``data``
    says it again, for a program)."""
    await send_json(send, status, {"jsonrpc": "2.0", "id": None,
                                   "error": {"code": REFUSED_CODE, "message": f"{kind}: {message}",
                                             "data": {"kind": kind}}}, headers)


async def send_json(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close"), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class RequestGuard:
    """ASGI middleware for the MCP endpoint ``path`` (other paths pass through untouched)."""

    def __init__(self, app: ASGIApp, *, path: str, limiter: RateLimiter, max_body_bytes: int,
                 body_seconds: float, max_in_flight: int = 16):
        self.app = app
        self.path = path
        self.limiter = limiter
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds
        self.max_in_flight = max_in_flight
        self._in_flight: Counter[str] = Counter()  # token id -> its requests being answered (event loop only)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path.rstrip("/"):
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            await self.app(scope, receive, send)  # the SDK's RequireAuthMiddleware answers 401
            return
        token_id = getattr(user.access_token, "token_id", user.access_token.client_id)
        wait = self.limiter.take(token_id)
        if wait > 0:
            await refuse(send, 429, "rate_limited",
                         f"this token sent more than {self.limiter.rate:g} requests a second "
                         f"(bursts of {self.limiter.burst}); retry after {wait:.2f} s",
                         [(b"retry-after", str(max(1, math.ceil(wait))).encode())])
            return
        if scope["method"] != "POST":
            # GET is a stream for messages the server starts: this stateless server sends none.
            # One it opened stayed open for ever (a ping every 15 s, no clock), so one read-only
            # token holding ~500 filled the connection limit and every other client got 503,
            # even after a revocation; the transport spec's answer for "no stream here" is 405.
            # DELETE ends a session, which a stateless server has none of. The SDK's own 405s
            # for the other methods named GET and DELETE as allowed.
            await refuse(send, 405, "method_not_allowed", f"{scope['method']}: this server answers POST only, "
                         "one call a request (no event stream, no session)", [(b"allow", b"POST")])
            return
        if self._in_flight[token_id] >= self.max_in_flight:
            # Each request holds a connection while its body arrives (up to the body clock) and
            # its answer is read: one token's share of the server's connections is bounded.
            await refuse(send, 429, "too_many_in_flight", f"this token has {self.max_in_flight} requests being "
                         "answered already; wait for their answers", [(b"retry-after", b"1")])
            return
        self._in_flight[token_id] += 1
        try:
            await self._admitted(scope, receive, send)
        finally:
            self._in_flight[token_id] -= 1
            if not self._in_flight[token_id]:
                del self._in_flight[token_id]  # a token gone quiet keeps no entry

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send, int(declared))
            return
        body = bytearray()
        try:
            with anyio.fail_after(self.body_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body += message.get("body", b"")
                    if len(body) > self.max_body_bytes:
                        await self._too_large(send, None)
                        return
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await refuse(send, 408, "request_timeout",
                         f"the request body did not arrive within {self.body_seconds:g} s")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send, declared: int | None) -> None:
        # A chunked body's size is not declared: it is over the cap once the bytes read are.
        size = f"of {declared} bytes" if declared is not None else f"over {self.max_body_bytes} bytes"
        await refuse(send, 413, "too_large", f"request body {size}; this server takes at most "
                     f"{self.max_body_bytes} bytes a request")


def header_deadline_protocol(seconds: float) -> type:
    """uvicorn's h11 protocol, with a deadline for a request's head: a connection that has not
    sent a whole request line and headers within ``seconds`` of connecting (or of its last
    answer) is closed. uvicorn has no such clock: a connection that never finished its headers
    was kept for ever and counted against the server's connection limit, so a few hundred of
    them from one client had every other client answered 503 for as long as it liked."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.cycle is None or self.cycle.response_complete:  # no request under way: only its head was awaited
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # a request is under way: its body has RequestGuard's clock

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline
