"""The workspace's commands at their edges, as one repository's behave: a refused needle leaves
nothing journaled; forget, sync --replay and prove-gone exit as they do in one repository and
name what a person must know; review list spans the mounts; a scope repository keeps out
another root's notes (hook, guard, reading), and its owner can prove an erasure PASS."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import run_cli
from workspace_helpers import T0, git, scope_remote, team_of_three, workspace

from mdmem import MemoryRepo
from mdmem.errors import PARTIAL_EXIT_CODE, BadInput, Incomplete, NotFound, Refused

ENV = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
ENV.pop("MDMEM_REPO", None)
STRAY = "private/alice/user/alice/fact/diary.md"


def mdmem(cwd, *args):
    return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True)


def _closed_with_a_team_note(tmp_path, user: str, roots: list[str], remotes=None):
    """``user``'s workspace over ``roots`` holding one team note, closed (the CLI opens it next)."""
    remotes = remotes or team_of_three(tmp_path)
    ws = workspace(tmp_path, user, remotes, roots)
    ws.remember("Billing deploys on Tuesdays", as_user=user, kind="fact", subject="service:billing",
                key="deploy", scope="team", team="payments", now=T0)
    ws.close()
    return ws, remotes


def test_a_refused_needle_leaves_nothing_journaled_and_the_workspace_usable(tmp_path):
    alice, remotes = _closed_with_a_team_note(tmp_path, "alice", ["team/payments", "private/alice"])
    for extra in ([], ["--dry-run"]):
        r = mdmem(alice.root, "forget", "--text", "SHORT-ID-1234", "--push", "--as", "alice", *extra)
        assert r.returncode == BadInput.exit_code, (r.stdout, r.stderr)
        assert "--text" in r.stderr
    journal = alice.root / ".mdmem-journal"
    assert not journal.exists() or not [p for p in journal.iterdir() if p.suffix == ".json"]
    for args in (["ls"], ["recall", "billing"], ["workspace", "list"], ["forget", "--resume"]):
        r = mdmem(alice.root, *args, "--as", "alice")
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def test_workspace_forget_exits_as_one_repository_does(tmp_path):
    remotes = team_of_three(tmp_path)
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("The vendor portal code is QUINCE-FIG-31337", as_user="alice", kind="fact",
                   subject="service:vendor", key="portal", now=T0)
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)
    alice.close()
    bob = workspace(tmp_path, "bob", remotes, ["team/payments", "private/bob"])
    bob.close()
    # bob is no eraser: refused in every repository it concerns, nothing erased (3, not 0)
    r = mdmem(bob.root, "forget", "--subject", "user:alice", "--as", "bob")
    assert r.returncode == Refused.exit_code, (r.stdout, r.stderr)
    assert "NOT ERASED" in r.stdout
    # nothing matched anywhere (6)
    r = mdmem(alice.root, "forget", "--text", "NOTHING-LIKE-THIS-ANYWHERE-42", "--as", "alice")
    assert r.returncode == NotFound.exit_code, (r.stdout, r.stderr)
    # erased here, but the unguarded remote still serves the erased objects by id (11)
    r = mdmem(alice.root, "forget", "--path", "private/alice/service/vendor/fact/portal.md", "--push", "--as", "alice")
    assert r.returncode == Incomplete.exit_code, (r.stdout, r.stderr)
    assert "NOT erased" in r.stdout


def test_workspace_sync_replay_names_what_it_left_out(tmp_path):
    remotes = {"team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "bob"],
                                             erasers=["alice"]),
               "private/bob": scope_remote(tmp_path, "private/bob")}
    alice = workspace(tmp_path, "alice", remotes, ["team/payments"])
    alice.remember("Vendor code QUINCE-FIG-31337 for staging", as_user="alice", kind="fact",
                   subject="service:vendor", key="portal", scope="team", team="payments", now=T0)
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)
    bob = workspace(tmp_path, "bob", remotes, ["team/payments", "private/bob"])
    bob.remember("Vendor code QUINCE-FIG-31337 for staging, rotated by Bob", as_user="bob", kind="fact",
                 subject="service:vendor", key="portal", scope="team", team="payments", now=T0)
    bob.remember("Invoices batch at midnight", as_user="bob", kind="fact", subject="service:invoices",
                 key="batch", scope="team", team="payments", now=T0)
    bob.close()
    alice.forget(as_user="alice", paths=["team/payments/service/vendor/fact/portal.md"], push=True)
    alice.close()
    r = mdmem(bob.root, "sync", "--replay", "--as", "bob")
    assert r.returncode == PARTIAL_EXIT_CODE, (r.stdout, r.stderr)
    assert "team/payments: " in r.stdout and "left out" in r.stdout and "replayed" in r.stdout, r.stdout
    r = mdmem(bob.root, "get", "team/payments/service/invoices/fact/batch.md", "--as", "bob")
    assert r.returncode == 0 and "midnight" in r.stdout, (r.stdout, r.stderr)


def test_review_list_spans_a_workspace(tmp_path):
    remotes = team_of_three(tmp_path)
    bob = workspace(tmp_path, "bob", remotes, ["team/payments", "private/bob"])
    bob.close()
    r = mdmem(bob.root, "review", "list", "--as", "bob")
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = mdmem(bob.root, "review", "list", "--as", "bob", "--json")
    assert r.returncode == 0 and '"sync_conflicts"' in r.stdout, (r.stdout, r.stderr)


def test_the_owner_of_a_private_scope_repository_proves_an_erasure_pass(tmp_path):
    """A private scope repository names no eraser: its owner, who reads every root its history
    holds, proves it as an eraser would (it was INCOMPLETE for ever); each mount's line says its
    own verdict, and the exit code is the verdict's."""
    remotes = {"private/alice": scope_remote(tmp_path, "private/alice"),
               "team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "bob"],
                                             erasers=["alice"])}
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("Alice is interviewing at Acme Corp next week", as_user="alice", kind="fact",
                   subject="user:alice", key="job", now=T0)
    alice.forget(as_user="alice", texts=["interviewing at Acme Corp next week"])
    proof = alice.prove_gone(["interviewing at Acme Corp next week"], as_user="alice")
    assert proof.verdict == "PASS", proof.to_dict()
    alice.close()
    r = mdmem(alice.root, "prove-gone", "--needle", "interviewing at Acme Corp next week", "--as", "alice")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "private/alice: PASS" in r.stdout and "team/payments: PASS" in r.stdout
    # bob, who reads only the team repository, mounts it alone: nothing to hide from him there
    repo = MemoryRepo(alice.clone_path("private/alice"))
    try:
        # a non-eraser who may not read every root the history holds stays INCOMPLETE
        with MemoryRepo.init(tmp_path / "shared", teams={"payments": ["alice", "bob"]}, as_user="alice",
                             now=T0, embedder="none") as shared:
            shared.remember("Alice's own note", as_user="alice", kind="fact", subject="user:alice", key="x", now=T0)
            assert shared.prove_gone(["QUINCE-FIG-31337"], as_user="bob").verdict == "INCOMPLETE"
    finally:
        repo.close()


def _stray_commit(clone, *extra: str):
    """bob, a team member, commits a note of alice's private root into the team's repository under
    alice's address (``extra``: more arguments for git commit, like --no-verify)."""
    note = clone / STRAY
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("---\nid: 01M9673ARH4ERQJN746YN1D4FW\nkind: fact\nsubject: user:alice\nkey: diary\n"
                    "scope: private\nowner: alice\nsource: user\nvalid_from: '2026-10-01T09:00:00Z'\n"
                    "valid_until: null\nexpires_at: null\nderived_from: []\n---\n\nDear diary\n")
    git(clone, "add", "-A")
    return subprocess.run(["git", "-C", str(clone), "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid",
                           "commit", "-qm", "diary", *extra], capture_output=True, text=True)


def test_a_scope_repository_keeps_out_another_roots_notes(tmp_path):
    remotes = team_of_three(tmp_path)
    bob = workspace(tmp_path, "bob", remotes, ["team/payments"])
    clone = bob.clone_path("team/payments")
    bob.close()
    # the hook refuses it
    made = _stray_commit(clone)
    assert made.returncode != 0 and "holds only team/payments" in (made.stdout + made.stderr), made
    # past the hook, the guard refuses it
    assert run_cli("guard", str(remotes["team/payments"])).returncode == 0
    git(clone, "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid", "commit", "-qm", "diary",
        "--no-verify")
    push = subprocess.run(["git", "-C", str(clone), "push", "origin", "HEAD:main"], capture_output=True, text=True)
    assert push.returncode != 0 and "holds only team/payments" in push.stderr, push.stderr
    # in a clone that holds it anyway, nobody reads it, and check names it
    with MemoryRepo(clone, embedder="none") as repo:
        assert STRAY not in {s.path for s in repo.listing(as_user="alice")}
        assert STRAY not in {s.path for s in repo.notes(as_user="alice")}
        assert repo.access.readable_roots("alice") == ["team/payments"]
        good, bad = repo.check()
        assert any(b.path == STRAY and "holds only team/payments" in b.reason for b in bad), bad
        # no view is rendered for it (sync and render committed one, under the person's name)
        assert "private/alice/MEMORY.md" not in (repo.fresh_view_changes() or {})


def test_a_mount_whose_clone_is_gone_leaves_the_others_usable(tmp_path):
    bob, remotes = _closed_with_a_team_note(tmp_path, "bob", ["team/payments", "private/bob"])
    bob.clone_path("private/bob").rename(tmp_path / "moved-away")
    r = mdmem(bob.root, "ls", "--as", "bob")
    assert r.returncode == 0 and "Tuesdays" in r.stdout, (r.stdout, r.stderr)
    assert "private/bob" in r.stderr and "missing" in r.stderr
    assert mdmem(bob.root, "recall", "billing", "--as", "bob").returncode == 0
    r = mdmem(bob.root, "workspace", "list", "--as", "bob")
    assert r.returncode == 0 and "missing" in r.stdout, (r.stdout, r.stderr)
    r = mdmem(bob.root, "sync", "--as", "bob")
    assert r.returncode == 5 and "private/bob: FAILED" in r.stdout, (r.stdout, r.stderr)
    r = mdmem(bob.root, "prove-gone", "--needle", "QUINCE-FIG-31337-XX", "--as", "bob")
    assert r.returncode == Incomplete.exit_code and "private/bob: NOT READ" in r.stdout, (r.stdout, r.stderr)


def test_a_mount_that_cannot_be_erased_now_is_named_and_the_workspace_stays_usable(tmp_path):
    """One mount's remote unreachable during `forget --push`: that mount is named NOT ERASED, the
    command exits 11, and nothing is left journaled for every later command to replay and fail."""
    remotes = {"team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "bob"], erasers=["alice"]),
               "private/alice": scope_remote(tmp_path, "private/alice")}
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("The vendor code QUINCE-FIG-31337 for staging", as_user="alice", kind="fact",
                   subject="service:vendor", key="code", scope="team", team="payments", now=T0)
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)
    alice.close()
    remotes["team/payments"].rename(tmp_path / "unreachable.git")
    r = mdmem(alice.root, "forget", "--text", "code QUINCE-FIG-31337 for staging", "--push", "--as", "alice")
    assert r.returncode == Incomplete.exit_code, (r.stdout, r.stderr)
    assert "team/payments: NOT ERASED" in r.stdout and "cannot be reached" in r.stdout, r.stdout
    journal = alice.root / ".mdmem-journal"
    assert not [p for p in journal.glob("*.json")], list(journal.iterdir())
    for args in (["ls"], ["recall", "vendor"], ["workspace", "list"], ["forget", "--resume"]):
        assert mdmem(alice.root, *args, "--as", "alice").returncode == 0, args


def test_an_interrupted_erasure_is_finished_in_a_mount_another_process_wrote_to(tmp_path):
    """The journal says which mounts an erasure has done; a tip another process moved meanwhile
    (a server's write) is no erasure: finishing asks that mount again, and the text goes."""
    from mdmem.workspace.journal import start_op

    remotes = {"team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "bob"], erasers=["alice"]),
               "private/alice": scope_remote(tmp_path, "private/alice")}
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("Team vendor code QUINCE-FIG-31337 for staging", as_user="alice", kind="fact", subject="service:vendor",
                   key="code", scope="team", team="payments", now=T0)
    before = {root: alice.repo_for(root).store.head() for root in ("private/alice", "team/payments")}
    args = {"subject": None, "owner": None, "paths": None, "texts": ["vendor code QUINCE-FIG-31337 for staging"], "push": False,
            "scrub": True, "force": False, "now": T0}
    start_op(alice.root, "forget", "alice", args, before)  # as a forget killed before its first mount
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy", scope="team", team="payments", now=T0)  # the tip moves
    assert alice.finish_pending()
    assert alice.prove_gone(["QUINCE-FIG-31337 for staging"], as_user="alice").verdict in ("PASS", "INCOMPLETE")
    assert not alice.recall("vendor code", as_user="alice") or all(
        "QUINCE" not in h.text for h in alice.recall("vendor code", as_user="alice"))
    assert b"QUINCE-FIG-31337" not in subprocess.run(
        ["git", "-C", str(alice.clone_path("team/payments")), "log", "--all", "-p"], capture_output=True).stdout
    alice.close()


def test_a_workspace_sync_whose_push_was_refused_says_failed_in_json_too(tmp_path):
    alice, remotes = _closed_with_a_team_note(tmp_path, "alice", ["team/payments", "private/alice"])
    hook = remotes["team/payments"] / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'host policy: no pushes today'\nexit 1\n")
    hook.chmod(0o755)
    r = mdmem(alice.root, "sync", "--push", "--as", "alice", "--json")
    assert r.returncode == 5, (r.stdout, r.stderr)
    import json

    out = json.loads(r.stdout)
    assert out["ok"] is False and out["failed"] == ["team/payments"], out


def test_the_guard_refuses_another_root_anywhere_in_a_push_and_whatever_head_names(tmp_path):
    """Added then deleted within one push, another root's note would stay in every clone's
    history; and a bare repository whose HEAD names `master` still judges by the branch there,
    not by an mdmem.toml the push brings without its `[scope]`."""
    import re

    src = tmp_path / "src"
    MemoryRepo.init(src, teams={"payments": ["alice", "bob"]}, as_user="alice", scope_root="team/payments",
                    embedder="none").close()
    bare = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "master", str(bare)], check=True)
    git(src, "push", "-q", str(bare), "main")
    assert run_cli("guard", str(bare)).returncode == 0
    clone = tmp_path / "bob"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(bare), str(clone)], check=True)
    assert _stray_commit(clone, "--no-verify").returncode == 0
    git(clone, "rm", "-rq", "private")
    git(clone, "-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "tidy", "--no-verify")
    push = subprocess.run(["git", "-C", str(clone), "push", "origin", "main"], capture_output=True, text=True)
    assert push.returncode != 0 and "holds only team/payments" in push.stderr, push.stderr
    git(clone, "reset", "-q", "--hard", "origin/main")
    assert _stray_commit(clone, "--no-verify").returncode == 0
    toml = clone / "mdmem.toml"
    toml.write_text(re.sub(r"\[scope\][^\[]*", "", toml.read_text()))
    git(clone, "-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-qam", "unscope",
        "--no-verify")
    push = subprocess.run(["git", "-C", str(clone), "push", "origin", "main"], capture_output=True, text=True)
    assert push.returncode != 0 and "holds only team/payments" in push.stderr, push.stderr


def test_a_note_committed_with_crlf_on_every_line_can_be_updated(tmp_path):
    """An editor saved the note with CRLF and it was committed so (no autocrlf): the work tree is
    its blob byte for byte, no edit of anyone's, and the next remember supersedes it."""
    with MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice"]}, as_user="alice", embedder="none") as repo:
        made = repo.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                             key="deploy", scope="team", team="payments", now=T0)
        note = repo.root / made.path
        note.write_bytes(note.read_bytes().replace(b"\n", b"\r\n"))
        git(repo.root, "-c", "core.autocrlf=false", "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid",
            "commit", "-qam", "crlf", "--no-verify")
        assert git(repo.root, "status", "--porcelain") == ""
        again = repo.remember("Billing deploys on Wednesdays", as_user="alice", kind="fact",
                              subject="service:billing", key="deploy", scope="team", team="payments", now=T0)
        assert again.status == "committed"
