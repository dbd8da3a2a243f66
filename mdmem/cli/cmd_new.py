"""mdmem new --kind K --subject S [--key K] [--scope team --team T] [--tag T]: open $EDITOR on a
scaffold with every required field; the note is then checked and left for you to commit."""
from __future__ import annotations

import os
import shlex
import sys

from ..errors import BadInput
from ..model.kinds import kinds_for_writers
from .context import add_common, is_workspace


def register(sub) -> None:
    p = sub.add_parser("new", help="write a new note in $EDITOR from a scaffold with every required field")
    p.add_argument("--kind", required=True, help=f"one of: {kinds_for_writers()}")
    p.add_argument("--subject", required=True, help="like service:billing or user:alice")
    p.add_argument("--key", help="keyed kinds need one, like refund.window")
    p.add_argument("--scope", default="private", choices=["private", "team"])
    p.add_argument("--team")
    p.add_argument("--tag", action="append", dest="tags", default=[], help="a tag for the frontmatter (repeatable)")
    add_common(p)
    p.set_defaults(run=run)


def run(ctx) -> int:
    from ..model.validate import note_problems
    from ..ops.scaffold import scaffold, unfinished

    a = ctx.args
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        raise BadInput("$EDITOR: not set; set EDITOR (like EDITOR=nano) to write a note with mdmem new")
    repo = ctx.repo()
    if is_workspace(repo):  # the note is made in the clone of its root (refused if not mounted)
        from ..ops.read import root_for

        repo = repo.repo_for(root_for(ctx.user, a.scope, a.team, None))  # type: ignore[attr-defined]
    path, text = scaffold(repo, as_user=ctx.user, kind=a.kind, subject=a.subject, key=a.key, scope=a.scope,
                          team=a.team, tags=a.tags, now=ctx.now)
    full = repo.root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text, encoding="utf-8")
    argv = [*shlex.split(editor), str(full)]
    # The person's editor, waited for (os.spawnvp: the CLI runs no git, so no subprocess here).
    code = os.spawnvp(os.P_WAIT, argv[0], argv)
    written = full.read_text(encoding="utf-8") if full.exists() else ""
    if code != 0 or not written.strip() or written == text:
        full.unlink(missing_ok=True)
        _prune(full.parent, repo.root)
        why = f"the editor exited with {code}" if code != 0 else "the scaffold was left as it was"
        ctx.emit({"path": path, "status": "discarded", "reason": why}, f"discarded {path}: {why}")
        return 0 if code == 0 else 1
    if unfinished(written):
        # The person typed something: never thrown away. The placeholder line must go first.
        print(f"{path}: text: the placeholder line is still there; delete it and the note is ready", file=sys.stderr)
        ctx.emit({"path": path, "status": "invalid", "problems": [{"field": "text", "reason": "placeholder left"}]},
                 f"{path} kept for you to finish (delete the placeholder line)")
        return BadInput.exit_code
    problems = note_problems(path, written.encode("utf-8"), repo.contracts)
    if problems:
        for field, reason in problems:
            print(f"{path}: {field}: {reason}", file=sys.stderr)
        ctx.emit({"path": path, "status": "invalid", "problems": [{"field": f, "reason": r} for f, r in problems]},
                 f"{path} kept for you to fix (`mdmem check` lists its problems)")
        return 2
    ctx.emit({"path": path, "status": "written"},
             f"wrote {path}; commit it with git (the pre-commit hook checks it and updates the MEMORY view)")
    return 0


def _prune(folder, root) -> None:
    root = root.resolve()
    folder = folder.resolve()
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
