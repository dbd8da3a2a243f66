"""Attack 7 (session 7 changes): RootEntries' in-place patch/undo, GitStore.locked's thread
lock, the MiniLM graph cache check file, refresh_stat_if_moved, templates via pkgutil.

Every test here was written to FAIL on main@ad6f80f; notes/attack7.md says why each matters.
Real git repos in tmp_path and real subprocesses; where a race needs one exact moment, a real
`git commit` (with mdmem's own pre-commit hook) is run at that moment by wrapping the call
that marks it -- the work still goes through the real store."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import T0, team_fact

from mdmem import MemoryRepo

ROOT = "team/payments"
BIN = str(Path(sys.executable).parent)


def person_commits(repo_root: Path, key: str, text: str, *, ident: str = "01M8QDE4Q4HC4RW10BA82MM999") -> None:
    """A person adds a team note with plain git (mdmem's pre-commit hook regenerates the view),
    as bob, a permitted writer: the note belongs in the team view."""
    src = repo_root / ROOT / "service/billing/fact/deploy.window.md"
    data = src.read_text()
    first_id = data.split("id: ", 1)[1].split("\n", 1)[0]
    data = data.replace("key: deploy.window", f"key: {key}").replace(first_id, ident)
    data = data.rsplit("---\n", 1)[0] + f"---\n\n{text}\n"
    dst = repo_root / ROOT / f"service/billing/fact/{key}.md"
    dst.write_text(data)
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    for args in (["add", str(dst.relative_to(repo_root))],
                 ["-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-q", "-m", f"hand {key}"]):
        r = subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def stale_views(root: Path) -> list[str]:
    """stale_views as a new process sees it (no kept per-root state)."""
    other = MemoryRepo.open(root)
    try:
        return other.stale_views()
    finally:
        other.close()


# --- 1. RootEntries / commit_changes: a person's git commit landing during an mdmem write --------

def write_while_a_person_commits(repo, text: str) -> bool:
    """A remember during which a person's `git commit` of ``text`` (key hand.key) lands right
    before mdmem's own commit; whether the person's commit was made."""
    store = repo.store
    original = store.commit
    fired = []

    def commit_after_a_person(*args, **kwargs):
        if not fired:
            fired.append(1)
            person_commits(repo.root, "hand.key", text)
        return original(*args, **kwargs)

    store.commit = commit_after_a_person
    try:
        team_fact(repo, "Rollbacks need a second reviewer", key="rollback.review", new_key=True, now=T0)
    finally:
        del store.commit
    return bool(fired)


# --- 5. templates through pkgutil.get_data: line endings --------------------------------------

def test_templates_from_a_crlf_checkout_still_give_lf_hooks(tmp_path):
    """mdmem installed from a checkout with CRLF line endings (git's core.autocrlf=true on
    Windows, a zip of it): the source repo has no .gitattributes pinning eol. Before b2e609a
    read_template used read_text (universal newlines: LF); pkgutil.get_data(...).decode() keeps
    the CR, so `mdmem init` installs a pre-commit hook whose shebang is "#!/bin/sh\\r" and every
    git commit in the memory repo fails to run it. Expected: the same text as before (LF)."""
    import shutil

    import mdmem_template

    pkg = tmp_path / "site" / "mdmem_template"
    shutil.copytree(Path(mdmem_template.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for f in pkg.rglob("*"):
        if f.is_file() and f.suffix != ".py":
            f.write_bytes(f.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    mem = tmp_path / "mem"
    code = (f"import sys; sys.path.insert(0, {str(pkg.parent)!r})\n"
            "import mdmem_template; assert mdmem_template.__file__.startswith(sys.path[0]), mdmem_template.__file__\n"
            "from mdmem import MemoryRepo\n"
            f"MemoryRepo.init({str(mem)!r}, teams={{'payments': ['bob']}}, now='2026-10-01T09:00:00Z', as_user='mdmem')\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    hook = (mem / ".git" / "hooks" / "pre-commit").read_bytes()
    assert hook.startswith(b"#!/bin/sh\n") and b"\r" not in hook, hook[:40]
    assert b"\r" not in (mem / ".gitattributes").read_bytes()


# --- 3. the MiniLM graph cache's check file ----------------------------------------------------


# --- 2. GitStore.locked's thread lock -----------------------------------------------------------

