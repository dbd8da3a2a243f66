"""mdmem serve --as USER [--allow read,write,delete]: the MCP server on stdio."""
from __future__ import annotations

from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the MCP server on stdio for one identity")
    p.add_argument("--allow", default="read,write",
                   help="capabilities to grant: read, write, delete (default read,write: no forget)")
    p.add_argument("--agent", metavar="NAME",
                   help="the agent's name in provenance (agent:NAME); default: [agent] label in your "
                        "mdmem config, else the name the MCP client gives")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..mcp.server import parse_capabilities, serve

    allowed = parse_capabilities(ctx.args.allow)
    from ..storage.gitindex import INDEX_DELAY_SECONDS

    repo = ctx.repo()
    # A long-lived server: git's index written once after a burst of writes, not per write
    # (a whole rewrite each time, 60-300 ms at 100k notes).
    for each in repo.mounted_repos(ctx.user) if is_workspace(repo) else [repo]:
        each.store.index_delay = INDEX_DELAY_SECONDS
    label = ctx.args.agent if ctx.args.agent is not None else repo.user_config.agent_label
    if not serve(repo, ctx.user, allowed, label=label):
        # The index catch-up is still running in native code: end the process without running
        # interpreter shutdown under it (a kill -9 costs the cache nothing: it redoes the catch-up).
        import os
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
