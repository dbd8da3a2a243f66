"""mdmem serve --as USER [--allow read,write,delete]: the MCP server on stdio."""
from __future__ import annotations

from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the MCP server on stdio for one identity")
    p.add_argument("--allow", default="read,write",
                   help="capabilities to grant: read, write, delete (default read,write: no forget)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..mcp.server import parse_capabilities, serve

    allowed = parse_capabilities(ctx.args.allow)
    serve(ctx.repo(), ctx.user, allowed)
    return 0
