"""mdmem demo [--keep] [--path P]: a small team repo, walked through the lifecycle, then removed
(unless --keep)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import BadInput
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("demo", help="build a small team repo, walk the lifecycle, remove it (unless --keep)")
    p.add_argument("--path", help="where to build it (default: a new temporary folder); must not exist yet")
    p.add_argument("--keep", action="store_true", help="keep the repo afterwards to explore it")
    add_common(p, identity=False, repo=False)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from .demo_script import walk

    if ctx.args.path:
        path = Path(ctx.args.path).absolute()
        if path.exists():
            raise BadInput(f"--path: {path} exists; the demo builds (and then removes) a new folder")
        made = path
    else:
        made = Path(tempfile.mkdtemp(prefix="mdmem-demo-"))
        path = made / "memory"
    try:
        steps = walk(path)
    finally:
        if not ctx.args.keep:
            shutil.rmtree(made, ignore_errors=True)
    where = str(path) if ctx.args.keep else None
    if ctx.json:
        ctx.emit({"path": where, "kept": bool(ctx.args.keep), "steps": steps})
    else:
        for step in steps:
            print(f"\n== {step['title']}")
            print(step["output"])
        if ctx.args.keep:
            print(f"\nThe repo is at {path}; try: cd {path} && git log --stat")
        else:
            print("\nThe demo repo was removed; run `mdmem demo --keep` to keep one and explore it.")
    return 0
