"""mdmem watch [--commit] [--for SECONDS]: reindex notes as people save them."""
from __future__ import annotations

import json
import sys
import time

from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("watch", help="validate and reindex notes as people save them")
    p.add_argument("--commit", action="store_true", help="also commit valid human edits")
    p.add_argument("--for", dest="seconds", type=float, help="stop after this many seconds")
    add_common(p, identity=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    # Imported here: every CLI call builds the parser from every command module, and
    # watchdog is ~13 modules that only this command needs (measured with -X importtime).
    from ..watch import Watcher

    def show(event):
        if ctx.json:
            print(json.dumps(event.to_dict()), flush=True)
        else:
            stream = sys.stderr if event.status in ("invalid", "error") else sys.stdout
            print(f"{event.status:<9} {event.path} {event.detail}".rstrip(), file=stream, flush=True)

    repo = ctx.repo()
    # A workspace is watched mount by mount: each clone is its own repository and index.
    repos = [repo.repo_for(r) for r in sorted(repo.file.mounts)] if is_workspace(repo) else [repo]  # type: ignore[attr-defined]
    watchers = [Watcher(r, show, commit=ctx.args.commit).start() for r in repos]
    for watcher in watchers:
        if not ctx.json:
            print(f"watching {watcher.root} (Ctrl-C to stop)", flush=True)
        else:
            print(json.dumps({"status": "watching", "path": str(watcher.root)}), flush=True)
    try:
        deadline = time.monotonic() + ctx.args.seconds if ctx.args.seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        for watcher in watchers:
            watcher.stop()
    return 0
