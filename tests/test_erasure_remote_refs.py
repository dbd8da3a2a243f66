"""After an erasure is published, no ref on the remote other than main keeps the erased history
reachable: tags, git notes refs and hold branches are what a fresh clone (or a fetch of
refs/notes/*) takes along, so each must be the rewritten one or gone."""
import subprocess

from conftest import T0, T1, git, run_cli

SECRET = "Alice secret phone 555-0199 zanzibar quokka"


def fresh_clone_holds(bare, tmp_path, needle: str) -> bool:
    """What a teammate joining later gets: a clone over git's transport plus every notes ref."""
    clone = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "--no-local", str(bare), str(clone))
    git(clone, "fetch", "-q", "origin", "refs/notes/*:refs/notes/*", check=False)
    out = subprocess.run(["git", "-C", str(clone), "cat-file", "--batch-all-objects", "--batch"],
                         capture_output=True).stdout
    return needle.encode() in out


def published(repo, tmp_path):
    repo.remember(SECRET, as_user="alice", kind="profile", subject="user:alice", key="phone", now=T0)
    repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact",
                  subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    assert run_cli("guard", str(bare)).returncode == 0
    git(repo.root, "remote", "add", "origin", str(bare))
    assert run_cli("sync", "--push", "--repo", str(repo.root), "--as", "bob").returncode == 0
    return bare


def test_forget_push_publishes_its_scrubbed_git_notes_so_the_remote_serves_no_erased_text(repo, tmp_path):
    bare = published(repo, tmp_path)
    git(repo.root, "notes", "add", "-m", "reviewed: " + SECRET, "HEAD")
    git(repo.root, "push", "-q", "origin", "refs/notes/commits")
    receipt = repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    assert "zanzibar" not in git(repo.root, "log", "-p", "refs/notes/commits").stdout  # scrubbed here
    assert receipt.remotes["origin"].startswith("erased"), receipt.remotes
    assert not fresh_clone_holds(bare, tmp_path, "zanzibar")


def test_sync_push_publishing_an_erasure_leaves_no_tag_on_the_remote_holding_the_erased_note(repo, tmp_path):
    bare = published(repo, tmp_path)
    git(repo.root, "tag", "v1")
    git(repo.root, "push", "-q", "origin", "v1")
    repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)  # without --push
    run_cli("sync", "--push", "--repo", str(repo.root), "--as", "bob")
    assert not fresh_clone_holds(bare, tmp_path, "zanzibar")


def test_a_hold_branch_on_the_old_history_does_not_keep_the_erased_note_on_the_remote(repo, tmp_path):
    """The hold is remade on the erased history and replaces the remote's; the guard takes it (its
    note was never erased), so a later forget --push finds nothing left to sync first."""
    bare = published(repo, tmp_path)
    held = run_cli("remember", "Pager says billing p99 is 180ms", "--kind", "fact", "--subject",
                   "service:billing", "--key", "latency", "--scope", "team", "--team", "payments",
                   "--source", "tool:grafana", "--new-key", "--as", "bob", "--repo", str(repo.root))
    assert held.returncode == 4, held.stderr
    assert run_cli("sync", "--push", "--repo", str(repo.root), "--as", "bob").returncode == 0
    assert "review/" in git(bare, "for-each-ref").stdout
    repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)  # without --push
    run_cli("sync", "--push", "--repo", str(repo.root), "--as", "dana")
    wrote = run_cli("remember", "Alice keeps her badge in the blue drawer", "--kind", "profile", "--subject",
                    "user:alice", "--key", "badge", "--as", "alice", "--repo", str(repo.root))
    assert wrote.returncode == 0, wrote.stderr
    again = run_cli("forget", "--path", "private/alice/user/alice/profile/badge.md", "--push", "--as", "alice",
                    "--repo", str(repo.root))
    assert again.returncode in (0, 11), again.stderr  # never "sync first" when sync has nothing to do
    assert not fresh_clone_holds(bare, tmp_path, "zanzibar")


def test_forget_push_names_a_remote_ref_outside_branches_and_tags_that_keeps_erased_history(repo, tmp_path):
    bare = published(repo, tmp_path)
    git(repo.root, "push", "-q", "origin", "HEAD:refs/backup/main")
    receipt = repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    status = receipt.remotes["origin"]
    assert status.startswith("NOT erased") and "refs/backup/main" in status, status
    assert "zanzibar" in git(bare, "log", "-p", "refs/backup/main").stdout  # why it is named
