"""`mdmem serve --http`: the team's memory server. The same tools as stdio over the MCP SDK's
Streamable HTTP transport (stateless, JSON responses), the server an OAuth 2.0 resource
server: every request carries a bearer token, verified by the SDK's middleware through
:class:`TokenVerifier` here (static tokens and/or JWTs, mdmem/auth/); no token, or one that
does not verify, is answered 401 with ``WWW-Authenticate`` naming the protected resource
metadata document (RFC 9728), served beside.

Who acts is the token's person, per request, never an argument: the tools read it from the
SDK's per-request auth context and call the facade with ``as_user`` -- the one visibility
rule, as over stdio. The token's agent label is the provenance of its writes; its
capabilities decide which tools it is offered and may call."""
from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import inspect
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ListToolsResult
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..auth.jwt_tokens import JwtVerifier
from ..auth.principal import Principal, TokenRejected
from ..auth.static_tokens import TokenFile, split_token
from ..errors import BadInput, MdmemError, Refused
from ..repo import MemoryRepo
from . import heap
from .http_guard import RateLimiter, RequestGuard, header_deadline_protocol
from .reexec import RestartOnErasure, reexec
from .server import (ANNOTATIONS, INSTRUCTIONS, TOOLS, flush_git_indexes, followed_roots, opened_repos,
                     read_again_after_erasure, tool_errors, unknown_arguments)

log = logging.getLogger("mdmem.server")
MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
PERSON_CHECK_SECONDS = 2.0
REFUSALS_LOGGED = 30  # a minute
VERIFIED_KEPT = 4096  # tokens whose verification is kept for PERSON_CHECK_SECONDS


@dataclass(frozen=True)
class HttpLimits:
    max_body_bytes: int = 1_000_000  # a remember's text is small; 1 MB is generous
    body_seconds: float = 10.0  # the whole body must arrive within this
    max_query_chars: int = 4000  # a recall question (a long conversation turn fits)
    max_k: int = 50
    max_result_bytes: int = 2_000_000
    read_seconds: float = 30.0  # a read tool answering later than this is given up (writes finish)
    rate_per_second: float = 20.0  # per token; 0 turns the limit off
    burst: int = 40
    in_flight_per_token: int = 16  # requests of one token being answered at once (an agent makes one)
    # Tool calls running at once (threads); more wait their turn without a thread. Writes have a
    # pool of their own: they take turns on the repo's write lock anyway, and eight writes
    # waiting there held every thread while the recalls queued behind them for 30 s and more.
    read_workers: int = 6
    write_workers: int = 2


class PersonToken(AccessToken):
    """The SDK's access token with what mdmem verified: the person, agent label, capabilities."""

    person: str
    agent: str
    capabilities: list[str]
    token_id: str


class TokenVerifier:
    """The SDK's TokenVerifier over mdmem's verifiers: a static token (``mdmem_...``) is looked
    up in the token file, anything else is tried as a JWT when an issuer is configured. The
    person must be one the memory declares (Access.check_user, as mdmem.toml says now)."""

    def __init__(self, repo: MemoryRepo, *, tokens: TokenFile | None = None, jwt: JwtVerifier | None = None,
                 resource: str):
        self.repo = repo
        self.tokens = tokens
        self.jwt = jwt
        self.resource = resource
        self._declared: dict[str, float] = {}  # person -> when check_user last let them through
        # sha256(token) -> (its verified answer, when, the token file's stamp then)
        self._verified: dict[bytes, tuple[PersonToken, float, tuple[int, int, int] | None]] = {}
        self._window = [time.monotonic(), 0, 0]  # refusals: minute started, logged, not logged

    async def verify_token(self, token: str) -> AccessToken | None:
        # A token verified moments ago is answered from memory while the token file is the one
        # it was verified against (a revocation rewrites the file: the next request verifies
        # anew and is refused), for at most PERSON_CHECK_SECONDS and never past its expiry.
        # Keyed by a hash of the whole token: a wrong secret for a known id is another key.
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        stamp = self.tokens.stamp() if self.tokens is not None else None
        now = time.monotonic()
        known = self._verified.get(key)
        if known is not None:
            answer, verified_at, at_stamp = known
            if now - verified_at < PERSON_CHECK_SECONDS and at_stamp == stamp and \
                    (answer.expires_at is None or answer.expires_at > time.time()):
                return answer
            del self._verified[key]
        answer = await self._verify(token)
        if answer is not None:
            if len(self._verified) >= VERIFIED_KEPT:
                self._verified.clear()  # many tokens at once: start again rather than grow
            self._verified[key] = (answer, now, stamp)
        return answer

    async def _verify(self, token: str) -> PersonToken | None:
        try:
            if split_token(token) is not None and self.tokens is not None:
                principal = self.tokens.verify(token)
            elif self.jwt is not None and split_token(token) is None:
                # May fetch the key set (a URL): off the event loop.
                principal = await anyio.to_thread.run_sync(self.jwt.verify, token)
            else:
                raise TokenRejected("a token of a kind this server does not accept")
            self.check_person(principal)
        except TokenRejected as exc:
            self.refused(exc.reason)
            return None
        except MdmemError as exc:  # an unreadable token file, a damaged config: refuse, say why in the log
            self.refused(f"{exc.kind}: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001 -- a token that could not be checked is not let in
            self.refused(f"checking it failed: {type(exc).__name__}: {exc}")
            return None
        return PersonToken(token=token, client_id=principal.agent, scopes=sorted(principal.capabilities),
                           expires_at=principal.expires_at, resource=self.resource, subject=principal.person,
                           person=principal.person, agent=principal.agent,
                           capabilities=sorted(principal.capabilities), token_id=principal.token_id)

    def refused(self, why: str) -> None:
        """Log why a token was refused, at most REFUSALS_LOGGED a minute: a flood of bad tokens
        must not flood the log (the rest are counted, and the count logged)."""
        now = time.monotonic()
        if now - self._window[0] >= 60:
            if self._window[2]:
                log.warning("token refused: %d more in the last minute, not logged one by one", self._window[2])
            self._window = [now, 0, 0]
        if self._window[1] < REFUSALS_LOGGED:
            self._window[1] += 1
            log.warning("token refused: %s", why)
        else:
            self._window[2] += 1

    def check_person(self, principal: Principal) -> None:
        # A person found declared is not looked up again for PERSON_CHECK_SECONDS (a stamp of
        # mdmem.toml at HEAD each time was a tenth of a request's CPU). This answer is the early
        # 401; every operation checks the person again under mdmem.toml as it is then.
        now = time.monotonic()
        if self._declared.get(principal.person, -1e9) > now - PERSON_CHECK_SECONDS:
            return
        try:
            self.repo.check_user(principal.person)
        except MdmemError as exc:
            self._declared.pop(principal.person, None)
            raise TokenRejected(f"{principal.token_id}: {exc}") from None
        self._declared[principal.person] = now


def current_token() -> PersonToken:
    """The verified token of the request being served (the SDK's auth context)."""
    token = get_access_token()
    if not isinstance(token, PersonToken):
        # Cannot happen behind RequireAuthMiddleware; an identity is never made up.
        raise Refused("identity: this call carries no verified token")
    return token


class RequestIdentity:
    """What the tool modules read as ``ctx`` (as ServerContext over stdio), with the person and
    agent of the request being served instead of the server's one identity."""

    def __init__(self, repo: MemoryRepo, index_ready: threading.Event):
        self.repo = repo
        self.index_ready = index_ready

    @property
    def user(self) -> str:
        return current_token().person

    @property
    def agent(self) -> str:
        return current_token().agent


def _bounded_arguments(name: str, kwargs: dict[str, Any], limits: HttpLimits) -> None:
    if name == "recall":
        query = kwargs.get("query")
        if isinstance(query, str) and len(query) > limits.max_query_chars:
            raise ToolError(f"bad_input: recall: query of {len(query)} characters; this server takes at most "
                            f"{limits.max_query_chars} (ask a shorter question)")
        k = kwargs.get("k")
        if isinstance(k, int) and not 1 <= k <= limits.max_k:
            raise ToolError(f"bad_input: recall: k={k}; give 1 to {limits.max_k}")


class WritesUnderWay:
    """Writes running on worker threads: a stop waits for them before git's index is written
    for the last time (a write that ended after that flush left its entries to the next open)."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = threading.Condition()

    def run(self, work: Callable[[], Any]) -> Any:
        with self.idle:
            self.count += 1
        try:
            return work()
        finally:
            with self.idle:
                self.count -= 1
                self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.idle:
            return self.idle.wait_for(lambda: self.count == 0, timeout)


def undeclared_named_alone(fn: Callable[..., Any], repo: MemoryRepo) -> Callable[..., Any]:
    """``fn``, except that a token whose person mdmem.toml no longer declares (taken out since
    the token was verified) is told so without the names that are declared: the message for a
    mistyped ``--as`` lists them, and a person who lost access would learn who has it."""
    @functools.wraps(fn)
    def call(**kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except BadInput:
            person = current_token().person
            try:
                repo.check_user(person)
            except MdmemError:
                raise Refused(f"identity: {person} is not declared in this memory (mdmem.toml); "
                              "ask its maintainers") from None
            raise
    return call


def http_tool(fn: Callable[..., Any], name: str, capability: str, limits: HttpLimits,
              workers: anyio.CapacityLimiter, writes: WritesUnderWay | None = None) -> Callable[..., Any]:
    """The tool as an async function the SDK awaits: the token's capability checked, arguments
    and answer bounded, the work on a worker thread (the SDK's auth context goes with it)."""
    sync = tool_errors(fn)

    @functools.wraps(fn)
    async def call(**kwargs: Any) -> Any:
        token = current_token()
        if capability not in token.capabilities:
            raise ToolError(f"refused: {name} needs the {capability} capability; this token "
                            f"(agent {token.agent} for {token.person}) has {', '.join(token.capabilities)}")
        _bounded_arguments(name, kwargs, limits)
        work = functools.partial(sync, **kwargs)
        if capability == "read":
            try:
                with anyio.fail_after(limits.read_seconds):
                    result = await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=workers)
            except TimeoutError:
                raise ToolError(f"timeout: {name} took longer than {limits.read_seconds:g} s; try again, "
                                "or narrow the question") from None
        else:
            # A write is never abandoned half-way: it finishes, and its answer is the truth.
            result = await anyio.to_thread.run_sync(functools.partial(writes.run, work) if writes else work,
                                                    limiter=workers)
        size = len(json.dumps(result, default=str))
        if size > limits.max_result_bytes:
            raise ToolError(f"too_large: {name}'s answer is {size} bytes, over this server's "
                            f"{limits.max_result_bytes}; ask for less (a smaller k, one note)")
        return result

    return call


class CapabilityGate:
    """MCP middleware: arguments a tool does not declare are refused (an ``as_user`` or agent
    label in a call is a lie let through otherwise), and a token is offered only the tools its
    capabilities allow (calling another is refused by the tool itself)."""

    def __init__(self, params: dict[str, frozenset[str]], restart: RestartOnErasure | None = None):
        self.params = params
        self.restart = restart

    async def __call__(self, rctx: Any, call_next: Any) -> Any:
        if rctx.method == "tools/call" and isinstance(rctx.params, Mapping):
            if self.restart is not None and not self.restart.quiet():
                # Never answer from caches an erasure has made stale: the first to see one
                # drops them (and asks for the restart) before any call goes on. The stat that
                # says nothing happened runs here; a thread hop for it each call was a p99 of 8 ms.
                await anyio.to_thread.run_sync(self.restart.look)
            refusal = unknown_arguments(rctx.params, self.params)
            if refusal is not None:
                return refusal
        result = await call_next(rctx)
        if rctx.method == "tools/list":
            caps = set(current_token().capabilities)
            if isinstance(result, ListToolsResult):
                result = result.model_copy(update={"tools": [t for t in result.tools if TOOLS.get(t.name) in caps]})
            elif isinstance(result, dict) and isinstance(result.get("tools"), list):  # the serialized form
                result = {**result, "tools": [t for t in result["tools"]
                                              if isinstance(t, dict) and TOOLS.get(t.get("name")) in caps]}
        return result


def build_app(repo: MemoryRepo, verifier: TokenVerifier, *, public_url: str, issuer: str, host: str,
              limits: HttpLimits = HttpLimits(), index_ready: threading.Event | None = None,
              warmed: threading.Event | None = None, restart: RestartOnErasure | None = None) -> Starlette:
    """The ASGI app: /mcp (bearer token required), the protected resource metadata, /healthz.
    ``index_ready``: set once the index has caught up (recall answers from the views until
    then); ``warmed``: once its caches and the model are warm too (/healthz says "ready").
    ``restart``: looked at before each tool call (serve_http: an erasure ends the server)."""
    ready = index_ready or threading.Event()
    if index_ready is None:
        ready.set()
    if warmed is None:
        warmed = ready
    ctx = RequestIdentity(repo, ready)
    params: dict[str, frozenset[str]] = {}
    auth = AuthSettings(issuer_url=issuer, resource_server_url=public_url,  # type: ignore[arg-type]
                        required_scopes=None, validate_token_resource=True)
    server: MCPServer = MCPServer("mdmem", instructions=INSTRUCTIONS, token_verifier=verifier, auth=auth,
                                  middleware=[CapabilityGate(params, restart)], log_level="WARNING")
    readers, writers = anyio.CapacityLimiter(limits.read_workers), anyio.CapacityLimiter(limits.write_workers)
    writes = WritesUnderWay()
    for name, capability in TOOLS.items():
        module = importlib.import_module(f"mdmem.mcp.tools.{name}")
        fn = undeclared_named_alone(module.make(ctx), repo)
        params[name] = frozenset(inspect.signature(fn).parameters)
        workers = readers if capability == "read" else writers
        server.add_tool(http_tool(fn, name, capability, limits, workers, writes), name=name,
                        description=module.DESCRIPTION, annotations=ANNOTATIONS[capability])

    @server.custom_route(HEALTH_PATH, methods=["GET"])
    async def health(request: Request) -> Response:
        # For a supervisor: the process answers, and whether its first calls will be as quick as
        # the rest (a readiness probe). Nothing about the memory (no counts, no names).
        return JSONResponse({"status": "ok", "ready": warmed.is_set()})

    path = urlsplit(public_url).path or MCP_PATH
    app = server.streamable_http_app(streamable_http_path=path, json_response=True, stateless_http=True,
                                     max_request_body_size=limits.max_body_bytes,
                                     transport_security=transport_security(public_url, host), host=host)
    # Innermost of the app's middleware: after the SDK has verified the token, before the
    # transport reads the body.
    app.user_middleware.append(Middleware(RequestGuard, path=path,
                                          limiter=RateLimiter(limits.rate_per_second, limits.burst),
                                          max_body_bytes=limits.max_body_bytes, body_seconds=limits.body_seconds,
                                          max_in_flight=limits.in_flight_per_token))
    app.state.writes = writes
    return app


def transport_security(public_url: str, host: str) -> TransportSecuritySettings:
    """Host/Origin checks against DNS rebinding: the public URL's host and the bound address."""
    public = urlsplit(public_url)
    hosts = {public.netloc, f"{host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"}
    origins = {f"{public.scheme}://{public.netloc}", "http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"}
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=sorted(hosts),
                                     allowed_origins=sorted(origins))


def listen(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: one the system picks; the caller reads it back)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off (TCP_NODELAY) only on connections whose
    # socket says TCP. Without it a response's body waited for the ACK of its headers, which the
    # client delays up to 40 ms: recall p99 was 54 ms at the client, 21 ms in the server.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def listening_socket(fd: object) -> socket.socket | None:
    """The listening socket a server that re-executed itself handed over (its descriptor), if any."""
    if not isinstance(fd, int):
        return None
    try:
        return socket.socket(fileno=fd)
    except OSError:
        return None


# A stopping server (SIGTERM, or the restart after an erasure) takes no new connection, then
# closes each it holds once it has been quiet this long (its last answer sent, nothing read
# since), waiting at most STOP_GRACE_SECONDS for that before uvicorn's own shutdown.
QUIET_SECONDS = 0.1
STOP_GRACE_SECONDS = 2.0


def _quiet(connection, now: float) -> bool:
    """Whether a connection has answered and read nothing for QUIET_SECONDS (uvicorn's
    keep-alive timer starts when an answer is sent)."""
    cycle = getattr(connection, "cycle", None)
    timer = getattr(connection, "timeout_keep_alive_task", None)
    if cycle is None or not cycle.response_complete or timer is None:
        return False  # a request under way, or none read yet on a connection just taken
    return now - (timer.when() - connection.timeout_keep_alive) >= QUIET_SECONDS


def _draining_server_class():
    import uvicorn

    class _DrainingServer(uvicorn.Server):
        """uvicorn's server, stopping in two steps: no new connection is taken, then each
        connection it holds is closed once quiet. uvicorn closes a connection with no request
        under way at once, so a client between two requests of a session (its next one on the
        way) got a closed connection instead of an answer while the server restarted."""

        async def shutdown(self, sockets=None) -> None:
            for listening in self.servers:
                listening.close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + STOP_GRACE_SECONDS
            while loop.time() < deadline and not all(
                    _quiet(c, loop.time()) for c in self.server_state.connections):
                await asyncio.sleep(0.02)
            await super().shutdown(sockets)

    return _DrainingServer


def draining_server(config):
    """A :class:`_DrainingServer` for ``config`` (uvicorn is imported only when serving)."""
    return _draining_server_class()(config)


def serve_http(repo: MemoryRepo, verifier: TokenVerifier, sock: socket.socket, *, public_url: str, issuer: str,
               host: str, limits: HttpLimits = HttpLimits(), drain_seconds: float = 10.0,
               graceful_seconds: float = 30.0, since_ns: int | None = None) -> bool:
    """Serve until SIGTERM/SIGINT: then no new connection is taken, requests in flight (a write
    under way) are finished and answered, and the process may end. True when the index
    builder also ended (see mcp/server.serve).

    Once an erasure ends in the repository the server stops the same way and re-executes
    itself (mcp/reexec.py): its memory may hold the erased text. The listening socket stays
    open through it (a copy of its descriptor goes to the fresh process), so a client
    connecting meanwhile waits in its queue and is answered, never refused."""
    import uvicorn

    # The index's first catch-up (maybe a whole build) runs beside the server; recall answers
    # from the views until it is in. No file watcher after it, unlike stdio: every recall
    # catches the index up itself (HEAD each call, hand edits from inotify), and a watcher
    # handling the events of this server's own writes cost an eighth of its CPU under load.
    ready, warmed = threading.Event(), threading.Event()
    # A workspace (mdmem/workspace/) acts for its one person: its mounts' clones are the
    # repositories written, flushed and followed for erasures; its one index spans them.
    workspace = getattr(repo, "is_workspace", False)
    if not workspace:  # a workspace's index catches up in process
        repo.catch_up_aside()

    def start() -> None:
        try:
            repo.index.follow_tree()
            repo.index.sync()  # starts the watch and walks the tree: no client call walks it
        except Exception:  # noqa: BLE001 -- recall then catches up (and reports) by itself
            pass
        finally:
            ready.set()
        try:
            repo.keep_warm()
        except Exception:  # noqa: BLE001 -- a cache: recall reads the lists itself
            pass
        heap.settle()
        warmed.set()

    kept: list[int] = []  # the listening socket's descriptor for the fresh process

    def erasure_ended() -> None:
        kept.append(os.dup(sock.fileno()))  # before uvicorn closes its own
        read_again_after_erasure(repo)  # calls still arriving until the server stops
        server.should_exit = True

    # Following erasures starts before the builder reads a note: one ending after that is seen.
    restart = RestartOnErasure(followed_roots(repo), on_due=erasure_ended, since_ns=since_ns)
    builder = threading.Thread(target=start, name="mdmem-index-build", daemon=True)
    builder.start()
    try:
        # Before serving: nothing else of this process touches trust or the views yet, and the
        # first writes do not wait for a whole-memory pass holding the write lock.
        for each in opened_repos(repo):
            each.warm_writes()
    except Exception:  # noqa: BLE001 -- a cache: the first write builds what it needs
        pass
    stop = threading.Event()
    app = build_app(repo, verifier, public_url=public_url, issuer=issuer, host=host, limits=limits,
                    index_ready=ready, warmed=warmed, restart=restart)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            http=header_deadline_protocol(limits.body_seconds),
                            timeout_graceful_shutdown=int(graceful_seconds), limit_concurrency=512,
                            timeout_keep_alive=5)
    server = draining_server(config)
    restart.watch(stop)
    # uvicorn finishes the requests in flight on SIGTERM, then raises the signal again under the
    # handler that was there before it: this one, so the cleanup below runs and the process
    # ends with 0 -- a stop asked for, done -- instead of dying by the signal.
    stopped: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        signal.signal(signal.SIGTERM, previous)
        app.state.writes.wait_idle(graceful_seconds)  # a write uvicorn stopped waiting for still ends first
        flush_git_indexes(repo)
    if kept and not stopped:
        log.warning("an erasure ended: restarting in place so no copy of the erased text stays in memory")
        reexec({"socket_fd": kept[0]}, kept)
    for fd in kept:
        os.close(fd)
    builder.join(drain_seconds)
    return not builder.is_alive()
