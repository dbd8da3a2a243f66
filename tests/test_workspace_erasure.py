"""Erasure across a workspace's repositories: forget of a person erases their private repository and
what is about them in every mounted team repository, a receipt in each; prove-gone spans every
mount and is INCOMPLETE (never PASS) while a repository was not read; a kill -9 between
repositories is finished by the next command, repository by repository (one whose items were all
held, which moved no tip, is not asked again)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from workspace_helpers import SETTINGS, T0, git, scope_remote, workspace

from mdmem.workspace import Workspace

SECRET = "interviewing at Acme Corp next week"
ABOUT = "prefers the quiet room on Thursdays"


def people(base):
    remotes = {"team/payments": scope_remote(base, "team/payments", members=["alice", "bob", "carol"],
                                             erasers=["carol"]),
               "private/alice": scope_remote(base, "private/alice", erasers=["carol"])}
    alice = workspace(base, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember(f"Alice is {SECRET}", as_user="alice", kind="fact", subject="user:alice", key="job", now=T0)
    alice.remember(f"Alice {ABOUT}", as_user="alice", kind="fact", subject="user:alice", key="room",
                   scope="team", team="payments", now=T0)
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy", scope="team", team="payments", now=T0)
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)
    alice.close()
    return remotes


def test_forget_a_person_across_repositories_and_prove_it(tmp_path):
    remotes = people(tmp_path)
    carol = workspace(tmp_path, "carol", remotes, ["team/payments", "private/alice"])
    out = carol.forget(as_user="carol", owner="alice", push=True)
    assert sorted(out.receipts) == ["private/alice", "team/payments"]
    assert all(r.counts["notes"] >= 1 for r in out.receipts.values())
    for root in ("team/payments", "private/alice"):  # a receipt in each repository's own audit log
        log = (carol.clone_path(root) / "audit" / "erasures.jsonl").read_text()
        assert out.receipts[root].id in log
    proof = carol.prove_gone([SECRET, ABOUT], as_user="carol", owner="alice")
    assert proof.verdict == "PASS" and proof.passed, proof.to_dict()
    # the remotes no longer hold the text either (pushed with a lease)
    for bare in remotes.values():
        assert SECRET not in git(bare, "log", "--all", "-p") and ABOUT not in git(bare, "log", "--all", "-p")
    # what is not about alice stays
    assert "Tuesdays" in carol.get(as_user="carol", path="team/payments/service/billing/fact/deploy.md").note.text
    carol.close()


def test_prove_gone_names_each_repository_it_did_not_read(tmp_path):
    remotes = people(tmp_path)
    carol = workspace(tmp_path, "carol", remotes, ["team/payments"])  # alice's private repo not mounted
    carol.forget(as_user="carol", owner="alice")
    proof = carol.prove_gone([SECRET, ABOUT], as_user="carol", owner="alice")
    assert proof.verdict == "INCOMPLETE" and not proof.passed
    assert proof.unread == {"private/alice": "not mounted in this workspace"}
    assert proof.proofs["team/payments"].passed
    # a clone that cannot be read is named too
    carol.set_known(["team/infra", "team/payments"])  # what a host lists; the mounted one is not "unread"
    assert carol.file.known == ["team/infra"]
    proof = carol.prove_gone([ABOUT], as_user="carol", owner="alice")
    assert "team/infra" in proof.unread and proof.verdict == "INCOMPLETE"
    carol.close()
    env = {"MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "prove-gone", "--needle", ABOUT, "--owner", "alice",
                        "--as", "carol", "--json"], cwd=carol.root, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout.startswith("{"), r.stderr
    assert json.loads(r.stdout)["verdict"] == "INCOMPLETE"


KILL_AFTER_FIRST_REPOSITORY = textwrap.dedent("""
    import os, signal, sys
    from mdmem.workspace import Workspace, workspace as module
    original = module.mark_done
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)  # the first repository changed, not yet marked done
    module.mark_done = die
    ws = Workspace.open(sys.argv[1], embedder="none")
    if sys.argv[2] == "forget":
        ws.forget(as_user=ws.user, owner="alice")
    elif sys.argv[2] == "held":  # private/alice's one item is held for review: its tip does not move
        ws.remember_many([
            {"text": "Alice reviews billing PRs", "kind": "fact", "subject": "service:billing", "key": "reviews",
             "scope": "team", "team": "payments"},
            {"text": "Grafana says my p99 is 180ms", "kind": "fact", "subject": "user:alice", "key": "p99",
             "source": "tool:grafana"},
        ], as_user=ws.user, now="2026-10-02T09:00:00Z", new_key=True)
    else:
        ws.remember_many([
            {"text": "Alice reviews billing PRs", "kind": "fact", "subject": "service:billing", "key": "reviews",
             "scope": "team", "team": "payments"},
            {"text": "I review on Fridays", "kind": "fact", "subject": "user:alice", "key": "review-day"},
        ], as_user=ws.user, now="2026-10-02T09:00:00Z", new_key=True)
""")


def kill_between_repositories(ws_root, op):
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_REPOSITORY, str(ws_root), op],
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_a_kill_mid_erasure_is_finished_by_the_next_command(tmp_path):
    remotes = people(tmp_path)
    carol = workspace(tmp_path, "carol", remotes, ["team/payments", "private/alice"])
    carol.close()
    kill_between_repositories(carol.root, "forget")
    # the first repository (private/alice) is erased; team/payments still holds the note about her
    assert SECRET not in git(carol.clone_path("private/alice"), "log", "--all", "-p")
    assert ABOUT in git(carol.clone_path("team/payments"), "log", "--all", "-p")
    reopened = Workspace.open(carol.root, **SETTINGS)  # the next command finishes it
    assert not list((carol.root / ".mdmem-journal").glob("*.json"))
    assert ABOUT not in git(carol.clone_path("team/payments"), "log", "--all", "-p")
    assert reopened.prove_gone([SECRET, ABOUT], as_user="carol", owner="alice").verdict == "PASS"
    receipts = [json.loads(line) for line in
                (carol.clone_path("team/payments") / "audit" / "erasures.jsonl").read_text().splitlines()]
    assert len(receipts) == 1  # erased once, not twice
    reopened.close()


def test_a_kill_mid_write_across_repositories_is_finished_by_the_next_command(tmp_path):
    people(tmp_path)
    ws = Workspace.open(tmp_path / "ws-alice", **SETTINGS)
    before = {root: git(ws.clone_path(root), "rev-parse", "HEAD").strip() for root in ws.file.mounts}
    ws.close()
    kill_between_repositories(ws.root, "write")
    # sorted by root: private/alice committed before the kill, team/payments not yet
    assert git(ws.clone_path("private/alice"), "rev-parse", "HEAD").strip() != before["private/alice"]
    assert git(ws.clone_path("team/payments"), "rev-parse", "HEAD").strip() == before["team/payments"]
    reopened = Workspace.open(ws.root, **SETTINGS)
    for root in ("private/alice", "team/payments"):
        commits = git(reopened.clone_path(root), "rev-list", "--count", f"{before[root]}..HEAD").strip()
        assert commits == "1", (root, commits)  # one commit in each, none twice
    assert reopened.get(as_user="alice", subject="service:billing", kind="fact", key="reviews", scope="team",
                        team="payments").note.text == "Alice reviews billing PRs"
    assert not list((ws.root / ".mdmem-journal").glob("*.json"))
    reopened.close()


def test_a_kill_after_a_repository_whose_items_were_all_held_does_not_hold_them_twice(tmp_path):
    people(tmp_path)
    ws = Workspace.open(tmp_path / "ws-alice", **SETTINGS)
    before = {root: git(ws.clone_path(root), "rev-parse", "HEAD").strip() for root in ws.file.mounts}
    ws.close()
    kill_between_repositories(ws.root, "held")
    # private/alice did its part (one hold) and moved no tip; team/payments not yet
    holds = git(ws.clone_path("private/alice"), "for-each-ref", "refs/heads/review/").splitlines()
    assert len(holds) == 1
    assert git(ws.clone_path("private/alice"), "rev-parse", "HEAD").strip() == before["private/alice"]
    reopened = Workspace.open(ws.root, **SETTINGS)  # the next command finishes it
    assert git(reopened.clone_path("private/alice"), "for-each-ref", "refs/heads/review/").splitlines() == holds
    assert [r.text for r in reopened.review_list(as_user="alice")] == ["Grafana says my p99 is 180ms"]
    commits = git(reopened.clone_path("team/payments"), "rev-list", "--count", f"{before['team/payments']}..HEAD")
    assert commits.strip() == "1"
    assert not list((ws.root / ".mdmem-journal").glob("*.json"))
    reopened.close()


def test_prove_gone_fails_while_the_workspace_view_still_holds_the_text(tmp_path):
    """An erasure made in a clone by hand (not through the workspace) leaves the workspace's own
    generated MEMORY.md quoting the note: the proof names that file until it is regenerated."""
    remotes = people(tmp_path)
    carol = workspace(tmp_path, "carol", remotes, ["team/payments", "private/alice"])
    carol.repo_for("team/payments").forget(as_user="carol", owner="alice")
    carol.repo_for("private/alice").forget(as_user="carol", owner="alice")
    (carol.root / "MEMORY.md").write_text(f"left over: {ABOUT}\n")  # as a view made before the erasure
    proof = carol.prove_gone([SECRET, ABOUT], as_user="carol", owner="alice")
    assert proof.verdict == "FAIL" and proof.workspace_files == ["MEMORY.md"]
    assert ABOUT not in json.dumps(proof.to_dict())  # named, never quoted
    carol.write_view()
    assert carol.prove_gone([SECRET, ABOUT], as_user="carol", owner="alice").verdict == "PASS"
    carol.close()
