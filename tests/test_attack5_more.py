"""The rest of the fifth attack's findings (notes/attack5.md), each a test that failed before its fix."""
from __future__ import annotations


import pytest

from conftest import T0, git, run_cli
from mdmem import MemoryRepo

ENV = {"MDMEM_EMBEDDER": "none"}
DEPLOY = "team/payments/service/billing/fact/deploy.window.md"


@pytest.fixture
def billing_team(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           erasers=["dana"], now=T0, as_user="alice", embedder="none")
    repo.remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                  key="deploy.window", scope="team", team="payments", now=T0)
    return repo


def shared_remote(root, tmp_path, who: str):
    """A bare remote beside the repo, which ``who`` syncs to first."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    assert run_cli("sync", "--push", "--as", who, env=ENV, cwd=root).returncode == 0
    return remote


# A20. forget with a relative --repo (or MDMEM_REPO) failed half-way (exit 9, "journal
# unreadable"), and so did `demo --path <relative>`.
def test_relative_repo_paths_work_for_forget_and_demo(billing_team):
    root = billing_team.root
    billing_team.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                  key="phone", now=T0)
    stash_file = root / "private/alice/user/alice/profile/phone.md"
    with stash_file.open("a") as f:
        f.write("wip\n")
    git(root, "stash", "-q")
    r = run_cli("forget", "--repo", root.name, "--owner", "alice", "--subject", "user:alice", "--as", "dana",
                env=ENV, cwd=root.parent)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "555-0199" not in git(root, "log", "-p", "--all").stdout
    assert not (root / ".git" / "mdmem-erasure").exists()
    assert "WIP on" in git(root, "stash", "list").stdout  # the stash came back with its message
    r = run_cli("sweep", "--as", "bob", env={**ENV, "MDMEM_REPO": root.name}, cwd=root.parent)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = run_cli("demo", "--path", "d3", "--json", env=ENV, cwd=root.parent)
    assert r.returncode == 0, (r.stdout, r.stderr)


# A18.2. Note paths worked only relative to the repo root: ./team/..., an absolute path, or a
# path relative to the folder one is in all answered "no such note visible".
def test_note_paths_as_a_person_types_them(billing_team):
    root = billing_team.root
    inside = root / "team/payments"
    for given, cwd in ((f"./{DEPLOY}", root), (str(root / DEPLOY), root), ("service/billing/fact/deploy.window.md", inside),
                       ("../service/billing/fact/deploy.window.md", inside / "service")):
        for cmd in ("show", "get", "history"):
            r = run_cli(cmd, given, "--as", "bob", env=ENV, cwd=cwd)
            assert r.returncode == 0 and "deploy" in r.stdout, (cmd, given, r.stderr)
    # Normalising never widens what a person may see: carol's answer stays "not visible".
    for given in (f"./{DEPLOY}", str(root / DEPLOY), "./team/search/../payments/service/billing/fact/deploy.window.md"):
        r = run_cli("get", given, "--as", "carol", env=ENV, cwd=root)
        assert r.returncode == 6, (given, r.stdout, r.stderr)
    r = run_cli("retire", f"./{DEPLOY}", "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 0, r.stderr


