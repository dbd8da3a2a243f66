"""The `mdmem` command line end to end in real processes: init, remember/get/recall with --json,
exit codes, check, review, history, demo, the pre-commit hook, and paths as a person types them."""
import json

import pytest
from conftest import DEPLOY, ENV, T0, git, run_cli, snapshot


@pytest.fixture
def cli_repo(tmp_path):
    path = tmp_path / "mem"
    r = run_cli("init", str(path), "--team", "payments=alice,bob,dana", "--team", "search=carol",
                "--as", "alice", "--now", "2026-10-01T09:00:00Z")
    assert r.returncode == 0, r.stderr
    return path


def remember(path, *extra, user="bob"):
    args = ["remember", "Billing deploys any weekday", "--kind", "fact", "--subject", "service:billing",
            "--key", "deploy.window", "--scope", "team", "--team", "payments", "--repo", str(path), "--json", *extra]
    if user:
        args += ["--as", user]
    return run_cli(*args)


def test_init_twice_is_refused(cli_repo):
    r = run_cli("init", str(cli_repo), "--as", "alice")
    assert r.returncode == 2 and "already a memory repo" in r.stderr


def test_init_names_who_made_it(tmp_path):
    """No default identity, not even for init: without --as (or MDMEM_USER) nothing is made."""
    r = run_cli("init", str(tmp_path / "mem"))
    assert r.returncode == 2 and "--as USER or MDMEM_USER" in r.stderr
    assert not (tmp_path / "mem").exists()


def test_remember_then_get_as_json(cli_repo):
    r = remember(cli_repo)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "committed" and out["path"].endswith("deploy.window.md")
    g = run_cli("get", "--subject", "service:billing", "--kind", "fact", "--key", "deploy.window",
                "--repo", str(cli_repo), "--as", "dana", "--json")
    assert json.loads(g.stdout)["text"] == "Billing deploys any weekday"


def test_missing_identity_exits_2_and_writes_nothing(cli_repo):
    before = snapshot(cli_repo)
    r = remember(cli_repo, user=None)
    assert r.returncode == 2 and "--as USER or MDMEM_USER" in r.stderr
    assert snapshot(cli_repo) == before


def test_identity_from_the_environment(cli_repo):
    args = ["keys", "--subject", "service:billing", "--kind", "fact", "--repo", str(cli_repo)]
    assert run_cli(*args, env={"MDMEM_USER": "bob"}).returncode == 0


@pytest.mark.parametrize("extra,user,code", [
    (["--team", "search"], "bob", 3),          # not a member: refused
    (["--source", "tool:grafana"], "bob", 4),  # untrusted: held for review
    (["--expect-version", "0" * 40], "bob", 5),  # stale version: conflict
    (["--kind", "gossip"], "bob", 2),           # unknown kind: bad input
])
def test_exit_codes(cli_repo, extra, user, code):
    r = remember(cli_repo, *extra, user=user)
    assert r.returncode == code, (r.stdout, r.stderr)


def test_not_found_exits_6(cli_repo):
    r = run_cli("get", "--subject", "user:alice", "--kind", "profile", "--key", "standup",
                "--repo", str(cli_repo), "--as", "bob")
    assert r.returncode == 6


def test_check_lists_path_field_reason_and_exits_2(cli_repo):
    remember(cli_repo)
    note = cli_repo / "team/payments/service/billing/fact/deploy.window.md"
    note.write_text(note.read_text().replace("kind: fact", "kind: gossip"))
    r = run_cli("check", "--repo", str(cli_repo))
    assert r.returncode == 2
    assert "team/payments/service/billing/fact/deploy.window.md: kind: unknown kind 'gossip'" in r.stderr
    assert "gossip" in note.read_text()  # left untouched on disk


def test_review_list_and_approve(cli_repo):
    out = json.loads(remember(cli_repo, "--source", "tool:grafana").stdout)
    listed = json.loads(run_cli("review", "list", "--repo", str(cli_repo), "--as", "dana", "--json").stdout)
    assert [i["review_id"] for i in listed["held"]] == [out["review_id"]] and listed["sync_conflicts"] == []
    r = run_cli("review", "approve", out["review_id"], "--repo", str(cli_repo), "--as", "dana")
    assert r.returncode == 0, r.stderr


def test_history_via_cli_with_now_replay(cli_repo):
    remember(cli_repo, "--now", "2026-10-02T09:00:00Z")
    r = run_cli("history", "--subject", "service:billing", "--kind", "fact", "--key", "deploy.window",
                "--repo", str(cli_repo), "--as", "alice", "--json")
    [v] = json.loads(r.stdout)["versions"]
    assert v["time"] == "2026-10-02T09:00:00Z" and v["actor"] == "bob"


def test_demo_runs_and_removes_its_folder(tmp_path):
    r = run_cli("demo", "--path", str(tmp_path / "demo"), "--json")
    assert r.returncode == 0, r.stderr
    titles = [s["title"] for s in json.loads(r.stdout)["steps"]]
    assert "the gate refuses a paraphrase under a new key" in titles
    assert not (tmp_path / "demo").exists()
    proof = next(s["output"] for s in json.loads(r.stdout)["steps"] if s["title"] == "prove-gone")
    # the eraser's proof passes; the subject herself cannot read every root, so hers is incomplete
    assert "dana: PASS" in proof and "alice: INCOMPLETE" in proof, proof


def test_demo_in_a_temporary_folder_leaves_nothing_behind(tmp_path):
    r = run_cli("demo", "--json", env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.glob("mdmem-demo-*")) == []


def test_demo_keep_keeps_the_repo(tmp_path):
    r = run_cli("demo", "--path", str(tmp_path / "demo"), "--keep", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["path"] == str(tmp_path / "demo")
    assert (tmp_path / "demo" / "mdmem.toml").exists()


def test_no_declared_dependency_goes_unused():
    """Every runtime dependency in pyproject is imported somewhere in mdmem (gitpython was not),
    or run as a command (git-filter-repo)."""
    import re
    import tomllib
    from importlib.metadata import packages_distributions
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", d)[0].lower() for d in deps}
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(dist.lower(), set()).add(module)
    commands = {"git-filter-repo": "filter-repo"}
    source = "\n".join(p.read_text() for p in (root / "mdmem").rglob("*.py"))
    for name in sorted(names):
        if name in commands:
            assert commands[name] in source, f"{name} is declared but never run"
            continue
        found = modules.get(name) or modules.get(name.replace("-", "_")) or set()
        if not found:
            continue  # not installed on this platform (a marker like sys_platform == 'linux')
        assert any(re.search(rf"^\s*(import|from) {m}\b", source, re.M) for m in found), \
            f"{name} is declared but nothing imports it"


def test_the_pre_commit_hook_refuses_a_broken_note(cli_repo):
    import os
    import subprocess
    import sys
    from pathlib import Path
    remember(cli_repo)
    note = cli_repo / "team/payments/service/billing/fact/deploy.window.md"
    note.write_text(note.read_text().replace("kind: fact", "kind: gossip"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["git", "-C", str(cli_repo), "commit", "-qam", "oops"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "kind: unknown kind 'gossip'" in r.stderr
    note.write_text(note.read_text().replace("kind: gossip", "kind: fact"))
    r = subprocess.run(["git", "-C", str(cli_repo), "commit", "-qam", "fine", "--allow-empty"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr


# `forget` with a relative --repo (or MDMEM_REPO) failed half-way (exit 9, "journal
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


# Note paths worked only relative to the repo root: ./team/..., an absolute path, or a
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
