"""mdmem serve --as USER [--allow read,write,delete]: the MCP server on stdio for one identity.
mdmem serve --http HOST:PORT: the team's memory server over HTTP, identity from each request's
bearer token (see docs/server.md)."""
from __future__ import annotations

from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the MCP server on stdio for one identity, or over HTTP for a team")
    p.add_argument("--allow", default="read,write",
                   help="stdio: capabilities to grant: read, write, delete (default read,write: no forget)")
    p.add_argument("--agent", metavar="NAME",
                   help="stdio: the agent's name in provenance (agent:NAME); default: [agent] label in your "
                        "mdmem config, else the name the MCP client gives")
    http = p.add_argument_group("over HTTP (identity, agent and capabilities come from each request's token)")
    http.add_argument("--http", metavar="HOST:PORT", nargs="?", const="127.0.0.1:8765",
                      help="serve MCP over Streamable HTTP on HOST:PORT (default 127.0.0.1:8765; port 0 picks one)")
    http.add_argument("--public-url", metavar="URL",
                      help="the URL clients use for the MCP endpoint, like https://memory.example.com/mcp "
                           "(the resource identifier and JWT audience; default http://HOST:PORT/mcp)")
    http.add_argument("--tokens", metavar="FILE",
                      help="the static token file (mdmem token add); default server-tokens.json beside your "
                           "mdmem config")
    http.add_argument("--jwt-jwks", metavar="FILE_OR_URL",
                      help="accept JWT access tokens signed by a key of this JWKS (a file or an https URL)")
    http.add_argument("--jwt-issuer", metavar="URL", help="the identity provider's issuer (iss) tokens must name")
    http.add_argument("--jwt-audience", metavar="AUD", help="the audience (aud) tokens must name; default --public-url")
    http.add_argument("--jwt-person-claim", metavar="CLAIM", default="sub",
                      help="the claim naming the person, as the memory declares them (default sub)")
    http.add_argument("--jwt-scope-prefix", metavar="PREFIX", default="mdmem:",
                      help="capabilities are the scopes PREFIXread, PREFIXwrite, PREFIXdelete (default mdmem:)")
    http.add_argument("--rate", type=float, default=20.0, metavar="N",
                      help="requests a second per token, on average (default 20; 0: no limit)")
    http.add_argument("--burst", type=int, default=40, metavar="N", help="requests per token at once (default 40)")
    http.add_argument("--in-flight", type=int, default=16, metavar="N",
                      help="requests per token being answered at once; more are answered 429 (default 16)")
    http.add_argument("--max-body", type=int, default=1_000_000, metavar="BYTES",
                      help="largest request body (default 1000000)")
    http.add_argument("--body-timeout", type=float, default=10.0, metavar="SECONDS",
                      help="a request's headers, and then its body, must arrive within this (default 10)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    import logging

    from ..mcp.reexec import started_ns, taken_over

    # The MCP SDK gives the root logger a handler of its own (rich): the "mdmem" logger's
    # warnings, shown by the CLI's handler already, came out twice through it.
    mdmem_log = logging.getLogger("mdmem")
    if mdmem_log.handlers:
        mdmem_log.propagate = False
    # Set when this process replaced a server that saw an erasure (mcp/reexec.py): the
    # client's session, or the listening socket, it goes on with.
    handover = taken_over()
    # Before the repository is opened: an erasure ending from here on restarts the server.
    handover["since_ns"] = started_ns(handover)
    if ctx.args.http is not None:
        return run_http(ctx, handover)
    from ..mcp.server import parse_capabilities, serve

    allowed = parse_capabilities(ctx.args.allow)
    repo = ctx.repo()
    defer_index_writes(repo)
    label = ctx.args.agent if ctx.args.agent is not None else repo.user_config.agent_label
    if not serve(repo, ctx.user, allowed, label=label, handover=handover, since_ns=handover["since_ns"]):
        end_now()
    return 0


def defer_index_writes(repo) -> None:
    """A long-lived server: git's index written once after a burst of writes, not per write (a
    whole rewrite each time, 60-300 ms at 100k notes); a workspace's in each of its clones."""
    from ..storage.gitindex import INDEX_DELAY_SECONDS

    for each in repo.mounted_repos(repo.user) if is_workspace(repo) else [repo]:
        each.store.index_delay = INDEX_DELAY_SECONDS


def end_now() -> None:
    """The index catch-up is still running in native code: end the process without running
    interpreter shutdown under it (a kill -9 costs the cache nothing: it redoes the catch-up)."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def host_port(text: str) -> tuple[str, int]:
    from ..errors import BadInput

    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadInput(f"--http: {text!r}; give HOST:PORT like 127.0.0.1:8765 (port 0 picks a free one)")
    return host, int(port)


def token_file_path(ctx):
    from pathlib import Path

    from .context import user_config_path

    if ctx.args.tokens:
        return Path(ctx.cwd, ctx.args.tokens)
    return Path(ctx.cwd, user_config_path(ctx.env)).parent / "server-tokens.json"


def run_http(ctx, handover: dict) -> int:
    import logging
    import sys

    from ..auth.jwt_tokens import JwtSettings, JwtVerifier
    from ..auth.static_tokens import TokenFile, memory_path
    from ..errors import BadInput
    from ..mcp.heap import tune_malloc
    from ..mcp.http import MCP_PATH, HttpLimits, TokenVerifier, listen, listening_socket, serve_http

    args = ctx.args
    if args.as_user is not None or args.agent is not None or args.allow != "read,write":
        raise BadInput("serve --http: --as, --agent and --allow are for stdio; over HTTP each request's token "
                       "names the person, the agent and the capabilities (mdmem token add)")
    host, port = host_port(args.http)
    for name, value, low in (("--rate", args.rate, 0), ("--burst", args.burst, 1), ("--in-flight", args.in_flight, 1),
                             ("--max-body", args.max_body, 1),
                             ("--body-timeout", args.body_timeout, 0.001)):
        if not value >= low:
            raise BadInput(f"{name}: {value}; give a number of at least {low:g}")
    from urllib.parse import urlsplit

    if args.public_url is not None:
        parts = urlsplit(args.public_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise BadInput(f"--public-url: {args.public_url!r}; give the URL agents use for the MCP endpoint, "
                           "like https://memory.example.com/mcp")
    tune_malloc(ctx.env)  # before any thread: a process that lives for days (mcp/heap.py)
    repo = ctx.repo()
    defer_index_writes(repo)
    # The socket the replaced process listened on: connections waiting in it are answered.
    sock = listening_socket(handover.get("socket_fd")) or listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    # The endpoint is served at the public URL's path: the address bound says the same path.
    path = urlsplit(args.public_url).path if args.public_url else ""
    bound_url = f"http://{shown}:{sock.getsockname()[1]}{path or MCP_PATH}"
    public_url = args.public_url or bound_url
    try:
        memory_id = repo.memory_id()
    except BadInput as exc:
        # A folder this account may not write (a read-only server), a damaged id: JWTs and older
        # tokens that name no memory still work; a token added for a memory is refused (an id
        # nothing names), not taken by a server that cannot tell which memory it serves.
        unknown_id = f"mdmem: {exc}; until then tokens added for a memory are refused here (restart the server " \
                     "after mending it)"
        memory_id = ""
    else:
        unknown_id = ""
    tokens = TokenFile(token_file_path(ctx), memory_id=memory_id, memory=memory_path(repo.root))
    # Tokens this server takes (an unreadable file is named now): not revoked, made for this memory.
    active = [e for e in tokens.entries().values() if not e.revoked and e.serves(tokens.memory_id)]
    unbound = sum(1 for e in active if e.memory_id is None)
    jwt = None
    if args.jwt_jwks or args.jwt_issuer:
        if not (args.jwt_jwks and args.jwt_issuer):
            raise BadInput("--jwt-jwks and --jwt-issuer go together: the key set and the issuer its tokens name")
        from pathlib import Path

        jwks = args.jwt_jwks if "://" in args.jwt_jwks else str(Path(ctx.cwd, args.jwt_jwks))
        jwt = JwtVerifier(JwtSettings(jwks=jwks, issuer=args.jwt_issuer, audience=args.jwt_audience or public_url,
                                      person_claim=args.jwt_person_claim, scope_prefix=args.jwt_scope_prefix))
    verifier = TokenVerifier(repo, tokens=tokens, jwt=jwt, resource=public_url)
    limits = HttpLimits(rate_per_second=args.rate, burst=args.burst, max_body_bytes=args.max_body,
                        body_seconds=args.body_timeout, in_flight_per_token=args.in_flight)
    logging.getLogger("mdmem").setLevel(logging.WARNING)
    # The address bound, too, when agents are told another: with port 0 it is the only place the
    # port picked is written.
    where = f"listening on {bound_url}; " if public_url != bound_url else ""
    print(f"mdmem: serving {public_url} ({where}tokens: {tokens.path}"
          + (f"; JWTs from {args.jwt_issuer}" if jwt else "") + ")", file=sys.stderr, flush=True)
    if unknown_id:  # said first: until it is mended, a token added now is refused too
        print(unknown_id, file=sys.stderr, flush=True)
    elif not active and jwt is None:
        print(f"mdmem: no token for this memory in {tokens.path} yet: every request is refused until you add one "
              "(mdmem token add --person NAME --agent LABEL --allow read,write)", file=sys.stderr, flush=True)
    if unbound:
        print(f"mdmem: {unbound} token(s) in {tokens.path} name no memory (made before tokens named theirs): "
              "any memory this account serves takes them; revoke and add them again to bind each to one",
              file=sys.stderr, flush=True)
    # The metadata names who issues tokens: the IdP, else this server (its static tokens).
    issuer = args.jwt_issuer or public_url
    if not serve_http(repo, verifier, sock, public_url=public_url, issuer=issuer, host=host, limits=limits,
                      since_ns=handover["since_ns"]):
        end_now()
    return 0
