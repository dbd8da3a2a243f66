"""mdmem prove-gone --needle TEXT ... [--subject S] [--owner U] [--allow-path P]"""
from __future__ import annotations

from ..errors import Incomplete, ProofFailed
from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("prove-gone", help="check every place mdmem controls for erased text")
    p.add_argument("--needle", action="append", required=True, dest="needles")
    p.add_argument("--subject")
    p.add_argument("--owner")
    p.add_argument("--allow-path", action="append", dest="allow_paths", default=[],
                   help="a reviewed note that may keep mentioning the person (from the mention scan)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    a = ctx.args
    if is_workspace(ctx.repo()):
        proof = ctx.repo().prove_gone(a.needles, as_user=ctx.user, subject=a.subject, owner=a.owner,
                                      allow_paths=a.allow_paths)
        lines = []
        for root, one in proof.proofs.items():
            lines.append(f"{root}: {one.verdict}")
            report = one.to_dict()
            lines += [f"  needle {i + 1}: FAIL in {name}" for i, item in enumerate(report["needles"])
                      for name, check in item["checks"].items() if not check["passed"]]
            lines += [f"  FAIL {name}: {', '.join(check['where'][:5])}" for name, check in report["scope"].items()
                      if not check["passed"]]
        lines += [f"{root}: NOT READ: {why}" for root, why in proof.unread.items()]
        lines += [f"workspace: FAIL: {where}" for where in proof.workspace_files]
        lines.append(f"verdict: {proof.verdict}")
        ctx.emit(proof.to_dict(), "\n".join(lines))
        return _exit_code(proof.verdict)
    report = ctx.repo().prove_gone(a.needles, as_user=ctx.user, subject=a.subject, owner=a.owner,
                                   allow_paths=a.allow_paths).to_dict()
    lines = []
    for i, item in enumerate(report["needles"]):
        lines.append(f"needle {i + 1}: {item.get('verdict', 'PASS' if item['passed'] else 'FAIL')}")
        for name, check in item["checks"].items():
            lines.append(f"  {'ok  ' if check['passed'] else 'FAIL'} {name}" +
                         (f": {', '.join(check['where'][:5])}" if check["where"] else ""))
        if item["nearest"]:
            lines.append(f"  nearest remaining note (for review): {item['nearest']['path']} "
                         f"(cosine {item['nearest']['cosine']})")
    for name, check in report["scope"].items():
        lines.append(f"{'ok  ' if check['passed'] else 'FAIL'} {name}")
    if report.get("not_checked"):
        nc = report["not_checked"]
        lines.append(f"not checked (roots you may not read): {len(nc['roots'])} root(s), "
                     f"{nc['git_objects']} git object(s); git metadata {nc['git_metadata']}")
    lines.append("cannot vouch for:")
    lines += [f"  - {x}" for x in report["cannot_reach"]]
    if report["verdict"] == "INCOMPLETE":
        who = (f"an eraser ({', '.join(report['complete_by'])}) can complete it: the same prove-gone --as "
               f"{report['complete_by'][0]}" if report["complete_by"]
               else "nobody can yet: a config admin names an eraser in mdmem.toml ([roles] erasers), who proves it")
        lines.append("INCOMPLETE: this proof could not read every place the text could be (roots, git files or caches "
                     f"you may not read), so it says nothing of them; {who}")
    else:
        lines.append(report["verdict"])
    ctx.emit(report, "\n".join(lines))
    return _exit_code(report["verdict"])


def _exit_code(verdict: str) -> int:
    """PASS 0; FAIL 7 (a needle found); INCOMPLETE 11 (not everywhere read: no verdict either way)."""
    return {"PASS": 0, "FAIL": ProofFailed.exit_code}.get(verdict, Incomplete.exit_code)
