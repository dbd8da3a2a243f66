"""mdmem token add/list/revoke: the static bearer tokens of `mdmem serve --http`.

The file holds a salted hash of each token, never the token: `add` prints the token once."""
from __future__ import annotations

import json

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("token", help="manage the bearer tokens of the HTTP server (add, list, revoke)")
    ops = p.add_subparsers(dest="token_op", metavar="OP", required=True)
    add = ops.add_parser("add", help="make a token for one person and agent; prints it once")
    add.add_argument("--person", required=True, help="who the token acts for (declared in the memory)")
    add.add_argument("--agent", required=True, help="the agent's label: its writes are recorded as agent:LABEL")
    add.add_argument("--allow", default="read", help="capabilities: read, write, delete (default read)")
    add.add_argument("--expires", metavar="TIME", help="when it stops working (ISO time, like 2027-01-31T00:00:00Z)")
    lst = ops.add_parser("list", help="the tokens (never their secrets)")
    rev = ops.add_parser("revoke", help="stop a token; the running server refuses it from its next request")
    rev.add_argument("id", help="the token's id (mdmem token list)")
    for q in (add, lst, rev):
        q.add_argument("--tokens", metavar="FILE",
                       help="the token file (default server-tokens.json beside your mdmem config)")
        add_common(q, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..auth.principal import parse_capabilities
    from ..auth.static_tokens import TokenFile, memory_path
    from ..model.clock import parse_time, resolve_now
    from .cmd_serve import token_file_path

    args = ctx.args
    tokens = TokenFile(token_file_path(ctx))
    if args.token_op == "add":
        caps = parse_capabilities(args.allow)
        # The person must be one the memory declares (the server checks again on every request),
        # and the token is for this memory's server only (one token file serves them all).
        repo = ctx.repo()
        repo.check_user(args.person, given_by="--person")
        entry, secret = tokens.add(args.person, args.agent, caps, expires=args.expires, memory_id=repo.memory_id(),
                                   memory=memory_path(repo.root), now=ctx.now)
        if ctx.json:
            print(json.dumps({**entry.public(), "token": secret, "file": str(tokens.path)}, indent=2))
        else:
            print(secret)
            import sys
            print(f"mdmem: token {entry.id} for {entry.person} (agent {entry.agent}; "
                  f"{', '.join(entry.capabilities)}; the memory at {entry.memory}) added to {tokens.path}; "
                  "this is the only time it is shown", file=sys.stderr)
        return 0
    if args.token_op == "list":
        rows = [e.public() for e in tokens.entries().values()]
        if ctx.json:
            print(json.dumps({"file": str(tokens.path), "tokens": rows}, indent=2))
        else:
            if not rows:  # said on stderr: stdout stays the list (empty), for scripts
                import sys
                print(f"mdmem: no tokens in {tokens.path} (mdmem token add --person NAME --agent LABEL "
                      "--allow read,write)", file=sys.stderr)
            now = resolve_now(ctx.now)
            for r in rows:
                if r["revoked"]:
                    state = f"revoked {r['revoked']}"
                elif r["expires"]:
                    state = f"{'expired' if parse_time(r['expires'], field='expires') <= now else 'expires'} " \
                            f"{r['expires']}"
                else:
                    state = "active"
                memory = f"memory {r['memory_id']} (at {r['memory']})" if r["memory_id"] \
                    else "any memory (made before tokens named theirs)"
                print(f"{r['id']}  {r['person']}  agent:{r['agent']}  {','.join(r['capabilities'])}  {state}  "
                      f"{memory}")
        return 0
    entry = tokens.revoke(args.id, now=ctx.now)
    if ctx.json:
        print(json.dumps(entry.public(), indent=2))
    else:
        print(f"token {entry.id} ({entry.person}, agent {entry.agent}) revoked at {entry.revoked}")
    return 0
