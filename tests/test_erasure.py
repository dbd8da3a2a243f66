"""`forget` and `prove-gone` end to end: an erasure leaves the text nowhere (history, held writes,
views, digests, indexes, receipts), keeps everything else trusted and in place, and refuses or
dry-runs without changing anything."""
import dataclasses
import json
import shutil
import subprocess

import pytest
from conftest import DEPLOY, ENV, T0, T1, git, open_defect, run_cli, snapshot, team_fact, untrusted
from workspace_helpers import files_under

from mdmem import ErasurePlan, MemoryRepo, NotFound, Refused
from mdmem.storage.gitdir import cache_dir

PHONE = "555-0142"


def all_bytes(root):
    """Every decompressed git object and every file under the repo (work tree, .git, caches)."""
    objects = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True).stdout
    files = b"".join(files_under(root).values())
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


# `forget --owner alice` pseudonymised her commits' author, and verify then flagged every team
# note she wrote (the pseudonym writes nowhere): they left the views and everyone's startup.
def test_an_erased_persons_team_notes_stay_trusted_and_in_the_views(two_teams):
    two_teams.remember("Payments runbook lives in the wiki under /pay/runbook", as_user="alice", kind="procedure",
                  subject="service:billing", key="runbook", scope="team", team="payments", new_key=True, now=T0)
    two_teams.forget(as_user="dana", owner="alice", now=T0)
    with MemoryRepo(two_teams.root, embedder="none") as repo:
        assert untrusted(repo) == {}
        assert "/pay/runbook" in repo.startup(as_user="bob", now=T0)
        assert not [h for h in repo.recall("payments runbook", as_user="bob", now=T0) if h.untrusted]
    assert "/pay/runbook" in (two_teams.root / "team" / "payments" / "MEMORY.md").read_text()
    # The erasure vouches only for the commits it rewrote: a later commit under the pseudonym is
    # judged on its own.
    pseudonym = git(two_teams.root, "log", "--format=%ae", "--", "team/payments/service").stdout.split()[-1]
    assert pseudonym.startswith("erased-")
    note = two_teams.root / "team" / "payments" / "service" / "billing" / "procedure" / "runbook.md"
    note.write_text(note.read_text().replace("/pay/runbook", "http://evil.example"))
    git(two_teams.root, "-c", f"user.email={pseudonym}", "-c", "user.name=x", "commit", "-qam", "edit", "--no-verify")
    with MemoryRepo(two_teams.root, embedder="none") as repo:
        flags = untrusted(repo)
        assert list(flags) == ["team/payments/service/billing/procedure/runbook.md"]
        assert flags["team/payments/service/billing/procedure/runbook.md"]["reason"] == "committer"


# Erasing a config admin reverted every mdmem.toml change they had committed.
def test_erasing_an_admin_keeps_the_config_they_committed(tmp_path):
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           erasers=["alice", "dana"], now=T0, as_user="alice", embedder="none")
    cfg = repo.root / "mdmem.toml"
    cfg.write_text(cfg.read_text().replace('payments = ["alice", "bob", "dana"]',
                                           'payments = ["alice", "bob", "dana", "carol"]'))
    git(repo.root, "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid", "commit", "-qam", "carol joins",
        "--no-verify")
    with MemoryRepo(repo.root, embedder="none") as again:
        again.remember("Billing deploys any weekday", as_user="carol", kind="fact", subject="service:billing",
                       key="deploy.window", scope="team", team="payments", now=T0)
        again.forget(as_user="dana", owner="alice", now=T0)
    with MemoryRepo(repo.root, embedder="none") as after:
        assert "carol" in after.access.teams["payments"]
        assert untrusted(after) == {}
        assert after.get(as_user="carol", subject="service:billing", kind="fact", key="deploy.window")


# Erasure scrubbed the text of a view's line about an erased note but kept its path and key
# in every older view version.
def test_erasure_leaves_no_path_or_key_of_an_erased_note_in_older_views(two_teams):
    two_teams.remember("Alice is on medical leave until March", as_user="bob", kind="fact", subject="user:alice",
                  key="medical.leave.oncology", new_key=True, scope="team", team="payments", now=T0)
    two_teams.remember("Another note", as_user="bob", kind="fact", subject="service:billing", key="other", new_key=True,
                  scope="team", team="payments", now=T0)
    assert "medical.leave.oncology" in git(two_teams.root, "log", "-p", "--all").stdout
    two_teams.forget(as_user="dana", owner="alice", subject="user:alice", now=T0)
    history = git(two_teams.root, "log", "-p", "--all").stdout
    assert "medical.leave" not in history and "oncology" not in history
    assert "Another note" in (two_teams.root / "team" / "payments" / "MEMORY.md").read_text()


# Erasing the repo's only config admin left nobody who could change mdmem.toml.
@pytest.mark.parametrize("erasers", [[], ["alice"]])
def test_the_only_config_admin_names_another_before_being_erased(tmp_path, erasers):
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob"]}, erasers=erasers, now=T0,
                           as_user="alice", embedder="none")
    repo.remember("alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
    head = git(repo.root, "rev-parse", "HEAD").stdout
    for dry_run in (True, False):
        with pytest.raises(Refused, match="only config admin"):
            repo.forget(as_user="alice", owner="alice", dry_run=dry_run, now=T0)
    assert git(repo.root, "rev-parse", "HEAD").stdout == head


# Needles matched inside longer tokens: erasing 555-0199 rewrote an unrelated
# 1-800-555-01990 in a team note, in all history.
def test_erasure_replaces_whole_tokens_only(two_teams):
    two_teams.remember("Alice's phone is 555-0199", as_user="alice", kind="profile", subject="user:alice", key="phone",
                  now=T0)
    two_teams.remember("The fraud hotline is 1-800-555-01990, ask for extension 555-0199x", as_user="bob", kind="fact",
                  subject="service:billing", key="hotline", scope="team", team="payments", new_key=True, now=T0)
    two_teams.forget(as_user="alice", texts=["555-0199"], now=T0)
    assert "1-800-555-01990" in git(two_teams.root, "log", "-p", "--all").stdout
    note = two_teams.get(as_user="bob", subject="service:billing", kind="fact", key="hotline")
    assert note.note.text == "The fraud hotline is 1-800-555-01990, ask for extension 555-0199x"
    report = two_teams.prove_gone(["555-0199"], as_user="dana")
    assert all(check["passed"] for check in report.needles[0]["checks"].values()), report.needles


# `forget` in a clone that borrows objects (`git clone --shared`) reported success while
# the erased objects stayed readable through the alternate.
def test_forget_refuses_a_clone_that_borrows_objects(billing_team, tmp_path):
    billing_team.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                  key="phone", now=T0)
    shared_remote = tmp_path / "shared"
    git(tmp_path, "clone", "-q", "--shared", str(billing_team.root), str(shared_remote))
    for extra in ([], ["--dry-run"]):
        r = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--as", "dana", *extra, env=ENV,
                    cwd=shared_remote)
        assert r.returncode == 5 and "borrows objects" in r.stderr and "repack" in r.stderr, r.stderr
    assert "555-0199" in git(shared_remote, "log", "-p").stdout  # nothing changed
    git(shared_remote, "repack", "-q", "-a", "-d")
    (shared_remote / ".git/objects/info/alternates").unlink()
    r = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--as", "dana", env=ENV, cwd=shared_remote)
    assert r.returncode == 0, r.stderr
    assert "555-0199" not in git(shared_remote, "log", "-p", "--all").stdout


# Erasing a note left "- fact fraud.contact: [removed]" in the subject's digest,
# in every version of it, and the erased note's id in derived_from.
@pytest.mark.parametrize("others", [1, 0])
def test_erasure_leaves_no_digest_line_or_id(billing_team, others):
    root = billing_team.root
    args = dict(as_user="bob", kind="fact", subject="service:billing", scope="team", team="payments",
                new_key=True, now=T0)
    gone = billing_team.remember("Billing fraud contact is Mallory Q. Whistleblower-Jones", key="fraud.contact", **args)
    if not others:
        billing_team.retire(path=DEPLOY, as_user="bob", now=T0)
    r = run_cli("consolidate", "--subject", "service:billing", "--team", "payments", "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 0, r.stderr
    path = "team/payments/service/billing/fact/fraud.contact.md"
    r = run_cli("forget", "--path", path, "--as", "dana", env=ENV, cwd=root)
    assert r.returncode == 0, (r.stdout, r.stderr)
    history = git(root, "log", "-p", "--all").stdout
    left = [line for line in history.splitlines() if "fraud.contact" in line or gone.note_id in line
            or "Whistleblower" in line]
    assert left == []
    digest = root / "team/payments/service/billing/summary/digest.md"
    assert "fraud.contact" not in digest.read_text() and gone.note_id not in digest.read_text()
    assert run_cli("check", env=ENV, cwd=root).returncode == 0
    r = run_cli("get", "team/payments/service/billing/summary/digest.md", "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 0, r.stderr


# The dry run said "3 commit(s) to rewrite" and the run then "rewrote 10": every commit
# after a rewritten one gets a new id too. The plan says both (the second an upper bound: a commit
# the rewrite leaves empty is dropped).
def test_the_dry_run_counts_every_commit_that_gets_a_new_id(billing_team):
    import json

    billing_team.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                  key="phone", now=T0)
    for n in range(4):
        billing_team.remember(f"Billing fact number {n}", as_user="bob", kind="fact", subject="service:billing",
                      key=f"f{n}", new_key=True, scope="team", team="payments", now=T0)
    args = ["forget", "--owner", "alice", "--subject", "user:alice", "--as", "dana", "--json"]
    plan = json.loads(run_cli(*args, "--dry-run", env=ENV, cwd=billing_team.root).stdout)
    assert plan["commits_with_new_ids"] > plan["commits_to_rewrite"] >= 1
    r = run_cli(*args, env=ENV, cwd=billing_team.root)
    assert r.returncode == 0, r.stderr
    assert plan["commits_to_rewrite"] < json.loads(r.stdout)["counts"]["commits_rewritten"] <= plan["commits_with_new_ids"]


@open_defect("a pseudonym is vouched for only by an eraser's receipt, not by an owner erasing herself")
def test_an_owner_erasing_herself_leaves_her_team_notes_trusted_as_an_erasers_erasure_does(tmp_path):
    """README: forget --owner "pseudonymises their identity fields in every commit; team notes they
    wrote stay", and owners may forget their own data. When the eraser dana runs it, alice's team
    fact stays trusted and in the team's view; when alice (no eraser) runs it on herself -- which
    mdmem allows -- the same team fact becomes UNTRUSTED ("last changed by erased-..."), leaves
    team/payments/MEMORY.md and every teammate's startup."""
    results = {}
    for actor in ("dana", "alice"):
        repo = MemoryRepo.init(tmp_path / actor, teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                               now=T0, as_user="dana")
        repo.remember("Alice prefers async standups", as_user="alice", kind="profile", subject="user:alice",
                      key="standup", scope="private", now=T0)
        team_fact(repo, "Refund approvals need two people", key="refund.approvals", user="alice", new_key=True)
        repo.forget(as_user=actor, owner="alice", now=T1)
        repo.close()
        repo = MemoryRepo.open(tmp_path / actor)
        results[actor] = (repo.verify(as_user="bob")["untrusted"],
                          "refund.approvals" in (repo.root / "team/payments/MEMORY.md").read_text())
        repo.close()
    assert results["dana"] == ([], True)
    assert results["alice"] == results["dana"]


def test_forget_text_found_only_in_a_notes_context_scrubs_it_and_keeps_the_team_fact(tmp_path):
    """README: `forget --text "555-0142"` scrubs a string everywhere (quoted copies become
    [removed]); a needle in a note's text is scrubbed so. The same needle in the note's `context`
    (the conversation turn remember keeps beside it) erases the whole team fact, every version,
    though its text never held the string -- the README says nothing of it."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    r = team_fact(repo, "Escalation goes to the on-call lead", key="escalation", new_key=True,
                  context="user said: call Alice on 555-0177 if the pager fails")
    receipt = repo.forget(as_user="dana", texts=["555-0177"], now=T1)
    assert receipt.counts["notes"] == 0
    assert (repo.root / r.path).exists()
    note = repo.get(as_user="bob", path=r.path, now=T1)
    assert note.note.text == "Escalation goes to the on-call lead"
    assert "555-0177" not in (note.note.context or "") and "[removed]" in (note.note.context or "")
    assert repo.prove_gone(["555-0177"], as_user="dana").passed
    repo.close()


@open_defect("only an eraser's signed receipt stands in for the signatures a rewrite drops")
def test_under_require_signed_an_owner_forgetting_her_own_private_note_keeps_teammates_notes_trusted(tmp_path):
    """Owners may forget their own private notes (no eraser needed). The rewrite drops the
    signatures of every later commit -- bob's team notes too -- and only an ERASER's signed receipt
    attests them: after alice erases her own phone number, bob's signed team fact written after it
    is UNTRUSTED ("unsigned") and gone from every startup view."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("needs ssh-keygen")
    from test_signed_erasure import signed_repo, untrusted
    root, keys, as_ = signed_repo(tmp_path)
    as_("alice").remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                          key="phone", now=T0)
    as_("bob").remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                        key="deploy.window", scope="team", team="payments", now=T0)
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert untrusted(fresh) == {}
    as_("alice").forget(as_user="alice", paths=["private/alice/user/alice/profile/phone.md"], now=T1)
    with MemoryRepo.open(root, embedder="none") as fresh:
        flags = untrusted(fresh)
        startup = fresh.startup(as_user="bob", now=T1)
    assert flags == {}, flags
    assert "Billing deploys any weekday" in startup


def test_forget_text_and_prove_gone_catch_a_copy_that_differs_only_in_case(tmp_path):
    """forget --text "Zorblax Bluefin Harbor" scrubs that exact string; alice's team note quoting it
    as "zorblax bluefin harbor" keeps it, in the note, the view and git -- and prove-gone with the
    very needle erased says PASS. README: forget scrubs quoted copies of distinctive text."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    team_fact(repo, "The merger codename is Zorblax Bluefin Harbor", key="merger", new_key=True)
    talks = team_fact(repo, "Reminder: zorblax bluefin harbor talks on Friday", key="talks", user="alice",
                      new_key=True)
    repo.forget(as_user="dana", texts=["Zorblax Bluefin Harbor"], now=T1)
    text = (repo.root / talks.path).read_text()
    proof = repo.prove_gone(["Zorblax Bluefin Harbor"], as_user="dana")
    assert "bluefin harbor" not in text.lower(), text
    assert proof.passed, proof.to_dict()
    # A copy in another case made after the erasure is found by the proof.
    team_fact(repo, "Notes: ZORBLAX BLUEFIN HARBOR moved to Monday", key="moved", user="alice", new_key=True)
    assert not repo.prove_gone(["Zorblax Bluefin Harbor"], as_user="dana").passed
    repo.close()


def test_the_erasure_receipt_does_not_let_a_reader_recover_the_scrubbed_text(tmp_path):
    """forget --text scrubs "555-0173" in a team note to [removed] and keeps the note; the receipt
    (committed, append-only, kept for good by the guard) lists the old version's blob id. A blob id
    is sha1 of the old bytes, which are the scrubbed note with [removed] put back: any reader
    tries the 10,000 candidates and gets the erased phone number in milliseconds. README: the
    receipt records "targets and counts, never content"."""
    import hashlib
    import json
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    r = team_fact(repo, "Escalations after hours: call Alice at 555-0173", key="escalation", new_key=True)
    repo.forget(as_user="dana", texts=["555-0173"], now=T1)
    repo.close()
    blobs = set()
    for line in (tmp_path / "m/audit/erasures.jsonl").read_text().splitlines():
        blobs |= set(json.loads(line).get("erased_blobs", []))
    scrubbed = (tmp_path / "m" / r.path).read_bytes()
    assert b"[removed]" in scrubbed
    recovered = []
    for n in range(10000):
        candidate = scrubbed.replace(b"[removed]", f"555-{n:04d}".encode())
        if hashlib.sha1(b"blob %d\0" % len(candidate) + candidate).hexdigest() in blobs:
            recovered.append(f"555-{n:04d}")
    assert recovered == []
