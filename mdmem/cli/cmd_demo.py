"""mdmem demo: a small team repo in a temporary folder, walked through the lifecycle."""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import Refused
from ..repo import MemoryRepo
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("demo", help="build a small team repo and walk the lifecycle")
    p.add_argument("--path", help="where to build it (default: a new temporary folder)")
    add_common(p, identity=False, repo=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from .demo_script import walk

    path = Path(ctx.args.path) if ctx.args.path else Path(tempfile.mkdtemp(prefix="mdmem-demo-")) / "memory"
    steps = walk(path)
    if ctx.json:
        ctx.emit({"path": str(path), "steps": steps})
    else:
        for step in steps:
            print(f"\n== {step['title']}")
            print(step["output"])
        print(f"\nThe repo is at {path}; try: cd {path} && git log --stat")
    return 0


__all__ = ["run", "register", "MemoryRepo", "Refused"]
