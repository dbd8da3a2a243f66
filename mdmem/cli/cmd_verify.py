"""mdmem verify: notes whose latest commit no permitted writer made, or whose frontmatter
disagrees with their path, an mdmem.toml last changed by someone who is not a config
admin, and committed MEMORY views that differ from a fresh render (a view edited with
`git commit --no-verify` would tell agents what no note says) — exit 3 when any is found."""
from __future__ import annotations

from ..model.layout import root_of
from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("verify", help="check who committed each note (and signatures with require_signed)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..errors import Refused

    repo = ctx.repo()
    user = ctx.user
    if is_workspace(repo):
        merged = repo.verify(as_user=user)
        flags, stale = merged.get("untrusted", []), repo.stale_views()
        lines = [f"UNTRUSTED {f['path']}: {f['detail']} (commit {f['commit'][:10]})" for f in flags]
        lines += [f"STALE VIEW {v}" for v in stale]
        ctx.emit({"untrusted": flags, "stale_views": stale},
                 "\n".join(lines) or "every note you may read was committed by a permitted writer")
        return Refused.exit_code if flags or stale else 0
    report = repo.verify(as_user=user)  # only roots the user may read: verify is no oracle for the others
    flags = report["untrusted"]
    readable = set(repo.access.readable_roots(user))
    # A view that is not a fresh render of its notes tells agents what no note says: judged like
    # a planted note, with who last changed it.
    forged = [v for v in repo.forged_views() if "/" not in v["path"] or root_of(v["path"]) in readable]
    stale = [v["path"] for v in forged]
    flags = flags + [{"path": v["path"], "commit": v["commit"], "author": v["author"], "detail": v["detail"]}
                     for v in forged]
    out = {"head": report["head"], "untrusted": flags, "stale_views": stale}
    lines = [f"UNTRUSTED {f['path']}: {f['detail']} (commit {f['commit'][:10]})" for f in flags]
    if stale:
        lines.append("`mdmem render` replaces the forged views with a fresh render")
    ctx.emit(out, "\n".join(lines) or "every note you may read was committed by a permitted writer")
    return Refused.exit_code if flags or stale else 0
