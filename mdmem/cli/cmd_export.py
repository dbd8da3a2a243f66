"""mdmem export --to FORMAT OUT [--root ROOT] [--history]: what you may read, in another tool's format."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import BadInput
from .context import add_common

FORMATS = ("claude-md", "agents-md", "basic-memory", "obsidian", "letta", "jsonl")


def register(sub) -> None:
    p = sub.add_parser("export", help="write the notes you may read in another tool's format: a scope's view as a "
                                      "CLAUDE.md / AGENTS.md section, a basic-memory project or Obsidian vault, a "
                                      "Letta memory repository, or JSONL (`mdmem import` reads it back)")
    p.add_argument("out", help="the file (claude-md, agents-md, jsonl; '-' for stdout with jsonl) or folder to write")
    p.add_argument("--to", dest="fmt", choices=FORMATS, required=True)
    p.add_argument("--root", help="one scope root (team/<team> or private/<you>); claude-md and agents-md: "
                   "default your private root")
    p.add_argument("--subject", help="basic-memory / obsidian: only notes about this subject and below it")
    p.add_argument("--history", action="store_true", help="jsonl: each note's earlier versions too, oldest first")
    p.add_argument("--max-chars", type=int, default=None,
                   help="claude-md / agents-md: the section's budget (default 16000); beyond it the section says "
                        "what it left out")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..interop import agent_files, jsonl, letta, vault

    a = ctx.args
    repo = ctx.repo()
    out = Path(ctx.cwd, a.out)
    if a.fmt in ("claude-md", "agents-md"):
        root = (a.root or f"private/{ctx.user}").rstrip("/")
        budget = a.max_chars or agent_files.AGENTS_BUDGET
        if budget < 1000:
            raise BadInput("--max-chars: at least 1000 (the section says what it left out within it)")
        d = agent_files.export_section(repo, out, as_user=ctx.user, root=root, name=f"{root} memory",
                                       budget=budget, now=ctx.now)
        ctx.emit(d, f"wrote {root}'s view ({d['characters']} characters"
                    f"{', some left out and said so' if d['cut'] else ''}) into {out}")
        return 0
    if a.fmt == "jsonl":
        lines = jsonl.export_lines(repo, as_user=ctx.user, history=a.history, now=ctx.now)
        if a.out == "-":
            for line in lines:
                sys.stdout.write(line + "\n")
            return 0
        if out.is_symlink():
            raise BadInput(f"{out}: a symbolic link; export does not write through it")
        tmp = out.with_name(f".{out.name}.mdmem-tmp")
        n = 0
        with open(tmp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
                n += 1
        tmp.replace(out)
        ctx.emit({"file": str(out), "lines": n}, f"wrote {n} line(s) to {out}")
        return 0
    if a.fmt == "letta":
        written = letta.export_letta(repo, out, as_user=ctx.user, root=a.root, now=ctx.now)
    else:
        written = vault.export_vault(repo, out, as_user=ctx.user, root=a.root, subject_prefix=a.subject,
                                     now=ctx.now)
    ctx.emit({"folder": str(out), "files": written}, f"wrote {len(written)} file(s) into {out}")
    return 0
