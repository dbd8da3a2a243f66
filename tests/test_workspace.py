"""A workspace: scope repositories (each its own git repository with a local bare remote) mounted at
their roots and used as one memory: writes routed, reads spanning, one ranking, each repository's
own visibility rule, the generated workspace MEMORY.md, the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from workspace_helpers import SETTINGS, T0, git, team_of_three, workspace

from mdmem import MemoryRepo
from mdmem.errors import BadInput, NotFound, Refused
from mdmem.workspace import Workspace

T1 = "2026-10-02T09:00:00Z"


@pytest.fixture
def remotes(tmp_path):
    return team_of_three(tmp_path)


@pytest.fixture
def alice(tmp_path, remotes):
    ws = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    yield ws
    ws.close()


def heads(ws):
    return {root: git(ws.clone_path(root), "rev-parse", "HEAD").strip() for root in ws.file.mounts}


def count(ws, root, since):
    return int(git(ws.clone_path(root), "rev-list", "--count", f"{since}..HEAD").strip())


def test_a_write_lands_in_its_roots_repository_as_one_commit(alice):
    before = heads(alice)
    team = alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                          key="deploy.day", scope="team", team="payments", now=T0)
    assert team.path == "team/payments/service/billing/fact/deploy.day.md"
    assert count(alice, "team/payments", before["team/payments"]) == 1
    assert count(alice, "private/alice", before["private/alice"]) == 0
    mine = alice.remember("I am interviewing at Acme", as_user="alice", kind="fact", subject="user:alice",
                          key="job", now=T0)
    assert mine.path.startswith("private/alice/")
    assert count(alice, "private/alice", before["private/alice"]) == 1
    # the file is where its identity path says, under the workspace
    assert (alice.root / team.path).read_text().count("Billing deploys on Tuesdays") == 1
    assert "Acme" in (alice.root / mine.path).read_text()
    # and in no other repository
    assert not (alice.clone_path("team/payments") / mine.path).exists()


def test_a_write_into_an_unmounted_root_is_refused_naming_the_root(alice):
    before = heads(alice)
    with pytest.raises(Refused) as err:
        alice.remember("Search reindexes nightly", as_user="alice", kind="fact", subject="service:search",
                       key="reindex", scope="team", team="search", now=T0)
    assert "team/search is not mounted" in str(err.value) and "mdmem workspace add team/search" in str(err.value)
    assert heads(alice) == before


def test_a_scope_repository_holds_one_root(alice):
    clone = MemoryRepo.open(alice.clone_path("team/payments"), **SETTINGS)
    with pytest.raises(Refused, match="holds only team/payments"):
        clone.remember("stray", as_user="alice", kind="fact", subject="user:alice", key="x", now=T0)
    # a note of another root committed by plain git is named by check
    stray = clone.root / "private/alice/user/alice/fact/x.md"
    stray.parent.mkdir(parents=True)
    src = alice.remember("mine", as_user="alice", kind="fact", subject="user:alice", key="x", now=T0)
    stray.write_bytes((alice.root / src.path).read_bytes())
    _, bad = clone.check()
    assert any(b.path == "private/alice/user/alice/fact/x.md" and "holds only team/payments" in b.reason for b in bad)
    clone.close()


def test_a_repository_holding_another_root_is_not_mounted_there(tmp_path, remotes):
    ws = Workspace.init(tmp_path / "w2", as_user="alice", **SETTINGS)
    with pytest.raises(BadInput, match="holds private/alice"):
        ws.add("team/payments", str(remotes["private/alice"]))
    assert not (tmp_path / "w2" / "team" / "payments").exists()
    assert not ws.file.mounts
    ws.close()


def test_reads_span_every_mount(alice):
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy.day", scope="team", team="payments", now=T0)
    alice.remember("I deploy billing myself on Mondays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy.day", now=T0)
    alice.remember("Billing deploys on Wednesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy.day", scope="team", team="payments", now=T1)
    # the person's own note wins an exact lookup without a scope, as in one repository
    assert alice.get(as_user="alice", subject="service:billing", kind="fact", key="deploy.day").path \
        .startswith("private/alice/")
    assert "Wednesdays" in alice.get(as_user="alice", subject="service:billing", kind="fact", key="deploy.day",
                                     scope="team", team="payments").note.text
    keys = alice.keys(as_user="alice", subject="service:billing", kind="fact")
    assert sorted(k.root for k in keys) == ["private/alice", "team/payments"]
    listed = [s.path for s in alice.listing(as_user="alice")]
    assert listed == sorted(listed) and len(listed) == 2
    assert [s.path for s in alice.listing(as_user="alice", root="team/payments")] == \
        ["team/payments/service/billing/fact/deploy.day.md"]
    history = alice.history(as_user="alice", subject="service:billing", kind="fact", key="deploy.day")
    assert len(history) == 3 and history[0].time >= history[-1].time
    assert alice.show(as_user="alice", path="team/payments/service/billing/fact/deploy.day.md").note.text \
        .startswith("Billing deploys on Wednesdays")
    with pytest.raises(NotFound):  # an unmounted root answers like a note not there
        alice.get(as_user="alice", path="team/search/service/search/fact/x.md")


def test_recall_ranks_across_mounts_as_one_index_would(tmp_path, alice):
    """Each index scales BM25 to its own best match: a weak match alone in one repository must not
    outrank a strong match in another (nor win a tie by its path)."""
    strong = ("Invoice retry schedule: billing retries a failed invoice after one hour, then daily; "
              "the retry schedule lives in billing")
    weak = "My schedule is full on Friday"
    alice.remember(weak, as_user="alice", kind="fact", subject="user:alice", key="friday", now=T0)
    alice.remember(strong, as_user="alice", kind="fact", subject="service:billing", key="retry",
                   scope="team", team="payments", now=T0)
    query = "billing invoice retry schedule"
    spanned = [h.path for h in alice.recall(query, as_user="alice", k=5, now=T1)]
    one = MemoryRepo.init(tmp_path / "one", teams={"payments": ["alice"]}, as_user="alice", now=T0, **SETTINGS)
    one.remember(weak, as_user="alice", kind="fact", subject="user:alice", key="friday", now=T0)
    one.remember(strong, as_user="alice", kind="fact", subject="service:billing", key="retry", scope="team",
                 team="payments", now=T0)
    single = [h.path for h in one.recall(query, as_user="alice", k=5, now=T1)]
    one.close()
    assert spanned[0] == "team/payments/service/billing/fact/retry.md"
    assert spanned == single


def test_each_repository_decides_who_reads_it(tmp_path, remotes, alice):
    """A clone whose mdmem.toml does not declare the person (a host that let them clone it anyway,
    or a team that removed them) is read by nothing of theirs, and the workspace says so."""
    bob = workspace(tmp_path, "bob", remotes, ["team/search"])
    bob.remember("Search reindexes nightly at 2am", as_user="bob", kind="fact", subject="service:search",
                 key="reindex", scope="team", team="search", now=T0)
    assert all(m.ok for m in bob.sync(as_user="bob", push=True).mounts)
    bob.close()
    alice.add("team/search", str(remotes["team/search"]), as_user="alice")
    synced = {m.root: m for m in alice.sync(as_user="alice").mounts}
    assert synced["team/payments"].ok and not synced["team/search"].ok
    assert "team/search" in synced["team/search"].error and "alice is not a user" in synced["team/search"].error
    assert "2am" in (alice.clone_path("team/search") / "team/search/service/search/fact/reindex.md").read_text()
    assert alice.recall("when does search reindex", as_user="alice", k=5, now=T1) == []
    with pytest.raises(NotFound):
        alice.get(as_user="alice", path="team/search/service/search/fact/reindex.md")
    info = {m.root: m for m in alice.mount_list()}["team/search"]
    assert not info.readable and not info.writable and "alice is not declared a reader of team/search" in info.problem
    assert "team/search (not readable" in (alice.root / "MEMORY.md").read_text()
    with pytest.raises(Refused, match="team/search: alice is not declared"):
        alice.remember("x", as_user="alice", kind="fact", subject="service:search", key="x", scope="team",
                       team="search", now=T0)
    _, bad = alice.check()  # the host's rules and the declared members disagree: check names the mount
    assert [(b.path, b.field) for b in bad] == [("team/search", "membership")]


def test_only_the_workspaces_person_acts_in_it(alice):
    with pytest.raises(BadInput, match="acts for alice, not bob"):
        alice.recall("anything", as_user="bob")
    with pytest.raises(BadInput, match="acts for alice"):
        alice.remember("x", as_user="bob", kind="fact", subject="user:bob", key="x", now=T0)


def test_the_workspace_view_is_generated_for_its_person_and_never_committed(alice):
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy.day", scope="team", team="payments", now=T0)
    alice.remember("I am interviewing at Acme", as_user="alice", kind="fact", subject="user:alice", key="job",
                   now=T0)
    view = (alice.root / "MEMORY.md").read_text()
    assert "Billing deploys on Tuesdays" in view and "interviewing at Acme" in view
    assert "[[team/payments/MEMORY.md]]" in view
    assert alice.startup(as_user="alice", now=T0).count("Billing deploys on Tuesdays") == 1
    for root in alice.file.mounts:
        clone = alice.clone_path(root)
        assert git(clone, "status", "--porcelain") == ""
        committed = git(clone, "log", "--all", "-p", "--", "MEMORY.md")
        assert "Workspace memory" not in committed
    assert subprocess.run(["git", "-C", str(alice.root), "rev-parse", "--show-toplevel"],
                          capture_output=True).returncode != 0  # the workspace itself is no repository


# The workspace view told agents to run `mdmem get --path X`, which the CLI rejects (the path
# is positional).
def test_every_command_in_the_generated_guides_parses_as_written(alice):
    import re
    import shlex

    from mdmem.cli.main import build_parser

    parser = build_parser()
    for guide in (alice.root / "MEMORY.md", alice.clone_path("team/payments") / "MEMORY.md"):
        text = guide.read_text().replace("<you>", "alice").replace("<team>", "payments")
        commands = re.findall(r"`(mdmem [^`]+)`", text)
        assert commands, guide
        for command in commands:
            parser.parse_args(shlex.split(command)[1:])  # SystemExit (argparse's error) fails the test
    assert "`mdmem get <path> --as alice`" in (alice.root / "MEMORY.md").read_text()


def test_remove_refuses_to_drop_unpushed_commits(alice):
    alice.remember("only here", as_user="alice", kind="fact", subject="user:alice", key="x", now=T0)
    with pytest.raises(Exception, match="1 commit\\(s\\) not pushed"):
        alice.remove("private/alice", as_user="alice")
    alice.sync(as_user="alice", push=True)
    alice.remove("private/alice", as_user="alice")
    assert not (alice.root / "private" / "alice").exists() and "private/alice" not in alice.file.mounts
    assert not (alice.root / ".mdmem-mounts" / "private-alice").exists()


def cli(*args, cwd, env=None):
    full = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1", **(env or {})}
    full.pop("MDMEM_USER", None)
    full.pop("MDMEM_REPO", None)
    return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], cwd=cwd, env=full,
                          capture_output=True, text=True)


def test_cli_makes_a_workspace_and_every_command_acts_on_it(tmp_path, remotes):
    r = cli("workspace", "init", "ws", "--as", "alice", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ws = tmp_path / "ws"
    for root in ("team/payments", "private/alice"):
        r = cli("workspace", "add", root, os.path.relpath(remotes[root], ws), "--as", "alice", cwd=ws)
        assert r.returncode == 0, r.stderr
    r = cli("remember", "Billing deploys on Tuesdays", "--kind", "fact", "--subject", "service:billing",
            "--key", "deploy.day", "--scope", "team", "--team", "payments", "--as", "alice", cwd=ws)
    assert r.returncode == 0, r.stderr
    r = cli("remember", "I deploy billing on Mondays", "--kind", "fact", "--subject", "service:billing",
            "--key", "deploy.day", "--as", "alice", cwd=ws)
    assert r.returncode == 0, r.stderr
    inside = ws / "team" / "payments" / "service" / "billing"
    r = cli("recall", "billing deploys", "--as", "alice", "--json", cwd=inside)  # from inside a mount: all of it
    assert r.returncode == 0, r.stderr
    assert {h["path"].split("/")[0] for h in json.loads(r.stdout)["hits"]} == {"team", "private"}
    r = cli("get", "./fact/deploy.day.md", "--as", "alice", "--json", cwd=inside)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["path"] == "team/payments/service/billing/fact/deploy.day.md"
    r = cli("workspace", "list", "--as", "alice", "--json", cwd=ws)
    mounts = {m["root"]: m for m in json.loads(r.stdout)["mounts"]}
    assert mounts["team/payments"]["ahead"] == 1 and mounts["team/payments"]["writable"]
    assert mounts["private/alice"]["remote"] == str(remotes["private/alice"])  # a path kept whole
    r = cli("remember", "x", "--kind", "fact", "--subject", "service:s", "--key", "k", "--scope", "team",
            "--team", "search", "--as", "alice", cwd=ws)
    assert r.returncode == Refused.exit_code and "team/search is not mounted" in r.stderr
    r = cli("check", cwd=ws)
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("startup", "--as", "alice", cwd=ws)
    assert "Tuesdays" in r.stdout and "Mondays" in r.stdout


def test_a_plain_repository_inside_no_workspace_is_unchanged(tmp_path):
    r = cli("init", "mem", "--as", "alice", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("remember", "plain", "--kind", "fact", "--subject", "user:alice", "--key", "x", "--as", "alice",
            cwd=tmp_path / "mem")
    assert r.returncode == 0 and "private/alice/user/alice/fact/x.md" in r.stdout
    assert not (tmp_path / "mem" / ".mdmem-workspace.toml").exists()


def test_the_launcher_sends_no_workspace_call_to_one_clones_daemon(alice):
    from mdmem.cli.launch import repo_root_for_call

    inside = str((alice.root / "team" / "payments").resolve())  # what getcwd says in a mount
    clones = (alice.root / ".mdmem-mounts").resolve()
    for cwd in (inside, str(alice.root)):
        found = repo_root_for_call(["recall", "x"], {}, cwd)
        assert found is not None and not os.path.realpath(found).startswith(str(clones))  # the workspace's own


def test_init_makes_a_scope_repository_and_a_wrong_scope_root_is_named(tmp_path):
    r = cli("init", "pay", "--team", "payments=alice,bob", "--scope-root", "team/payments", "--as", "alice",
            "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["scope_root"] == "team/payments"
    assert 'root = "team/payments"' in (tmp_path / "pay" / "mdmem.toml").read_text()
    r = cli("init", "mine", "--scope-root", "private/alice", "--as", "alice", cwd=tmp_path)
    assert r.returncode == 0 and "[people.alice]" in (tmp_path / "mine" / "mdmem.toml").read_text()
    r = cli("init", "bad", "--scope-root", "teams/payments", "--as", "alice", cwd=tmp_path)
    assert r.returncode == BadInput.exit_code and "scope.root" in r.stderr and "team/payments" in r.stderr
    assert not (tmp_path / "bad").exists()
    path = tmp_path / "pay" / "mdmem.toml"
    path.write_text(path.read_text().replace('root = "team/payments"', 'root = "payments"'))
    with pytest.raises(BadInput, match="scope.root: 'payments'"):
        MemoryRepo.open(tmp_path / "pay")


def test_review_spans_mounts_and_a_decision_lands_in_the_holding_repository(tmp_path, remotes, alice):
    held = alice.remember("Billing freezes deploys in December", as_user="alice", kind="fact",
                          subject="service:billing", key="freeze", scope="team", team="payments",
                          source="agent:claude", channel="agent", now=T0)
    assert held.status == "held"
    assert [i.review_id for i in alice.review_list(as_user="alice")] == [held.review_id]
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)  # holds travel with sync
    bob = workspace(tmp_path, "bob", remotes, ["private/bob", "team/payments"])
    assert [i.review_id for i in bob.review_list(as_user="bob")] == [held.review_id]
    before = git(bob.clone_path("team/payments"), "rev-parse", "HEAD").strip()
    done = bob.approve(held.review_id, as_user="bob", now=T0)
    assert done.status == "committed" and done.path == "team/payments/service/billing/fact/freeze.md"
    assert git(bob.clone_path("team/payments"), "rev-list", "--count", f"{before}..HEAD").strip() == "1"
    assert bob.review_list(as_user="bob") == []
    with pytest.raises(NotFound, match="no such held write"):
        bob.reject("nope", as_user="bob")
    bob.close()


def test_import_in_a_workspace_routes_each_line_and_names_an_unmounted_root(alice, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(i) for i in [
        {"text": "Billing deploys Tuesdays", "kind": "fact", "subject": "service:billing", "key": "d",
         "scope": "team", "team": "payments"},
        {"text": "mine", "kind": "fact", "subject": "user:alice", "key": "m"},
        {"text": "infra", "kind": "fact", "subject": "service:infra", "key": "m", "scope": "team", "team": "infra"},
    ]) + "\n")
    alice.close()
    r = cli("import", str(items), "--as", "alice", "--json", cwd=alice.root)
    assert r.returncode == 10, r.stderr
    out = json.loads(r.stdout)
    assert sorted(c["path"] for c in out["committed"]) == ["private/alice/user/alice/fact/m.md",
                                                          "team/payments/service/billing/fact/d.md"]
    assert [(x["line"], "team/infra is not mounted" in x["reason"]) for x in out["refused"]] == [(3, True)]


def test_a_move_lands_in_its_roots_repository_as_one_commit(alice):
    """MemoryRepo.move through a workspace: routed to the repository holding the note's root,
    one commit there, nothing in the others, the note's history followed to its new key."""
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy.day", scope="team", team="payments", now=T0)
    before = heads(alice)
    moved = alice.move(as_user="alice", path="team/payments/service/billing/fact/deploy.day.md", key="deploy.weekday",
                       now=T1)
    assert moved.status == "committed" and moved.path == "team/payments/service/billing/fact/deploy.weekday.md"
    assert count(alice, "team/payments", before["team/payments"]) == 1
    assert count(alice, "private/alice", before["private/alice"]) == 0
    versions = alice.repo_for("team/payments").history(as_user="alice", path=moved.path)
    assert [v.op for v in versions] == ["move", "create"]


def test_a_workspace_file_committed_into_a_mount_does_not_take_over_calls_made_inside_it(alice):
    """A teammate can commit any file into a team repository, a workspace file in the root's
    folder too: calls made inside the mount still act on the person's own workspace (its mounts,
    its view), never on one a teammate wrote."""
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy", scope="team", team="payments", now=T0)
    clone = alice.clone_path("team/payments")
    (clone / "team/payments/.mdmem-workspace.toml").write_text('user = "alice"\nknown = []\n')
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=mallory", "-c", "user.email=m@example.org", "commit", "-qm", "ws", "--no-verify")
    inside = alice.root / "team" / "payments"
    r = cli("ls", "--as", "alice", "--json", cwd=inside)
    assert r.returncode == 0, r.stderr
    assert "team/payments/service/billing/fact/deploy.md" in r.stdout
    from mdmem.cli import launch  # the launcher's guess names the same workspace (its daemon)
    assert launch.repo_root_for_call(["ls"], {}, str(inside)) == str(alice.root)


def test_a_workspace_file_committed_into_a_shared_repository_does_not_take_over_calls_in_its_folders(tmp_path):
    repo = MemoryRepo.init(tmp_path / "shared", as_user="alice", now=T0, **SETTINGS)
    repo.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing", key="deploy",
                  now=T0)
    repo.close()
    inside = tmp_path / "shared" / "service"
    inside.mkdir(exist_ok=True)
    (inside / ".mdmem-workspace.toml").write_text('user = "alice"\nknown = []\n')
    r = cli("ls", "--as", "alice", "--json", cwd=inside)
    assert r.returncode == 0, r.stderr
    assert "service/billing/fact/deploy.md" in r.stdout
    from mdmem.cli import launch
    assert launch.repo_root_for_call(["ls"], {}, str(inside)) == str(tmp_path / "shared")
