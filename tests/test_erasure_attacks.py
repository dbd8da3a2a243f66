"""Erasure as an attacker tries it: oracles through caches and the work
tree, a non-eraser's --text changing others' files, lost unrelated edits, stash messages."""
import functools
import json
import re
import subprocess

import pytest
from conftest import T0, T1

from mdmem import MemoryRepo, NotFound, Refused

TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol"]}
SECRET = "Alice's phone is 555-0142, she has a secret medical condition XYZZY"


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    # mallory: a declared user in no team, with only a private root of her own
    r = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="alice", people=["mallory"])
    r.remember(SECRET, as_user="alice", kind="profile", subject="user:alice", key="phone", scope="private", now=T0)
    r.remember("Search admin password is Kestrel-Violet-Lantern-92", as_user="carol", kind="fact",
               subject="service:search", key="pw", scope="team", team="search", now=T0)
    r.recall("phone", as_user="alice")  # views and caches hold every root's text now
    yield r
    r.close()


def test_prove_gone_by_a_non_eraser_is_no_oracle_for_others_text(repo):
    for user in ("bob", "mallory"):
        present = repo.prove_gone(["XYZZY"], as_user=user, owner=user)
        absent = repo.prove_gone(["XYZZZ"], as_user=user, owner=user)
        assert present.passed == absent.passed
        assert present.needles[0]["checks"].keys() == absent.needles[0]["checks"].keys()
        assert {k: v["passed"] for k, v in present.needles[0]["checks"].items()} == \
               {k: v["passed"] for k, v in absent.needles[0]["checks"].items()}
        assert "caches" in present.not_checked
    # the eraser's proof still sees the caches
    assert not repo.prove_gone(["XYZZY"], as_user="dana").passed


@pytest.mark.parametrize("user", ["mallory", "bob"])
def test_forget_text_dry_run_is_no_oracle(repo, user):
    answers = []
    for guess in ("555-0141", "555-0142", "Kestrel-Violet-Lantern-91", "Kestrel-Violet-Lantern-92"):
        try:
            plan = repo.forget(as_user=user, texts=[guess], dry_run=True)
            answers.append(("plan", sorted(f["path"] for f in plan.local_files)))
        except (NotFound, Refused) as e:
            answers.append((type(e).__name__, str(e).replace(guess, "G")))
    assert answers[0] == answers[1] and answers[2] == answers[3], answers


def test_non_eraser_forget_text_changes_nobody_elses_files(repo):
    root = repo.root
    before = git(root, "rev-parse", "HEAD")
    with pytest.raises(NotFound):
        repo.forget(as_user="mallory", texts=["555-0142"])
    with pytest.raises(NotFound):
        repo.forget(as_user="bob", texts=["Kestrel-Violet-Lantern-92"])
    assert git(root, "status", "--porcelain") == ""
    assert git(root, "rev-parse", "HEAD") == before
    assert repo.get(as_user="alice", subject="user:alice", kind="profile", key="phone").note.text == SECRET


def test_forget_keeps_unrelated_uncommitted_edits(repo):
    root = repo.root
    r = repo.remember("Standup is at 9:30 in room Kiwi", as_user="bob", kind="procedure",
                      subject="team:payments", key="standup", scope="team", team="payments", now=T0)
    repo.remember("Vendor contact is vendor-escalation@acme.example", as_user="bob", kind="fact",
                  subject="service:vendor", key="contact", scope="team", team="payments", now=T0)
    f = root / r.path
    f.write_text(f.read_text().replace("room Kiwi", "room Mango (edit in progress)"))
    plan = repo.forget(as_user="dana", texts=["vendor-escalation@acme.example"], dry_run=True)
    assert r.path not in [x["path"] for x in plan.local_files]
    repo.forget(as_user="dana", texts=["vendor-escalation@acme.example"])
    assert "room Mango (edit in progress)" in f.read_text()
    assert git(root, "status", "--porcelain").split() == ["M", r.path]
    assert "vendor-escalation@acme.example" not in git(root, "log", "--all", "-p")


def test_a_stash_message_quoting_erased_text_is_scrubbed(repo):
    root = repo.root
    repo.remember("Alice home address is 42 Wallaby Way Sydney, gate code 9911", as_user="alice", kind="profile",
                  subject="user:alice", key="address", scope="private", new_key=True, now=T0)
    git(root, "-c", "user.name=alice", "-c", "user.email=alice@x.invalid", "commit", "-q", "--allow-empty",
        "-m", "doc: alice at 42 Wallaby Way Sydney")
    (root / "README.md").write_text((root / "README.md").read_text() + "wip\n")
    git(root, "stash", "-q")
    repo.forget(as_user="dana", texts=["42 Wallaby Way Sydney"], force=True)
    assert "Wallaby" not in git(root, "stash", "list")
    assert b"Wallaby" not in (root / ".git" / "logs" / "refs" / "stash").read_bytes()
    assert repo.prove_gone(["42 Wallaby Way Sydney"], as_user="dana").passed


def test_erasing_a_person_keeps_team_notes_their_private_notes_only_quoted(repo):
    """Alice copies two team notes (one in a team she is not in) into her private
    notes and asks for her erasure; the teams' notes, written first, are theirs and stay."""
    deploy = "Billing deploys any weekday before 3pm"
    repo.remember(deploy, as_user="bob", kind="fact", subject="service:billing", key="deploy.window",
                  scope="team", team="payments", now=T0)
    repo.remember(deploy, as_user="alice", kind="fact", subject="service:billing", key="deploy.window", now=T1)
    repo.remember("Search admin password is Kestrel-Violet-Lantern-92", as_user="alice", kind="fact",
                  subject="service:search", key="pw", now=T1)
    plan = repo.forget(as_user="dana", owner="alice", subject="user:alice", dry_run=True, now=T1)
    kept = {k["path"] for k in plan.not_scrubbed}
    assert {"team/payments/service/billing/fact/deploy.window.md", "team/search/service/search/fact/pw.md"} <= kept
    assert not [c["path"] for c in plan.copies_to_scrub if c["path"].startswith("team/")]
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert repo.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window").note.text == deploy
    assert "Kestrel-Violet-Lantern-92" in repo.get(as_user="carol", subject="service:search", kind="fact", key="pw").note.text
    assert deploy in (repo.root / "team/payments/MEMORY.md").read_text()
    assert not (repo.root / "private/alice").exists()
    assert "XYZZY" not in git(repo.root, "log", "--all", "-p")


def test_a_team_note_quoting_the_erased_note_later_is_still_scrubbed(repo):
    repo.remember(SECRET, as_user="bob", kind="fact", subject="service:billing", key="gossip", scope="team",
                  team="payments", now=T1)
    plan = repo.forget(as_user="dana", owner="alice", subject="user:alice", dry_run=True, now=T1)
    assert "team/payments/service/billing/fact/gossip.md" in {c["path"] for c in plan.copies_to_scrub}
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert "XYZZY" not in git(repo.root, "log", "--all", "-p")


def _answer(call, *secrets):
    """What the asker sees: the plan or the error, with the guessed strings masked."""
    try:
        out = json.dumps(call(), sort_keys=True, default=str)
    except (NotFound, Refused) as exc:
        out = f"{type(exc).__name__}: {exc}"
    for s in secrets:
        out = out.replace(s, "G")
    return re.sub(r"erased-[0-9a-f]{8}", "erased-P", out)  # the owner's fresh random pseudonym


@pytest.mark.parametrize("ask", ["text", "subject", "path", "text_and_own", "owner_self"])
def test_forget_dry_run_answers_alike_for_unreadable_and_missing(tmp_path, ask):
    """bob (no eraser, not in team search) asks forget about something that exists only where he
    cannot read (carol's team search, alice's private root) and about something that exists
    nowhere: the two answers are identical, whatever he names."""
    answers = []
    for exists in (True, False):
        repo = MemoryRepo.init(tmp_path / f"m{exists}", teams=TEAMS, erasers=["dana"], now=T0, as_user="alice")
        repo.remember("bob's own note: standup moved to room Kiwi", as_user="bob", kind="fact", subject="user:bob",
                      key="standup", now=T0)
        if exists:
            repo.remember("Search admin password is Kestrel-Violet-Lantern-92", as_user="carol", kind="fact",
                          subject="service:search", key="pw", scope="team", team="search", now=T0)
            repo.remember("Kestrel-Violet-Lantern-92 also opens alice's locker", as_user="alice", kind="fact",
                          subject="service:locker", key="code", now=T0)
        secret, path = "Kestrel-Violet-Lantern-92", "team/search/service/search/fact/pw.md"
        kwargs = {"text": {"texts": [secret]}, "subject": {"subject": "service:search"}, "path": {"paths": [path]},
                  # his own note and the guess together: the plan covers his note either way
                  "text_and_own": {"texts": [secret, "standup moved to room Kiwi"]},
                  "owner_self": {"owner": "bob", "texts": [secret]}}[ask]
        answers.append(_answer(functools.partial(repo.forget, as_user="bob", dry_run=True, now=T1, **kwargs),
                               str(tmp_path / f"m{exists}")))
        assert "search" not in answers[-1] or ask in ("subject", "path"), answers[-1]
    assert answers[0] == answers[1], answers


def test_a_linked_worktree_keeps_its_unrelated_work_when_one_file_in_it_holds_erased_text(repo, tmp_path):
    """`forget` deleted the whole linked worktree (and all its uncommitted work) when
    one untracked file in it held erased text, with no --force and nothing said."""
    wt = tmp_path / "wt"
    git(repo.root, "worktree", "add", "-q", str(wt), "-b", "wtb")
    (wt / "untracked-note.txt").write_text("copy: " + SECRET)
    (wt / "design-doc.md").write_text("important unrelated work in progress")
    note = wt / "team/search/service/search/fact/pw.md"
    note.write_text(note.read_text().replace("92", "93"))
    plan = repo.forget(as_user="dana", owner="alice", subject="user:alice", dry_run=True, now=T1)
    assert [w["action"] for w in plan.worktrees] == ["files scrubbed"]
    receipt = repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert receipt.counts["worktree_files_scrubbed"] == 1
    assert (wt / "design-doc.md").read_text() == "important unrelated work in progress"
    assert "Lantern-93" in note.read_text()
    assert "XYZZY" not in (wt / "untracked-note.txt").read_text()
    assert "copy: " in (wt / "untracked-note.txt").read_text()


def test_erasing_alice_leaves_users_whose_handles_differ_only_in_case(tmp_path):
    """Access control keeps `Alice` and `alice` apart, erasure lower-cased both and
    pseudonymised Alice's commits and notes too (they then broke as invalid and untrusted)."""
    repo = MemoryRepo.init(tmp_path / "mem", teams={**TEAMS, "ops": ["Alice"]}, erasers=["dana"], now=T0,
                           as_user="alice")
    repo.remember(SECRET, as_user="alice", kind="profile", subject="user:alice", key="phone", now=T0)
    kept = repo.remember("odd identity probe text about tea", as_user="Alice", kind="episode", subject="task:p", now=T0)
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    stored = repo.get(as_user="Alice", path=kept.path)
    assert stored.note.owner == "Alice" and "tea" in stored.note.text
    assert "Alice" in git(repo.root, "log", "--all", "--format=%an %ae")
    assert not [b for b in repo.check()[1] if "Alice" in str(b)]


def test_forget_leaves_no_copy_in_kept_packs_rr_cache_or_a_branch_description(repo):
    """Erased objects stayed in .keep packs, plaintext in .git/rr-cache and in a
    branch description in .git/config, and forget reported success."""
    root = repo.root
    git(root, "repack", "-a", "-d", "-q")
    for pack in (root / ".git/objects/pack").glob("*.pack"):
        pack.with_suffix(".keep").write_text("")
    rr = root / ".git/rr-cache/abc"
    rr.mkdir(parents=True)
    (rr / "preimage").write_text("copy: " + SECRET)
    git(root, "config", "branch.main.description", "about " + SECRET)
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert not rr.exists()
    assert "XYZZY" not in (root / ".git/config").read_text()
    objects = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True).stdout
    assert b"XYZZY" not in objects
    assert repo.prove_gone(["medical condition XYZZY"], as_user="dana", owner="alice").passed


def test_erasing_a_subject_covers_its_sub_subjects(repo):
    """Notes under user:alice:oncall stayed (and the dry run did not show them)."""
    repo.remember("Alice is on call Tuesdays", as_user="bob", kind="fact", subject="user:alice:oncall", key="day",
                  scope="team", team="payments", now=T0)
    plan = repo.forget(as_user="dana", owner="alice", subject="user:alice", dry_run=True, now=T1)
    assert "team/payments/user/alice/oncall/fact/day.md" in plan.notes
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert "on call Tuesdays" not in git(repo.root, "log", "--all", "-p")
    assert repo.prove_gone(["Alice is on call Tuesdays"], as_user="dana", owner="alice").passed


def test_forgetting_a_person_again_changes_nothing(repo):
    """A second `forget --owner alice` rewrote the commits made since the first."""
    repo.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    repo.remember("Later fact after the erasure", as_user="bob", kind="fact", subject="service:later", key="k",
                  scope="team", team="payments", now=T1)
    head = git(repo.root, "rev-parse", "HEAD")
    plan = repo.forget(as_user="dana", owner="alice", dry_run=True, now=T1)
    assert plan.commits_to_rewrite == 0
    with pytest.raises(NotFound):
        repo.forget(as_user="dana", owner="alice", now=T1)
    assert git(repo.root, "rev-parse", "HEAD") == head
