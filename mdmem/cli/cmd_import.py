"""mdmem import FILE.jsonl | FOLDER [--from FORMAT] [--kind K --subject S ...] [--new-key] [--batch-size N]"""
from __future__ import annotations

from pathlib import Path

from ..errors import HELD_EXIT_CODE, PARTIAL_EXIT_CODE, BadInput, Refused
from .context import add_common

FORMATS = ("auto", "jsonl", "markdown", "claude-md", "claude-memory", "agents-md", "codex", "basic-memory",
           "obsidian", "letta", "mem0")


def register(sub) -> None:
    p = sub.add_parser("import", help="write many notes at once (JSONL, a folder of markdown files, or another "
                                      "tool's memory: --from), one commit per batch, through the write gate")
    p.add_argument("source", help="a .jsonl file (one note per line), a folder of .md files, or what --from names")
    p.add_argument("--from", dest="fmt", choices=FORMATS, default="auto",
                   help="the source's format: claude-md (a CLAUDE.md and its @imports), claude-memory (Claude "
                        "Code's auto memory folder: MEMORY.md + topic files), agents-md, codex (Codex memory files), "
                        "basic-memory / obsidian (a project or vault), letta (a memory repository), mem0 (an export "
                        "JSON); default: jsonl for a file, markdown for a folder")
    p.add_argument("--kind", help="for markdown files without one in their frontmatter")
    p.add_argument("--subject", help="for items that do not say (for --from formats: the subject they are about; "
                   "default project:<folder> or vault:<folder>)")
    p.add_argument("--scope", choices=["private", "team"], help="for items that do not say")
    p.add_argument("--team", help="for items that do not say")
    p.add_argument("--source-name", dest="source_name",
                   help="who wrote what --from reads (default by format: user for files people write, "
                        "agent:claude-code / agent:codex / agent:letta for an agent's memory, tool:mem0)")
    p.add_argument("--new-key", action="store_true",
                   help="items are new facts unless they say otherwise (else the key gate applies)")
    p.add_argument("--batch-size", type=int, default=1000, help="notes per commit (default 1000)")
    add_common(p)
    p.set_defaults(run=run)


def _name(path: Path) -> str:
    from ..interop.importer import name_part

    return name_part(path.resolve().parent.name if path.is_file() else path.resolve().name, "project")


def read_source(ctx, src: Path):
    """The items the source holds, by format (interop/), as an importer.Source."""
    from ..interop import agent_files, letta, mem0, vault
    from ..interop.importer import Source
    from ..ops.importing import read_jsonl, read_markdown_folder

    a = ctx.args
    fmt = a.fmt
    if fmt == "auto":
        fmt = "markdown" if src.is_dir() else "jsonl"
    if not src.exists() and not src.is_symlink():
        raise BadInput(f"{src}: no such file or folder; give what --from {fmt} reads")
    where = {k: v for k, v in (("scope", a.scope), ("team", a.team)) if v}
    if fmt in ("jsonl", "markdown"):
        defaults = {k: v for k, v in (("kind", a.kind), ("subject", a.subject), *where.items()) if v}
        if fmt == "markdown":
            if not src.is_dir():
                raise BadInput(f"{src}: not a folder; --from markdown reads a folder of .md files")
            loaded = read_markdown_folder(src, defaults)
        else:
            if not src.is_file():
                raise BadInput(f"{src}: not a file; --from jsonl reads a .jsonl file")
            loaded = read_jsonl(src)
            loaded.items = [{**defaults, **item} for item in loaded.items]
        return Source(loaded.items, loaded.refused)
    subject = a.subject
    if fmt in ("claude-md", "agents-md"):
        if not src.is_file():
            raise BadInput(f"{src}: not a file; --from {fmt} reads one CLAUDE.md / AGENTS.md")
        return agent_files.read_instructions(src, subject=subject or f"project:{_name(src)}",
                                             kind=a.kind or "procedure", source_name=a.source_name or "user",
                                             **where)
    if fmt in ("claude-memory", "codex"):
        agent = "agent:claude-code" if fmt == "claude-memory" else "agent:codex"
        return agent_files.read_memory_folder(src, subject=subject or f"project:{_name(src)}",
                                              source_name=a.source_name or agent, default_kind=a.kind or "fact",
                                              **where)
    if fmt in ("basic-memory", "obsidian"):
        return vault.read_vault(src, kinds=ctx.repo().contracts, default_kind=a.kind or "fact",
                                vault=subject.split(":", 1)[-1] if subject else None,
                                source_name=a.source_name or "user", **where)
    if fmt == "letta":
        return letta.read_letta(src, as_user=ctx.user, source_name=a.source_name or "agent:letta", **where)
    return mem0.read_mem0(src, subject=subject, source_name=a.source_name or "tool:mem0", **where)


def run(ctx) -> int:
    from ..interop.importer import run_import

    a = ctx.args
    if a.batch_size < 1:
        raise BadInput("--batch-size: must be at least 1")
    source = read_source(ctx, Path(ctx.cwd, a.source))
    repo = ctx.repo()
    outcome = run_import(repo, source, as_user=ctx.user, now=ctx.now, new_key=a.new_key, batch_size=a.batch_size,
                         progress=ctx.progress())
    d = outcome.to_dict()
    lines = [f"imported {len(d['committed'])} note(s) in {len(d['commits'])} commit(s); "
             f"{len(d['held'])} held for review, {len(d['refused'])} refused, {len(d['unchanged'])} unchanged"]
    lines += [f"  held    {h['line']}: {h['path']} ({h['reason']}) review id {h['review_id']}" for h in d["held"]]
    lines += [f"  refused {r['line']}: {r['reason']}" for r in d["refused"]]
    lines += [f"  skipped {s['line']}: {s['reason']}" for s in d["skipped"]]
    ctx.emit(d, "\n".join(lines))
    if not (d["held"] or d["refused"]):
        return 0
    if d["committed"] or (d["held"] and d["refused"]):
        # Some written or held, others held or refused (each listed). Held-and-refused is not 3:
        # 3 says nothing was written, and a script retrying on it made the same hold again.
        return PARTIAL_EXIT_CODE
    # Nothing written: the import as a whole was refused (3), or all of it waits for review (4).
    return Refused.exit_code if d["refused"] else HELD_EXIT_CODE
