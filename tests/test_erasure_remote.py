"""Erased history must not come back through a remote: under new commit ids (a rebase in an old
clone), or because the eraser forgot --push and then synced."""
import json
import subprocess

from conftest import T0, T1, git, run_cli, shared_remote

from mdmem import MemoryRepo

SECRET = "Alice secret phone 555-0199 zanzibar quokka"


def objects_hold(root, needle: str) -> bool:
    out = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                         capture_output=True).stdout
    return needle.encode() in out


def shared(repo, tmp_path, *, guard: bool):
    """alice's private phone note and a team fact, pushed to a bare remote; a second clone of it."""
    repo.remember(SECRET, as_user="alice", kind="profile", subject="user:alice", key="phone", now=T0)
    repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact",
                  subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
    bare = shared_remote(repo.root, tmp_path, "bob", guard=guard)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    git(clone, "config", "user.name", "Bob")
    git(clone, "config", "user.email", "bob@mdmem.invalid")
    return bare, clone


def bob_writes(clone):
    assert run_cli("remember", "Billing deploy freeze in December", "--kind", "fact", "--subject",
                   "service:billing", "--key", "freeze", "--new-key", "--scope", "team", "--team", "payments",
                   "--as", "bob", "--repo", str(clone)).returncode == 0


def test_a_rebased_old_clone_cannot_push_the_erased_note_back_past_the_guard(repo, tmp_path):
    bare, clone = shared(repo, tmp_path, guard=True)
    bob_writes(clone)
    repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    git(bare, "reflog", "expire", "--expire=now", "--all")
    git(bare, "gc", "-q", "--prune=now")
    assert not objects_hold(bare, "zanzibar")
    # The most ordinary thing after "your branch and origin/main have diverged":
    git(clone, "fetch", "-q", "origin")
    git(clone, "rebase", "origin/main", check=False)
    assert "zanzibar" in git(clone, "log", "-p", "origin/main..HEAD").stdout  # the replayed erased note
    push = git(clone, "push", "origin", "HEAD:main", check=False)
    assert push.returncode != 0 and "erased note version" in push.stderr, push.stderr
    assert git(bare, "show", "main:private/alice/user/alice/profile/phone.md", check=False).returncode != 0


def test_the_erasers_sync_refuses_erased_content_arriving_under_new_commits_and_drops_it(repo, tmp_path):
    bare, clone = shared(repo, tmp_path, guard=False)  # no guard: the remote takes anything
    bob_writes(clone)
    repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    git(clone, "fetch", "-q", "origin")
    git(clone, "rebase", "origin/main", check=False)
    assert "zanzibar" in git(clone, "log", "-p", "origin/main..HEAD").stdout
    git(clone, "push", "-q", "origin", "HEAD:main")  # the erased note is back on the remote
    root = repo.root
    repo.close()
    before = git(root, "rev-parse", "HEAD").stdout
    sync = run_cli("sync", "--repo", str(root), "--as", "alice")
    assert sync.returncode == 3 and "erased note version" in sync.stderr, (sync.stdout, sync.stderr)
    assert git(root, "rev-parse", "HEAD").stdout == before
    assert not objects_hold(root, "zanzibar")  # what the fetch brought was dropped again
    proof = run_cli("prove-gone", "--needle", "zanzibar", "--owner", "alice", "--repo", str(root), "--as", "alice")
    # Not found anywhere alice may look; INCOMPLETE (11), not PASS: she is no eraser.
    assert proof.returncode == 11 and "FAIL" not in proof.stdout, proof.stdout
    with MemoryRepo.open(root) as again:
        assert not any("zanzibar" in h.text for h in again.recall("alice phone", as_user="alice"))


def test_forget_without_push_then_sync_says_the_remote_is_behind_and_sync_push_publishes(repo, tmp_path):
    bare, clone = shared(repo, tmp_path, guard=True)
    repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)  # not pushed
    root = repo.root
    repo.close()
    sync = run_cli("sync", "--repo", str(root), "--as", "alice")
    assert sync.returncode == 3, sync.stderr
    assert "erased in this clone" in sync.stderr and "mdmem sync --push" in sync.stderr
    assert "reset" not in sync.stderr  # never advise a reset to a ref holding erased history
    assert not objects_hold(root, "zanzibar")
    assert run_cli("prove-gone", "--needle", "zanzibar", "--owner", "alice", "--repo", str(root),
                   "--as", "alice").returncode == 11  # nothing where she may look; no eraser: INCOMPLETE
    published = run_cli("sync", "--push", "--repo", str(root), "--as", "alice", "--json")
    assert published.returncode == 0, published.stderr
    assert git(bare, "rev-parse", "main").stdout == git(root, "rev-parse", "HEAD").stdout
    git(bare, "reflog", "expire", "--expire=now", "--all")
    git(bare, "gc", "-q", "--prune=now")
    assert not objects_hold(bare, "zanzibar") and not objects_hold(root, "zanzibar")
    # The old clone is now the stale one: its sync is refused, the guard refuses its push.
    stale = run_cli("sync", "--repo", str(clone), "--as", "bob")
    assert stale.returncode == 3 and "re-clone" in stale.stderr


def test_sync_push_does_not_publish_over_commits_made_on_the_old_history(repo, tmp_path):
    bare, clone = shared(repo, tmp_path, guard=False)
    repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)  # not pushed
    bob_writes(clone)
    assert run_cli("sync", "--push", "--repo", str(clone), "--as", "bob").returncode == 0  # old history + bob's
    root = repo.root
    repo.close()
    tip = git(bare, "rev-parse", "main").stdout
    sync = run_cli("sync", "--push", "--repo", str(root), "--as", "alice")
    assert sync.returncode == 3 and "re-apply" in sync.stderr, sync.stderr
    assert git(bare, "rev-parse", "main").stdout == tip  # bob's work is not force-pushed away


def test_a_running_mcp_server_keeps_working_after_another_process_erases(repo):
    """Agents keep one server for a whole session; an eraser's forget in another process
    rewrites history and prunes the old objects under it (every later recall,
    startup and remember failed with "object not found" until a restart)."""
    import asyncio

    from mcp.client import Client
    from test_mcp import data, params

    repo.remember(SECRET, as_user="alice", kind="profile", subject="user:alice", key="phone", now=T0)
    repo.remember("Billing deploys any weekday before 3pm", as_user="alice", kind="fact",
                  subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
    root = repo.root
    repo.close()

    async def session():
        async with Client(params(repo, "alice", "read,write"), read_timeout_seconds=60) as client:
            for _ in range(240):  # the server builds its index beside; wait until it answers from it
                first = data(await client.call_tool("recall", {"query": "alice phone number"}))
                if first.get("index") != "building":
                    break
                await asyncio.sleep(0.5)
            erase = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--repo", str(root),
                            "--as", "alice")
            assert erase.returncode == 0, erase.stderr
            after = await client.call_tool("recall", {"query": "alice phone number"})
            startup = await client.call_tool("startup", {})
            wrote = await client.call_tool("remember", {"text": "Billing deploys on weekdays only", "kind": "fact",
                                                        "subject": "service:billing", "key": "deploy.window",
                                                        "scope": "team", "team": "payments"})
            return first, after, startup, wrote

    first, after, startup, wrote = asyncio.run(session())
    assert any("zanzibar" in json.dumps(h) for h in first["hits"])
    for result in (after, startup, wrote):
        assert not result.is_error, result.content[0].text
    assert "zanzibar" not in json.dumps(data(after)) and "zanzibar" not in json.dumps(data(startup))


def test_the_guard_remembers_erasures_when_a_push_deletes_the_audit_log(repo, tmp_path):
    """A commit deleting audit/erasures.jsonl made the guard forget every erasure;
    the next force-push of the pre-erasure history was accepted."""
    bare, stale = shared(repo, tmp_path, guard=True)
    repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    tidy = tmp_path / "tidy"
    git(tmp_path, "clone", "-q", str(bare), str(tidy))
    git(tidy, "config", "user.name", "Bob")
    git(tidy, "config", "user.email", "bob@mdmem.invalid")
    git(tidy, "rm", "-q", "audit/erasures.jsonl")
    git(tidy, "commit", "-q", "--no-verify", "-m", "tidy")
    drop = git(tidy, "push", "origin", "main", check=False)
    assert drop.returncode != 0 and "append-only" in drop.stderr
    # Even if the log went away some other way (the guard installed after), the guard's own memory holds.
    (bare / "hooks" / "pre-receive").rename(bare / "hooks" / "off")
    git(tidy, "push", "-q", "origin", "main")
    (bare / "hooks" / "off").rename(bare / "hooks" / "pre-receive")
    push = git(stale, "push", "-f", "origin", "main", check=False)
    assert push.returncode != 0 and "erased commit" in push.stderr, push.stderr
    assert git(bare, "show", "main:private/alice/user/alice/profile/phone.md", check=False).returncode != 0


def test_forget_push_never_wipes_a_teammates_newer_commit(repo, tmp_path):
    """`forget` --push force-pushed blindly; a teammate's note pushed after the
    eraser's last sync disappeared from the remote."""
    bare, clone = shared(repo, tmp_path, guard=True)
    bob_writes(clone)
    assert run_cli("sync", "--push", "--repo", str(clone), "--as", "bob").returncode == 0
    tip = git(bare, "rev-parse", "main").stdout
    from mdmem.errors import Conflict
    import pytest
    with pytest.raises(Conflict, match="mdmem sync"):
        repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    assert git(bare, "rev-parse", "main").stdout == tip
    assert objects_hold(repo.root, "zanzibar")  # nothing changed here either
    root = repo.root
    repo.close()
    assert run_cli("sync", "--repo", str(root), "--as", "alice").returncode == 0
    erase = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--push", "--repo", str(root),
                    "--as", "alice")
    assert erase.returncode == 0, erase.stderr
    assert "freeze" in git(bare, "show", "main:team/payments/service/billing/fact/freeze.md").stdout.lower()


def test_guard_keeps_the_servers_own_pre_receive_hook_and_runs_it_first(tmp_path):
    """`mdmem guard` silently overwrote an existing pre-receive hook."""
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    own = bare / "hooks" / "pre-receive"
    own.write_text(f"#!/bin/sh\ncat > {tmp_path}/seen\necho 'branch protection says no' >&2\nexit 1\n")
    own.chmod(0o755)
    out = run_cli("guard", str(bare))
    assert out.returncode == 0 and "runs first" in out.stdout
    assert "branch protection" in (bare / "hooks" / "pre-receive.before-mdmem").read_text()
    work = tmp_path / "w"
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    git(work, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "--allow-empty", "-m", "x")
    push = git(work, "push", str(bare), "main", check=False)
    assert push.returncode != 0 and "branch protection says no" in push.stderr
    assert "refs/heads/main" in (tmp_path / "seen").read_text()  # it got the pushed refs on stdin
    assert run_cli("guard", str(bare)).returncode == 0  # installing again keeps the chain
    assert "branch protection" in (bare / "hooks" / "pre-receive.before-mdmem").read_text()


def test_a_guarded_remote_takes_a_teammates_new_note_after_an_owner_erasure(repo, tmp_path):
    """The guard records what only the old history held; a team note the rewrite kept unchanged
    is no erased version, so a fresh clone's ordinary write still goes through."""
    bare, _ = shared(repo, tmp_path, guard=True)
    receipt = repo.forget(as_user="alice", owner="alice", subject="user:alice", push=True, now=T1)
    assert receipt.remotes["origin"].startswith("erased"), receipt.remotes
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "--no-local", str(bare), str(fresh))
    bob_writes(fresh)
    pushed = run_cli("sync", "--push", "--repo", str(fresh), "--as", "bob")
    assert pushed.returncode == 0 and "refused" not in pushed.stdout, pushed.stdout + pushed.stderr
    assert "freeze" in git(bare, "show", "main:team/payments/service/billing/fact/freeze.md").stdout.lower()
