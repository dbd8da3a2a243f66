"""mdmem's git hooks as git runs them: installed hooks say when git will not run them, templates from
a CRLF checkout still give LF hooks, the pre-commit hook names a symlinked note as a symlink and
leaves fresh views after a membership change, and a write beside git's own index lock leaves nothing
a person's next commit turns into a deletion."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV, T0, bob_leaves_payments, git, run_cli, team_fact

from mdmem import MemoryRepo


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


# `mdmem hooks install` said "installed" (exit 0) when a global core.hooksPath meant git
# would never run the hooks.
def test_hooks_install_says_when_git_will_not_run_them(billing_team, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\thooksPath = ~/elsewhere-hooks\n")
    env = {**ENV, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1"}
    r = run_cli("hooks", "install", "--as", "bob", env=env, cwd=billing_team.root)
    assert r.returncode == 5 and "core.hooksPath" in r.stderr and "will not run" in r.stdout, (r.stdout, r.stderr)
    r = run_cli("recall", "deploys", "--as", "bob", env=env, cwd=billing_team.root)
    assert "core.hooksPath" in r.stderr
    r = run_cli("hooks", "install", "--as", "bob", env=ENV, cwd=billing_team.root)
    assert r.returncode == 0 and "core.hooksPath" not in r.stderr, r.stderr


# The pre-commit hook called a symlinked note "frontmatter: missing".
def test_the_hook_calls_a_symlinked_note_a_symlink(billing_team):
    import os

    root = billing_team.root
    assert run_cli("hooks", "install", "--as", "bob", env=ENV, cwd=root).returncode == 0
    link = root / "team/payments/service/billing/fact/link.md"
    os.symlink("deploy.window.md", link)
    git(root, "add", str(link))
    r = git(root, "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "link", check=False)
    assert r.returncode != 0 and "is a symbolic link" in r.stderr and "frontmatter" not in r.stderr, r.stderr


def test_the_pre_commit_hooks_views_are_fresh_after_a_membership_change(tmp_path):
    """The hook regenerates team/payments/MEMORY.md in the admin's commit under the rules the commit
    is judged by, so the committed view is fresh (README: "A committed view always equals a fresh
    render of its commit")."""
    root = bob_leaves_payments(tmp_path)
    r = run_cli("check", "--repo", str(root))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("how", [["commit", "-qm", "mine", "--allow-empty"], ["commit", "-qam", "mine", "--allow-empty"]])
def test_a_write_beside_gits_index_lock_leaves_nothing_a_persons_next_commit_turns_into_a_deletion(tmp_path, how):
    """A write while `.git/index.lock` exists (git's own lock, a person's git mid-operation) commits
    but cannot stage its new note: git's index lacks it and `git status` shows a staged deletion
    until mdmem's next call. The person removes the lock and commits with git: the pre-commit hook
    stages what mdmem committed, so their commit never deletes the note."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob"]}, now=T0, as_user="alice")
    lock = repo.root / ".git" / "index.lock"
    lock.write_bytes(b"")
    note = "team/payments/service/billing/fact/deploy.window.md"
    team_fact(repo, "Billing deploys on Tuesdays")
    repo.close()
    assert lock.exists()  # a young lock is git's: mdmem never removes it
    lock.unlink()
    git(repo.root, "-c", "user.name=Alice", "-c", "user.email=alice@mdmem.invalid", *how)
    assert note in git(repo.root, "ls-tree", "-r", "--name-only", "HEAD").stdout.split()
    assert "Tuesdays" in git(repo.root, "show", f"HEAD:{note}").stdout
    assert git(repo.root, "status", "--porcelain", "--", note).stdout == ""
