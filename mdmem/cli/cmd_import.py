"""mdmem import FILE.jsonl | FOLDER [--kind K --subject S ...] [--new-key] [--batch-size N]"""
from __future__ import annotations

from pathlib import Path

from ..errors import HELD_EXIT_CODE, PARTIAL_EXIT_CODE, BadInput, Refused
from .context import add_common


def register(sub) -> None:
    p = sub.add_parser("import", help="write many notes at once (JSONL, or a folder of markdown files), "
                                      "one commit per batch, through the write gate")
    p.add_argument("source", help="a .jsonl file (one note per line) or a folder of .md files")
    p.add_argument("--kind", help="for markdown files without one in their frontmatter")
    p.add_argument("--subject", help="for markdown files without one in their frontmatter")
    p.add_argument("--scope", choices=["private", "team"], help="for items that do not say")
    p.add_argument("--team", help="for items that do not say")
    p.add_argument("--new-key", action="store_true",
                   help="items are new facts unless they say otherwise (else the key gate applies)")
    p.add_argument("--batch-size", type=int, default=1000, help="notes per commit (default 1000)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..ops.importing import read_jsonl, read_markdown_folder

    a = ctx.args
    src = Path(a.source)
    if a.batch_size < 1:
        raise BadInput("--batch-size: must be at least 1")
    defaults = {k: v for k, v in (("kind", a.kind), ("subject", a.subject), ("scope", a.scope),
                                  ("team", a.team)) if v}
    if src.is_dir():
        loaded = read_markdown_folder(src, defaults)
    elif src.is_file():
        loaded = read_jsonl(src)
        loaded.items = [{**defaults, **item} for item in loaded.items]
    else:
        raise BadInput(f"{src}: no such file or folder; give a .jsonl file or a folder of .md files")
    repo = ctx.repo()
    result = repo.remember_many(loaded.items, as_user=ctx.user, now=ctx.now, new_key=a.new_key,
                                batch_size=a.batch_size, progress=ctx.progress())
    # Lines are numbers (JSONL) or file names (a folder): in reading order either way.
    result.refused = sorted(loaded.refused + result.refused,
                            key=lambda r: (isinstance(r["line"], str), r["line"]))
    d = result.to_dict()
    lines = [f"imported {len(d['committed'])} note(s) in {len(d['commits'])} commit(s); "
             f"{len(d['held'])} held for review, {len(d['refused'])} refused"]
    lines += [f"  held    {h['line']}: {h['path']} ({h['reason']}) review id {h['review_id']}" for h in d["held"]]
    lines += [f"  refused {r['line']}: {r['reason']}" for r in d["refused"]]
    ctx.emit(d, "\n".join(lines))
    if not (d["held"] or d["refused"]):
        return 0
    if d["committed"] or (d["held"] and d["refused"]):
        # Some written or held, others held or refused (each listed). Held-and-refused is not 3:
        # 3 says nothing was written, and a script retrying on it made the same hold again.
        return PARTIAL_EXIT_CODE
    # Nothing written: the import as a whole was refused (3), or all of it waits for review (4).
    return Refused.exit_code if d["refused"] else HELD_EXIT_CODE
