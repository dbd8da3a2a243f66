"""mdmem recall QUERY [--kind K ...] [--subject S] [-k N] [--at TIME] [--history]"""
from __future__ import annotations

from functools import partial

from ..model.kinds import DEFAULT_CONTRACTS
from ..model.text import escape_controls
from .context import add_common

one_line = partial(escape_controls, newlines=False)


def register(sub) -> None:
    p = sub.add_parser("recall", help="find the live notes that answer a question")
    p.add_argument("query")
    p.add_argument("--kind", action="append", dest="kinds",
                   help=f"restrict to a kind (repeatable): {', '.join(DEFAULT_CONTRACTS)}")
    p.add_argument("--subject")
    p.add_argument("--key", help="with --subject and --kind: the one note under that key (an exact lookup)")
    p.add_argument("--tag", action="append", dest="tags",
                   help="only notes tagged so in their frontmatter (repeatable: all of them)")
    p.add_argument("-k", type=int, default=5, help="how many results (default 5)")
    p.add_argument("--at", help="the state as of a past time")
    p.add_argument("--history", action="store_true", help="include superseded versions (what was it before?)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    repo = ctx.repo()
    hits = repo.recall(a.query, as_user=ctx.user, k=a.k, kinds=a.kinds, subject=a.subject, key=a.key,
                       at=a.at, include_history=a.history, now=ctx.now, tags=a.tags)
    lines = []
    for h in hits:
        tag = ("" if h.current else " (past)") + (f" (UNTRUSTED: {h.untrusted})" if h.untrusted else "")
        lines.append(f"{h.score:.4f}  {h.kind:<9} {one_line(h.path)}{tag}\n          {h.text.splitlines()[0]}")
    broken = repo.broken(as_user=ctx.user)
    if ctx.json:
        ctx.emit({"hits": [h.to_dict() for h in hits], "broken": broken})
    else:
        ctx.emit(None, "\n".join(lines) or "(nothing above the score floor)")
        for path, reason in broken.items():
            # A committed file name may hold a newline: one warning is one line (as in check).
            print(f"warning: {one_line(path)}: {one_line(reason)} (kept out of the index until fixed)")
    return 0
