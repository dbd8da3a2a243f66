"""Erased means gone on the server too: what `mdmem guard` installs finishes an
erasure that arrives (nobody can fetch the erased objects by id), `forget --push` says so only
after asking the remote as a fresh clone would, and the committed receipt is no oracle."""
import hashlib
import json

import pytest

from conftest import T0, T1, TEAMS, git, run_cli, shared_remote

from mdmem import MemoryRepo

SECRET = "Escalations after hours: call Alice at 555-0173"


@pytest.fixture
def repo(tmp_path):
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as made:
        yield made


def shared(repo, tmp_path, *, guard: bool):
    repo.remember("Alice prefers async standups zanzibar", as_user="alice", kind="profile", subject="user:alice",
                  key="standup", now=T0)
    repo.remember(SECRET, as_user="bob", kind="fact", subject="service:billing", key="escalation",
                  scope="team", team="payments", now=T0)
    return shared_remote(repo.root, tmp_path, "bob", guard=guard)


def fetch_by_id(tmp_path, bare, oid: str, name: str) -> int:
    """A teammate who joins later: a fresh clone (--no-local: git's own transport), then a fetch by id."""
    fresh = tmp_path / name
    git(tmp_path, "clone", "-q", "--no-local", str(bare), str(fresh))
    return git(fresh, "fetch", "-q", "origin", oid, check=False).returncode


def test_after_forget_push_to_a_guarded_remote_nobody_can_fetch_the_erased_commit_or_blob(repo, tmp_path):
    bare = shared(repo, tmp_path, guard=True)
    receipt = repo.forget(as_user="dana", owner="alice", subject="user:alice", texts=["555-0173"], push=True,
                          now=T1)
    assert receipt.old_head and receipt.erased_blobs  # the eraser's own record of what went
    assert receipt.remotes["origin"].startswith("erased:"), receipt.remotes
    assert fetch_by_id(tmp_path, bare, receipt.old_head, "late1") != 0
    assert fetch_by_id(tmp_path, bare, receipt.erased_blobs[0], "late2") != 0
    assert fetch_by_id(tmp_path, bare, receipt.rewritten_commits[0], "late3") != 0


def test_forget_push_to_an_unguarded_remote_says_it_still_serves_the_erased_objects(repo, tmp_path):
    shared(repo, tmp_path, guard=False)
    root = repo.root
    repo.close()
    out = run_cli("forget", "--text", "555-0173", "--push", "--repo", str(root), "--as", "dana", "--json")
    assert out.returncode == 11, (out.stdout, out.stderr)
    status = json.loads(out.stdout)["remotes"]["origin"]
    assert status.startswith("NOT erased") and "mdmem guard" in status, status


def test_forget_push_names_a_hosting_service_and_its_own_purge_procedure(repo, tmp_path):
    bare = shared(repo, tmp_path, guard=True)
    # The remote is named by a GitHub URL; git reaches the local bare repository through insteadOf.
    git(repo.root, "remote", "set-url", "origin", "https://github.com/team/memory.git")
    git(repo.root, "config", f"url.{bare}.insteadOf", "https://github.com/team/memory.git")
    receipt = repo.forget(as_user="dana", texts=["555-0173"], push=True, now=T1)
    status = receipt.remotes["origin"]
    assert status.startswith("NOT erased there yet") and "GitHub Support" in status, status


def test_the_committed_receipt_names_no_erased_commit_or_blob(repo, tmp_path):
    shared(repo, tmp_path, guard=False)
    receipt = repo.forget(as_user="dana", texts=["555-0173"], now=T1)
    audit = (repo.root / "audit/erasures.jsonl").read_text()
    for oid in [receipt.old_head, *receipt.rewritten_commits, *receipt.erased_blobs]:
        assert oid not in audit
    # Nor anything that confirms a guess at the scrubbed number.
    scrubbed = (repo.root / "team/payments/service/billing/fact/escalation.md").read_bytes()
    assert b"[removed]" in scrubbed
    words = set(audit.replace('"', " ").replace(",", " ").split())
    hits = []
    for n in range(10000):
        guess = scrubbed.replace(b"[removed]", f"555-{n:04d}".encode())
        if hashlib.sha1(b"blob %d\0" % len(guess) + guess).hexdigest() in words:
            hits.append(n)
    assert hits == []


def test_a_stale_clone_is_still_refused_and_replays_with_ids_it_derives_itself(repo, tmp_path):
    """No erased id in the receipt: the teammate's clone finds the erasure from the old history
    it holds and the new one, refuses to merge, and replays its own unrelated note."""
    bare = shared(repo, tmp_path, guard=True)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    assert run_cli("remember", "Ledger database moves to Postgres 16", "--kind", "decision", "--subject",
                   "service:ledger", "--key", "db", "--scope", "team", "--team", "payments", "--as", "bob",
                   "--repo", str(clone)).returncode == 0
    repo.forget(as_user="dana", owner="alice", subject="user:alice", texts=["555-0173"], push=True, now=T1)
    stale = run_cli("sync", "--repo", str(clone), "--as", "bob")
    assert stale.returncode == 3 and "erased" in stale.stderr, stale.stderr
    replay = run_cli("sync", "--replay", "--push", "--repo", str(clone), "--as", "bob")
    assert replay.returncode == 0, replay.stderr
    assert "Postgres 16" in git(bare, "show", "main:team/payments/service/ledger/decision/db.md").stdout
    assert "555-0173" not in git(clone, "log", "--all", "-p").stdout


@pytest.mark.parametrize("guard", [True, False])
def test_sync_push_publishing_an_erasure_succeeds_only_once_the_remote_serves_no_erased_object(repo, tmp_path,
                                                                                                guard):
    """forget without --push, then `sync --push` publishes it: asked as forget --push asks, a
    guarded remote serves nothing erased (exit 0); an unguarded one still does (exit 11, named)."""
    bare = shared(repo, tmp_path, guard=guard)
    receipt = repo.forget(as_user="dana", texts=["555-0173"], now=T1)
    root = repo.root
    repo.close()
    out = run_cli("sync", "--push", "--repo", str(root), "--as", "dana", "--json")
    status = json.loads(out.stdout)["erasure"]
    if guard:
        assert out.returncode == 0 and status.startswith("erased:"), (out.stdout, out.stderr)
        assert fetch_by_id(tmp_path, bare, receipt.old_head, "late") != 0
    else:
        assert out.returncode == 11 and status.startswith("NOT erased") and "mdmem guard" in status, out.stdout
        assert fetch_by_id(tmp_path, bare, receipt.old_head, "late") == 0  # why it says so
