import dataclasses
import json
import subprocess

import pytest
from conftest import T0, T1, run_cli, snapshot, team_fact

from mdmem import ErasurePlan, MemoryRepo, NotFound, Refused
from mdmem.storage.gitdir import cache_dir

PHONE = "555-0142"


def all_bytes(root):
    """Every decompressed git object and every file under the repo (work tree, .git, caches)."""
    objects = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True).stdout
    files = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    return objects + files


def alice_world(repo):
    team_fact(repo, "Billing deploys any weekday before 3pm")
    team_fact(repo, "Alice owns the billing retry runbook", key="runbook.owner", new_key=True)
    repo.remember("Alice is interviewing for the open backend role on the search team", as_user="alice",
                  kind="fact", subject="user:alice", key="career", now=T1)
    repo.remember("Alice prefers async standups and no meetings before 10am", as_user="alice",
                  kind="preference", subject="user:alice", key="standup", now=T1)
    repo.consolidate(as_user="bob", subject="service:billing", team="payments", now=T1)
    repo.recall("warm the caches", as_user="alice", now=T1)


def test_erasing_alice_passes_every_check_and_lists_mentions(repo):
    alice_world(repo)
    receipt = repo.forget(as_user="alice", subject="user:alice", owner="alice", now=T1)
    mentions = sorted(m["path"] for m in receipt.mentions)
    assert mentions == ["team/payments/service/billing/fact/runbook.owner.md",
                        "team/payments/service/billing/summary/digest.md"]
    needles = ["interviewing for the open backend role", "async standups", "Alice"]
    report = repo.prove_gone(needles, as_user="alice", subject="user:alice", owner="alice",
                             allow_paths=receipt.mentions_for_review)
    # Every check alice could make passed; she is no eraser, so the proof is INCOMPLETE, not PASS.
    assert report.verdict == "INCOMPLETE" and all(n["checks"][c]["passed"] for n in report.needles
                                                  for c in n["checks"]), json.dumps(report.to_dict(), indent=1)
    assert report.scope["no_orphaned_index_entries"]["passed"]
    blob = all_bytes(repo.root)
    assert b"interviewing for the open backend role" not in blob and b"async standups" not in blob
    audit = (repo.root / "audit/erasures.jsonl").read_text()
    assert not any(n in audit for n in needles) and receipt.counts["notes"] == 2
    assert all("interviewing" not in h.text for h in repo.recall("Alice is interviewing", as_user="alice", now=T1))
    assert repo.get(as_user="dana", subject="service:billing", kind="fact", key="runbook.owner", now=T1)


def test_prove_gone_fails_while_the_text_is_still_anywhere(repo):
    alice_world(repo)
    report = repo.prove_gone(["async standups"], as_user="alice", owner="alice")
    assert not report.passed
    failed = {k for k, c in report.needles[0]["checks"].items() if not c["passed"]}
    assert {"live_notes", "git_objects", "work_tree", "memory_views", "fulltext_index"} <= failed


def test_an_index_document_left_for_an_erased_note_fails_the_proof(repo):
    """Index documents carry the notes' vectors: one left behind keeps the embedding."""
    from whoosh import index as windex

    alice_world(repo)
    repo.forget(as_user="alice", subject="user:alice", owner="alice", now=T1)
    repo.recall("rebuild the index", as_user="alice", now=T1)
    ix = windex.open_dir(str(cache_dir(repo.root) / "fulltext"))
    with ix.writer() as w:
        w.add_document(doc_id="private/alice/user/alice/fact/career.md", path="private/alice/user/alice/fact/career.md",
                       root="private/alice", kind="fact", subject="user:alice", body="[removed]")
    report = repo.prove_gone(["nothing to find here"], as_user="alice", subject="user:alice", owner="alice")
    assert not report.passed
    assert report.scope["no_orphaned_index_entries"]["where"] == ["private/alice/user/alice/fact/career.md"]


def test_prove_gone_of_someone_elses_data_needs_the_role(repo):
    with pytest.raises(Refused):
        repo.prove_gone(["x"], as_user="bob", owner="alice")


@pytest.mark.parametrize("quoted,scrub,after", [(False, True, False), (False, False, False),
                                                (True, True, False), (True, False, True)])
def test_forget_phone_worlds(repo, quoted, scrub, after):
    r = repo.remember(f"My phone number is {PHONE}", as_user="ali", kind="profile", subject="user:ali",
                      key="phone", now=T0)
    repo.remember(f"My phone number is {PHONE}, updated", as_user="ali", kind="profile", subject="user:ali",
                  key="phone", now=T1)
    if quoted:
        repo.remember(f"Session summary: the user gave their number {PHONE} for callbacks", as_user="ali",
                      kind="summary", subject="session:2026-10-15", source="system:consolidate", channel="system", now=T1)
    repo.recall("phone", as_user="ali", now=T1)
    assert PHONE.encode() in all_bytes(repo.root)
    repo.forget(as_user="ali", paths=[r.path], scrub=scrub, now=T1)
    assert (PHONE.encode() in all_bytes(repo.root)) == after
    if quoted and scrub:
        text = next((repo.root / "private/ali/session").rglob("digest.md")).read_text()
        assert "[removed]" in text


def test_worktree_stash_tag_and_git_note_carry_nothing_afterwards(repo, tmp_path):
    r = repo.remember(f"Call me on {PHONE}", as_user="ali", kind="profile", subject="user:ali", key="phone", now=T0)
    git = lambda *a: subprocess.run(["git", "-C", str(repo.root), *a], check=True, capture_output=True)
    git("tag", "-a", "v1", "-m", f"tagged while {PHONE} was here")
    git("notes", "add", "-m", f"note about {PHONE}", "HEAD")
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    (repo.root / "scratch.txt").write_text(f"draft {PHONE}")
    git("add", "scratch.txt")
    git("stash")
    (repo.root / "ignored-copy.txt").write_text(f"copy {PHONE}")
    repo.forget(as_user="ali", texts=[PHONE], now=T1)
    assert PHONE.encode() not in all_bytes(repo.root)
    # The clean linked worktree is kept (no collateral), its rewritten files checked out.
    assert (tmp_path / "wt").exists() and PHONE.encode() not in all_bytes(tmp_path / "wt")
    assert subprocess.run(["git", "-C", str(repo.root), "stash", "list"], capture_output=True,
                          text=True).stdout.count("stash@") == 1  # the stash is kept, scrubbed
    tag = subprocess.run(["git", "-C", str(repo.root), "cat-file", "-p", "v1"], capture_output=True, text=True).stdout
    assert "[removed]" in tag
    assert not (repo.root / r.path).read_text().count(PHONE)


def test_held_writes_are_reached_too(repo):
    r = repo.remember(f"Ali's phone is {PHONE}", as_user="bob", kind="fact", subject="user:ali", key="phone",
                      scope="team", team="payments", source="tool:crm", now=T0)
    assert r.status == "held"
    repo.access = type(repo.access)(repo.config.teams, frozenset({"dana"}))
    plan = repo.forget(as_user="dana", texts=[PHONE], dry_run=True, now=T1)
    assert plan.review_branches == [f"review/{r.review_id}"]
    repo.forget(as_user="dana", texts=[PHONE], now=T1)
    assert PHONE.encode() not in all_bytes(repo.root)
    [held] = repo.review_list(as_user="dana")  # scrubbed in place: a person still decides on it
    assert held.note.text == "Ali's phone is [removed]"


def test_forgetting_a_subject_removes_its_held_writes(repo):
    repo.remember("Ali's phone is in the CRM", as_user="ali", kind="fact", subject="user:ali", key="phone",
                  source="tool:crm", now=T0)
    repo.forget(as_user="ali", subject="user:ali", now=T1)
    assert repo.review_list(as_user="ali") == []
    assert "CRM" not in all_bytes(repo.root).decode("utf-8", "replace")


def test_refusals_and_dry_runs_change_nothing(repo):
    alice_world(repo)
    before = snapshot(repo.root)
    with pytest.raises(Refused):
        repo.forget(as_user="bob", owner="alice", now=T1)
    with pytest.raises(Refused):
        repo.forget(as_user="bob", subject="service:billing", now=T1)  # a team's notes need the role
    plan = repo.forget(as_user="alice", owner="alice", dry_run=True, now=T1)
    assert isinstance(plan, ErasurePlan) and len(plan.notes) == 2
    assert "interviewing" not in json.dumps(plan.to_dict())
    assert snapshot(repo.root) == before
    with pytest.raises(NotFound):
        repo.forget(as_user="alice", paths=["private/alice/user/alice/fact/nothing.md"], now=T1)


def test_a_stale_clone_cannot_bring_erased_history_back(repo, tmp_path):
    repo.remember(f"Call me on {PHONE}", as_user="ali", kind="profile", subject="user:ali", key="phone", now=T0)
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(bare)], check=True)
    subprocess.run(["git", "-C", str(repo.root), "remote", "add", "origin", str(bare)], check=True)
    subprocess.run(["git", "-C", str(repo.root), "fetch", "-q", "origin"], check=True)
    assert run_cli("guard", str(bare)).returncode == 0
    stale = tmp_path / "stale"
    subprocess.run(["git", "clone", "-q", str(bare), str(stale)], check=True)

    receipt = repo.forget(as_user="ali", texts=[PHONE], push=True, now=T1)
    assert receipt.remotes["origin"].startswith("erased: pushed")  # the guard pruned; asked by id
    assert PHONE.encode() not in all_bytes(bare)

    # The stale clone merges the new history into its old one and pushes: refused.
    subprocess.run(["git", "-C", str(stale), "pull", "-q", "--no-rebase", "--allow-unrelated-histories",
                    "-X", "ours", "--no-edit"], capture_output=True)
    push = subprocess.run(["git", "-C", str(stale), "push", "origin", "HEAD:main"], capture_output=True, text=True)
    assert push.returncode != 0 and "erased commit" in push.stderr
    sync = run_cli("sync", "--repo", str(stale), "--as", "bob")
    assert sync.returncode == 3 and "erased" in sync.stderr


def test_cli_forget_dry_run_and_prove_gone_exit_codes(repo):
    alice_world(repo)
    r = run_cli("forget", "--owner", "alice", "--dry-run", "--repo", str(repo.root), "--as", "alice", "--json")
    assert r.returncode == 0 and set(json.loads(r.stdout)) == {f.name for f in dataclasses.fields(ErasurePlan)}
    r = run_cli("prove-gone", "--needle", "async standups", "--owner", "alice", "--repo", str(repo.root),
                "--as", "alice")
    assert r.returncode == 7 and "FAIL" in r.stdout
    r = run_cli("forget", "--owner", "alice", "--repo", str(repo.root), "--as", "alice")
    assert r.returncode == 0, r.stderr
    r = run_cli("prove-gone", "--needle", "async standups", "--owner", "alice", "--repo", str(repo.root),
                "--as", "alice", "--json")
    # Gone from everywhere alice may look; she is no eraser: INCOMPLETE (11), never PASS.
    assert r.returncode == 11 and json.loads(r.stdout)["verdict"] == "INCOMPLETE"


def test_the_mention_scan_uses_configured_aliases(repo):
    import subprocess as sp
    config = repo.root / "mdmem.toml"
    config.write_text(config.read_text() + '\n[people.alice]\naliases = ["Al Smith", "@asmith"]\n')
    sp.run(["git", "-C", str(repo.root), "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "aliases",
            "--no-verify"], check=True)  # by the repo's admin (its founder), so it takes effect
    repo = MemoryRepo.open(repo.root)
    team_fact(repo, "Al Smith reviews every billing migration", key="migration.review")
    team_fact(repo, "Ping @asmith before touching the ledger", key="ledger", new_key=True)
    team_fact(repo, "Deploys are on weekdays", key="deploy.window", new_key=True)
    repo.remember("Alice prefers async standups", as_user="alice", kind="preference", subject="user:alice",
                  key="standup", now=T1)
    receipt = repo.forget(as_user="alice", owner="alice", now=T1)
    assert sorted(m["path"].rsplit("/", 1)[-1] for m in receipt.mentions) == ["ledger.md", "migration.review.md"]
