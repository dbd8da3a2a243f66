"""The git operations the repo's hooks need, run inside a git hook: the staged tree, what
a commit touches, staging files, the hook config. The git binary is used (not libgit2)
because git hands a hook its own index through GIT_INDEX_FILE, which only git's children
honour; the caller passes the environment (the library never reads it)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2

from ..errors import GitFailed

HOOKS_CONFIG = "core.hooksPath"


def _git(root: Path, *args: str, input: bytes | None = None, env: dict | None = None, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], input=input, capture_output=True, env=env)
    if check and proc.returncode != 0:
        raise GitFailed(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout.decode("utf-8", errors="replace")


def toplevel(start: Path | None = None) -> Path:
    out = subprocess.run(["git", "-C", str(start or "."), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    return Path(out.stdout.strip() or (start or "."))


def staged_file(root: Path, path: str, env: dict | None = None) -> str:
    """A file as staged for the commit being made ('' if not staged)."""
    return _git(root, "show", f":{path}", env=env, check=False)


def staged_tree(root: Path, env: dict | None = None) -> str:
    """The tree the commit being made will have (written to the object store)."""
    return _git(root, "write-tree", env=env).strip()


def head_commit(root: Path) -> str | None:
    return _git(root, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).strip() or None


def orig_head(root: Path) -> str | None:
    return _git(root, "rev-parse", "-q", "--verify", "ORIG_HEAD", check=False).strip() or None


def touched_paths(root: Path, head: str | None, tree: str, env: dict | None = None) -> list[str]:
    """Paths the staged tree changes against HEAD (every path when there is no HEAD yet)."""
    if head:
        out = _git(root, "diff-index", "--cached", "--name-only", "--no-renames", "-z", head, env=env)
    else:
        out = _git(root, "ls-tree", "-r", "--name-only", "-z", tree, env=env)
    return [p for p in out.split("\0") if p]


def stage(root: Path, changes: dict[str, bytes | None], env: dict | None = None) -> None:
    """Put ``changes`` (path -> bytes, None: remove) into the commit being made and the work
    tree. ``git commit PATH`` commits a temporary index and writes the real one (locked as
    index.lock) afterwards: a change staged only in the first would show as reverted, so it
    goes into both."""
    repo = pygit2.Repository(str(root))
    lines = []
    for path, data in sorted(changes.items()):
        lines.append(f"0 {'0' * 40}\t{path}" if data is None else f"100644 {repo.create_blob(data)}\t{path}")
    info = ("\n".join(lines) + "\n").encode()
    _git(root, "update-index", "--index-info", input=info, env=env)
    index_file = (env or {}).get("GIT_INDEX_FILE")
    if index_file and Path(index_file).name.startswith("next-index"):
        real = Path(repo.path) / "index.lock"
        if real.exists():
            _git(root, "update-index", "--index-info", input=info, env={**(env or {}), "GIT_INDEX_FILE": str(real)})
    for path, data in changes.items():
        full = Path(root) / path
        if data is None:
            full.unlink(missing_ok=True)
        else:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(data)


def follow_head(root: Path, owed: dict[str, str | None], env: dict | None = None) -> list[str]:
    """In the index being committed, put HEAD's entry for each path mdmem committed whose
    entry is still the blob from before that commit (``owed``: path -> that blob, None if
    the path was new). A long-lived mdmem process writes git's index a moment after its
    commits (GitStore.index_delay); a plain `git commit` in that moment would otherwise
    commit the old entry: a revert of mdmem's note. An entry the person staged differently
    is theirs and stays. Returns the paths set."""
    head = head_commit(root)
    if not head or not owed:
        return []
    paths = sorted(owed)
    staged = {}
    for line in _git(root, "ls-files", "-s", "-z", "--", *paths, env=env).split("\0"):
        if "\t" in line:
            meta, path = line.split("\t", 1)
            staged[path] = meta.split()[1]
    in_head = {}
    for line in _git(root, "ls-tree", "-r", "-z", head, "--", *paths).split("\0"):
        if "\t" in line:
            meta, path = line.split("\t", 1)
            mode, _, blob = meta.split()
            in_head[path] = (mode, blob)
    lines, fixed = [], []
    for path in paths:
        if path not in owed or staged.get(path) != owed[path] or staged.get(path) == in_head.get(path, (0, None))[1]:
            continue
        mode, blob = in_head.get(path, ("0", "0" * 40))
        lines.append(f"{mode} {blob}\t{path}")
        fixed.append(path)
    if lines:
        _git(root, "update-index", "--index-info", input=("\n".join(lines) + "\n").encode(), env=env)
    return fixed


def user_email(root: Path) -> str:
    return _git(root, "config", "user.email", check=False).strip()


def author_email(root: Path, env: dict | None = None) -> str:
    """The e-mail the commit being made is authored as: git's own answer, which honours
    GIT_AUTHOR_EMAIL and ``git -c user.email=...`` as well as the config."""
    ident = _git(root, "var", "GIT_AUTHOR_IDENT", env=env, check=False)
    return ident.partition("<")[2].partition(">")[0].strip() or user_email(root)


def hooks_dir(root: Path) -> Path:
    """The hooks folder git runs by default: ``hooks`` in the common git dir, which linked
    worktrees share (their own ``.git`` is a file naming a folder under ``worktrees/``)."""
    gitdir = Path(root) / ".git"
    if gitdir.is_dir():
        return gitdir.resolve() / "hooks"
    out = _git(root, "rev-parse", "--git-common-dir").strip()
    common = Path(out) if Path(out).is_absolute() else Path(root) / out
    return common.resolve() / "hooks"


def local_config(root: Path) -> pygit2.Config:
    return pygit2.Repository(str(root)).config


def parents_of_head(root: Path) -> list[str]:
    repo = pygit2.Repository(str(root))
    return [str(p) for p in repo.head.peel(pygit2.Commit).parent_ids]
