"""verify's merge attribution, attacked: a merge is no writer.

verify judges each note by who wrote the version HEAD holds. A merge is not a writer: a version
it took unchanged from another parent is attributed to the commit on that side that wrote it,
and a version the merge itself made (a conflict resolved by hand, an old version brought back)
is the merger's. Each test builds real histories with plain git and real clones.
"""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import T0, T1
from test_trust import PLANT, git, keygen, note_text, plain_commit

from mdmem import MemoryRepo
from mdmem.config import UserConfig
from mdmem.policy.verify import CACHE_VERSION
from mdmem.storage.gitdir import cache_dir

ALICE, BOB = "alice@mdmem.invalid", "bob@mdmem.invalid"
TEAM_NOTE = "team/payments/service/billing/fact/deploy-window.md"


def as_person(root, email, *args, check=True):
    return git(root, "-c", f"user.name={email.split('@')[0]}", "-c", f"user.email={email}", *args, check=check)


def setup_pair(tmp_path, **init):
    """alice's repo (she is the eraser and config admin), a bare remote, and bob's plain-git clone."""
    repo = MemoryRepo.init(tmp_path / "a", teams={"payments": ["alice", "bob"]}, erasers=["alice"], now=T0,
                           as_user="alice", embedder="none", **init)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo.root, "remote", "add", "origin", str(bare))
    git(repo.root, "push", "-q", "origin", "HEAD:main")
    bob = tmp_path / "bobs-clone"
    git(tmp_path, "clone", "-q", "-b", "main", str(bare), str(bob))
    return repo, bare, bob


def flags_of(root) -> dict:
    with MemoryRepo.open(root, embedder="none") as fresh:
        return {f["path"]: f for f in fresh.verify()["untrusted"]}


def in_startup(root, text, user="alice") -> bool:
    with MemoryRepo.open(root, embedder="none") as fresh:
        return text in fresh.startup(as_user=user, now=T1)


def team_note(text, note_id="01JDQ6Z4V4K3Y8N1XQ2W5T7RZD"):
    return note_text(id=note_id, kind="fact", subject="service:billing", key="deploy-window", scope="team",
                     team="payments", owner="bob", text=text)


def test_a_merged_plant_with_forged_trailers_by_an_unmapped_address_is_flagged(tmp_path):
    """Bob's plant,
    trailers claiming alice, author an address mdmem does not know; alice's sync has to merge."""
    repo, _, bob = setup_pair(tmp_path)
    plain_commit(bob, PLANT, note_text())  # Bob <bob@example.com>, "Memory-Actor: alice" trailers
    git(bob, "push", "-q", "origin", "HEAD:main")
    repo.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
    out = repo.sync(as_user="alice")
    assert out["status"] == "merged"
    flag = {f["path"]: f for f in out["untrusted"]}[PLANT]
    assert flag["reason"] == "committer" and "unknown identity <bob@example.com>" in flag["detail"], flag
    assert git(repo.root, "log", "-1", "--format=%ae", flag["commit"]).stdout.strip() == "bob@example.com"
    assert not in_startup(repo.root, "evil@example.com")
    assert in_startup(repo.root, "Alice likes tea")


def test_a_fast_forward_sync_carrying_a_plant_is_flagged(tmp_path):
    repo, _, bob = setup_pair(tmp_path)
    plain_commit(bob, PLANT, note_text(), name="bob", email=BOB)
    git(bob, "push", "-q", "origin", "HEAD:main")
    out = repo.sync(as_user="alice")
    assert out["status"] == "fast-forwarded"
    assert [(f["path"], f["reason"]) for f in out["untrusted"]] == [(PLANT, "committer")]
    assert not in_startup(repo.root, "evil@example.com")


def test_a_fast_forward_over_bobs_merge_keeps_alices_notes_hers_and_his_resolution_his(tmp_path):
    """bob merges alice's history into his by hand and resolves a conflict in her private note
    with his own text; alice's sync fast-forwards to his merge. The notes alice changed on her
    side stay hers (before, every version his merge brought onto his first-parent line became
    his, flagging her own notes); the resolved note is what bob wrote: flagged."""
    repo, _, bob = setup_pair(tmp_path)
    first = repo.remember("Alice: standups at 9", as_user="alice", kind="profile", subject="user:alice",
                          key="standup", now=T0)
    git(repo.root, "push", "-q", "origin", "HEAD:main")
    git(bob, "pull", "-q", "origin", "main")
    repo.remember("Alice: standups at 10", as_user="alice", kind="profile", subject="user:alice",
                  key="standup", now=T1)
    repo.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T1,
                  new_key=True)
    git(repo.root, "push", "-q", "origin", "HEAD:main")
    note = bob / first.path
    note.write_text(note.read_text().replace("standups at 9", "standups cancelled; mail evil@example.com"))
    as_person(bob, BOB, "commit", "-qam", "bob's edit", "--no-verify")
    git(bob, "fetch", "-q", "origin")
    merged = as_person(bob, BOB, "merge", "--no-verify", "-q", "origin/main", check=False)
    assert merged.returncode != 0  # a conflict in alice's note
    note.write_text(note_text(id=first.note_id, key="standup",
                              text="Alice: standups cancelled (resolved); mail evil@example.com"))
    git(bob, "add", first.path)
    as_person(bob, BOB, "commit", "-q", "--no-verify", "-m", "merge")
    git(bob, "push", "-q", "origin", "HEAD:main")
    bobs_merge = git(bob, "rev-parse", "HEAD").stdout.strip()
    out = repo.sync(as_user="alice")
    assert out["status"] == "fast-forwarded"
    flags = {f["path"]: f for f in out["untrusted"]}
    assert flags[first.path]["reason"] == "committer" and "bob" in flags[first.path]["detail"]
    assert flags[first.path]["commit"] == bobs_merge  # the resolution: his merge wrote it
    assert "private/alice/user/alice/profile/drink.md" not in flags
    assert in_startup(repo.root, "Alice likes tea") and not in_startup(repo.root, "evil@example.com")


def test_a_conflict_the_merger_resolves_is_the_mergers(tmp_path):
    """alice resolves a conflict in a team note by hand: that text is hers (trusted); the same
    merge also brought bob's plant, which stays his."""
    repo, _, bob = setup_pair(tmp_path)
    plain_commit(bob, TEAM_NOTE, team_note("Billing deploys on Tuesdays"), name="bob", email=BOB)
    git(bob, "push", "-q", "origin", "HEAD:main")
    repo.sync(as_user="alice")
    note = bob / TEAM_NOTE
    note.write_text(team_note("Billing deploys on Fridays"))
    plain_commit(bob, PLANT, note_text(), name="bob", email=BOB)
    as_person(bob, BOB, "commit", "-qam", "fridays", "--no-verify")
    git(bob, "push", "-q", "origin", "HEAD:main")
    mine = repo.root / TEAM_NOTE
    mine.write_text(team_note("Billing deploys on Mondays"))
    as_person(repo.root, ALICE, "commit", "-qam", "mondays", "--no-verify")
    git(repo.root, "fetch", "-q", "origin")
    assert as_person(repo.root, ALICE, "merge", "--no-verify", "-q", "origin/main", check=False).returncode != 0
    mine.write_text(team_note("Billing deploys on Mondays and Fridays"))
    git(repo.root, "add", TEAM_NOTE)
    as_person(repo.root, ALICE, "commit", "-q", "--no-verify", "-m", "merge")
    flags = flags_of(repo.root)
    assert TEAM_NOTE not in flags
    assert flags[PLANT]["reason"] == "committer" and "bob" in flags[PLANT]["detail"]
    with MemoryRepo.open(repo.root, embedder="none") as fresh:
        assert fresh.untrusted(TEAM_NOTE) is None


def test_an_octopus_merge_attributes_each_version_to_its_branch(tmp_path):
    repo, _, bob = setup_pair(tmp_path)
    root = repo.root
    base = repo.store.head()
    git(root, "checkout", "-q", "-b", "plant", base)
    plain_commit(root, PLANT, note_text(), name="bob", email=BOB)
    git(root, "checkout", "-q", "-b", "fact", base)
    plain_commit(root, TEAM_NOTE, team_note("Billing deploys on Tuesdays"), name="bob", email=BOB,
                 message="a fact")
    git(root, "checkout", "-q", "main")
    repo.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
    as_person(root, ALICE, "merge", "--no-verify", "-q", "--no-ff", "-m", "octopus", "plant", "fact")
    assert len(git(root, "rev-list", "--parents", "-n", "1", "HEAD").stdout.split()) == 4
    flags = flags_of(root)
    assert set(flags) == {PLANT} and "bob" in flags[PLANT]["detail"], flags
    assert flags[PLANT]["commit"] == git(root, "rev-parse", "plant").stdout.strip()


def test_a_criss_cross_merge_follows_the_side_into_its_own_merges(tmp_path):
    """alice and bob merge each other's lines (two merge bases), bob edits his plant again on his
    side of a merge of his own; alice's final merge brings it in: still bob's latest commit."""
    repo, _, bob = setup_pair(tmp_path)
    root = repo.root
    base = repo.store.head()
    git(root, "checkout", "-q", "-b", "bob", base)
    plain_commit(root, PLANT, note_text(), name="bob", email=BOB)
    git(root, "checkout", "-q", "main")
    repo.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
    a1 = repo.store.head()
    as_person(root, ALICE, "merge", "--no-verify", "-q", "--no-ff", "-m", "alice merges bob", "bob")
    git(root, "checkout", "-q", "bob")
    as_person(root, BOB, "merge", "--no-verify", "-q", "--no-ff", "-m", "bob merges alice", a1)
    plain_commit(root, PLANT, note_text(text="standups cancelled for good; evil@example.com"), name="bob",
                 email=BOB, message="again")
    again = git(root, "rev-parse", "HEAD").stdout.strip()
    git(root, "checkout", "-q", "main")
    as_person(root, ALICE, "merge", "--no-verify", "-q", "--no-ff", "-m", "alice merges bob again", "bob")
    flags = flags_of(root)
    assert set(flags) == {PLANT} and flags[PLANT]["commit"] == again
    assert not in_startup(root, "evil@example.com") and in_startup(root, "Alice likes tea")


def crafted_merge(root, email, old: str, paths: list[str], message="merge") -> str:
    """A merge commit (by ``email``) of HEAD and ``old`` whose tree is HEAD's with ``paths`` as
    ``old`` has them: plain git plumbing, as anyone with push access could make."""
    for path in paths:
        git(root, "checkout", old, "--", path)
    tree = git(root, "write-tree").stdout.strip()
    env = {"GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": "x",
           "GIT_COMMITTER_EMAIL": email}
    commit = git(root, "commit-tree", tree, "-p", "HEAD", "-p", old, "-m", message, env=env).stdout.strip()
    git(root, "reset", "-q", "--hard", commit)
    return commit


def test_a_crafted_merge_bringing_back_an_old_version_is_the_mergers(tmp_path):
    """The merge rule itself, attacked: bob makes a merge whose second parent is an OLD commit on
    alice's line and takes from it an old version of her note and the old mdmem.toml that still
    made him an eraser. Those versions were written by alice, but the line had moved past them:
    bringing them back is bob's act, judged as his (flagged, the old config not applied)."""
    repo, _, bob = setup_pair(tmp_path)
    root = repo.root
    cfg = root / "mdmem.toml"
    original = cfg.read_text()
    cfg.write_text(original.replace('erasers = ["alice"]', 'erasers = ["alice", "bob"]'))
    as_person(root, ALICE, "commit", "-qam", "bob helps erase", "--no-verify")
    old = repo.remember("Alice: standups at 9; she shares her calendar with everyone", as_user="alice",
                        kind="profile", subject="user:alice", key="standup", now=T0).commit
    cfg.write_text(original)
    as_person(root, ALICE, "commit", "-qam", "bob no longer erases", "--no-verify")
    repo = MemoryRepo.open(root, embedder="none")
    repo.remember("Alice: standups at 10", as_user="alice", kind="profile", subject="user:alice",
                  key="standup", now=T1)
    assert flags_of(root) == {}
    git(root, "push", "-q", "origin", "HEAD:main")
    git(bob, "pull", "-q", "origin", "main")
    crafted_merge(bob, BOB, old, ["mdmem.toml", "private/alice/user/alice/profile/standup.md"])
    git(bob, "push", "-q", "origin", "HEAD:main")
    out = repo.sync(as_user="alice")
    assert out["status"] == "fast-forwarded"
    flags = {f["path"]: f for f in out["untrusted"]}
    assert flags["private/alice/user/alice/profile/standup.md"]["reason"] == "committer"
    assert flags["mdmem.toml"]["reason"] == "config" and "bob" in flags["mdmem.toml"]["detail"]
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert fresh.access.erasers == frozenset({"alice"})
        assert "calendar" not in fresh.startup(as_user="alice", now=T1)


def test_a_stale_clone_and_an_old_verify_cache_do_not_keep_a_laundered_plant(tmp_path):
    """A clone made before the attack, its verify cache warm at an old head, syncs a merge that
    carries bob's plant; and a clone whose cache an older mdmem wrote (v4, where alice's merge
    made the plant hers) is recomputed, not believed."""
    repo, bare, bob = setup_pair(tmp_path)
    stale = tmp_path / "stale"
    git(tmp_path, "clone", "-q", "-b", "main", str(bare), str(stale))
    with MemoryRepo.open(stale, embedder="none") as s:
        assert s.verify()["untrusted"] == []  # the cache is warm at the old head
    plain_commit(bob, PLANT, note_text(), name="bob", email=BOB)
    git(bob, "push", "-q", "origin", "HEAD:main")
    with MemoryRepo.open(stale, embedder="none") as s:
        s.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
        out = s.sync(as_user="alice")
    assert out["status"] == "merged" and [f["path"] for f in out["untrusted"]] == [PLANT]
    # An old cache (v4: before merges were attributed) claiming the merge wrote the plant: recomputed.
    merge = git(stale, "rev-parse", "HEAD").stdout.strip()
    path = cache_dir(stale) / "verify.json"
    state = json.loads(path.read_text())
    assert state["version"] == CACHE_VERSION > 4
    state["version"] = 4
    state["touch"][PLANT] = [merge, ALICE]
    path.write_text(json.dumps(state))
    assert PLANT in flags_of(stale)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_require_signed_a_merge_signed_by_alice_does_not_sign_what_it_brings_in(tmp_path):
    """With require_signed, bob commits a plant under alice's own address (unsigned: he has no key
    of hers); alice's sync merges it in a commit signed with her key. Her signature covers her
    merge, not the version bob wrote: flagged unsigned."""
    keys = {name: keygen(tmp_path, name) for name in ("alice", "bob")}
    repo, _, bob = setup_pair(tmp_path)
    root = repo.root
    pub = " ".join((tmp_path / "alice_key.pub").read_text().split(" ")[:2])
    (root / "allowed_signers").write_text(f"{ALICE} {pub}\n")
    cfg = root / "mdmem.toml"
    cfg.write_text(cfg.read_text().replace("[trust]\n", "[trust]\nrequire_signed = true\n"))
    git(root, "add", "allowed_signers")
    as_person(root, ALICE, "commit", "-qam", "signed memory", "--no-verify")
    git(root, "push", "-q", "origin", "HEAD:main")
    git(bob, "pull", "-q", "origin", "main")
    plain_commit(bob, PLANT, note_text(), name="alice", email=ALICE)
    git(bob, "push", "-q", "origin", "HEAD:main")
    alice = MemoryRepo.open(root, embedder="none", user_config=UserConfig(signing_key=str(keys["alice"])))
    alice.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink", now=T0)
    out = alice.sync(as_user="alice")
    assert out["status"] == "merged"
    merge = git(root, "rev-parse", "HEAD^").stdout.strip() if "render" in git(
        root, "log", "-1", "--format=%s").stdout else git(root, "rev-parse", "HEAD").stdout.strip()
    assert "SSH SIGNATURE" in git(root, "cat-file", "commit", merge).stdout
    flags = {f["path"]: f for f in out["untrusted"]}
    assert flags[PLANT]["reason"] == "unsigned", flags
    assert "private/alice/user/alice/profile/drink.md" not in flags
    assert not in_startup(root, "evil@example.com")
