"""One search index over a workspace's mounts (mdmem/workspace/index.py): recall ranks as one
repository holding the same notes would (the same scores, BM25F's statistics over every mount),
follows each mount's commits and hand edits without a rebuild, shows only what each clone holds in
its own root, lives in the workspace's own cache folder, and an erasure through the workspace
leaves nothing of the erased text there (prove-gone names the cache when something does)."""
from __future__ import annotations

import pytest
from whoosh import index as windex
from workspace_helpers import SETTINGS, T0, git, scope_remote, workspace

from mdmem import MemoryRepo
from mdmem.workspace.index import CACHE_DIR, combined_head, split_head

T1 = "2026-10-02T09:00:00Z"
ROOTS = ["team/payments", "team/search", "private/alice"]
SECRET = "interviewing at Acme Corp next week"


@pytest.fixture
def remotes(tmp_path):
    return {
        "team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "carol"], erasers=["carol"]),
        "team/search": scope_remote(tmp_path, "team/search", members=["alice"]),
        "private/alice": scope_remote(tmp_path, "private/alice", erasers=["carol"]),
    }


@pytest.fixture
def alice(tmp_path, remotes):
    ws = workspace(tmp_path, "alice", remotes, ROOTS)
    yield ws
    ws.close()


# (text, subject, key, scope, team): "deploy" is common in payments and rare elsewhere, so BM25's
# document frequencies counted per repository disagree with one count over every note.
NOTES = [(f"Billing deploy step {i}: deploy the {w} service after the checks", "service:billing", f"step{i}",
          "team", "payments") for i, w in enumerate(["ledger", "invoice", "refund", "gateway", "vault", "tax"])] + [
    ("Search reindex runs nightly; a deploy pauses it", "service:search", "reindex", "team", "search"),
    ("Search deploy freeze on Fridays before the ranking release", "service:search", "freeze", "team", "search"),
    ("Ranking model retrains weekly on click logs", "service:search", "retrain", "team", "search"),
    ("I deploy my dotfiles with a script on Mondays", "user:alice", "dotfiles", "private", None),
    ("My ranking of lunch places: the noodle bar first", "user:alice", "lunch", "private", None),
]
QUERIES = ["deploy freeze", "ranking release", "deploy service checks", "nightly reindex deploy", "lunch ranking"]


def write(target, notes):
    for text, subject, key, scope, team in notes:
        target.remember(text, as_user="alice", kind="fact", subject=subject, key=key, scope=scope, team=team, now=T0,
                        new_key=True)


def test_recall_scores_every_mounts_notes_as_one_repository_holding_them(tmp_path, alice):
    write(alice, NOTES)
    one = MemoryRepo.init(tmp_path / "one", teams={"payments": ["alice"], "search": ["alice"]}, as_user="alice",
                          now=T0, **SETTINGS)
    write(one, NOTES)
    for query in QUERIES:
        spanned = [(h.path, h.score) for h in alice.recall(query, as_user="alice", k=5, now=T1)]
        single = [(h.path, h.score) for h in one.recall(query, as_user="alice", k=5, now=T1)]
        assert spanned == single, query
    one.close()


def test_the_index_follows_a_mounts_commit_and_a_hand_edit_without_a_rebuild(alice):
    write(alice, NOTES[:3])
    first = alice.reindex()
    assert first.rebuilt and first.indexed == 3
    alice.remember("Search deploy window is 10:00 to 12:00", as_user="alice", kind="fact", subject="service:search",
                   key="window", scope="team", team="search", now=T0)
    caught = alice.reindex()
    assert not caught.rebuilt and caught.indexed == 1  # only the mount that moved was diffed
    edited = alice.clone_path("team/payments") / "team/payments/service/billing/fact/step0.md"
    edited.write_text(edited.read_text().replace("ledger", "quokka"))
    hits = alice.recall("quokka", as_user="alice", k=5, now=T1)
    assert [h.path for h in hits] == ["team/payments/service/billing/fact/step0.md"]
    assert [h.path for h in alice.recall("window", as_user="alice", k=1, now=T1)] == \
        ["team/search/service/search/fact/window.md"]
    state = split_head(alice.index_source().index._load_state()["commit"])
    assert state == {root: git(alice.clone_path(root), "rev-parse", "HEAD").strip() for root in ROOTS}


def test_a_clones_file_outside_its_own_root_is_never_shown_as_that_roots_note(alice):
    """A teammate can commit any path into a team repository: a note under private/alice there must
    not be recalled as alice's own (only her private repository holds her root)."""
    real = alice.remember("My locker code is 4512", as_user="alice", kind="fact", subject="user:alice", key="locker",
                          now=T0)
    clone = alice.clone_path("team/payments")
    forged = clone / "private/alice/user/alice/fact/forged.md"
    forged.parent.mkdir(parents=True)
    forged.write_text((alice.root / real.path).read_text().replace("4512", "9999 forged"))
    git(clone, "add", "private")
    git(clone, "-c", "user.name=mallory", "-c", "user.email=m@example.org", "commit", "-qm", "forged", "--no-verify")
    assert [h.path for h in alice.recall("locker code", as_user="alice", k=5, now=T1)] == [real.path]
    assert alice.recall("forged", as_user="alice", k=5, now=T1) == []
    alice.reindex(rebuild=True)
    assert alice.recall("forged", as_user="alice", k=5, now=T1) == []


@pytest.mark.parametrize("events", [True, False], ids=["inotify", "no-events"])
def test_a_removed_mounts_notes_leave_the_index(alice, events):
    """Gone from the cache, not only hidden; also where no kernel events come and the work tree
    is not walked between recalls (the combined head names a mount no longer there: rebuilt)."""
    index = alice.index_source().index
    index.watch_tree, index.worktree_check_seconds = events, 3600
    write(alice, NOTES)
    for _ in range(3):  # past the first calls' walks
        assert any(h.path.startswith("team/search/") for h in alice.recall("reindex", as_user="alice", k=5, now=T1))
    alice.remove("team/search", as_user="alice", force=True)
    assert alice.recall("reindex nightly", as_user="alice", k=5, now=T1) == []
    assert not any(h.path.startswith("team/search/") for h in alice.recall("deploy", as_user="alice", k=20, now=T1))
    with windex.open_dir(str(alice.root / CACHE_DIR / "index" / "fulltext")).reader() as reader:
        held = {fields["path"].split("/")[1] for _, fields in reader.iter_docs()}
    assert held == {"payments", "alice"}  # gone from the cache, not only hidden


def test_history_recall_spans_every_mounts_versions(alice):
    alice.remember("Search deploys on Mondays", as_user="alice", kind="fact", subject="service:search", key="day",
                   scope="team", team="search", now=T0)
    alice.remember("Search deploys on Tuesdays", as_user="alice", kind="fact", subject="service:search", key="day",
                   scope="team", team="search", now=T1)
    alice.remember("I deploy on Sundays", as_user="alice", kind="fact", subject="user:alice", key="day", now=T0)
    hits = alice.recall("deploys Mondays", as_user="alice", k=5, include_history=True, now=T1)
    texts = [h.text for h in hits]
    assert "Search deploys on Mondays" in texts and not next(h for h in hits if "Mondays" in h.text).current
    past = alice.recall("search deploys", as_user="alice", k=5, at="2026-10-01T12:00:00Z", now=T1)
    assert [h.text for h in past if h.path.startswith("team/search/")] == ["Search deploys on Mondays"]


def test_the_index_is_kept_in_the_workspaces_cache_folder(alice):
    write(alice, NOTES[:2])
    alice.recall("deploy", as_user="alice", k=5, now=T1)
    assert (alice.root / CACHE_DIR / "index" / "fulltext").is_dir()
    for root in ROOTS:  # no mount's own cache is built for a workspace's recall
        assert not (alice.clone_path(root) / ".git" / "mdmem" / "fulltext").exists()


def test_forget_through_the_workspace_leaves_nothing_in_its_index_and_the_proof_names_a_leftover(tmp_path, remotes):
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember(f"Alice is {SECRET}", as_user="alice", kind="fact", subject="user:alice", key="job", now=T0)
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy", scope="team", team="payments", now=T0)
    assert all(m.ok for m in alice.sync(as_user="alice", push=True).mounts)
    alice.close()
    carol = workspace(tmp_path, "carol", remotes, ["team/payments", "private/alice"])
    assert carol.recall("Acme", as_user="carol", k=5, now=T1) == []  # carol may not read it, her index holds it
    # An erasure made in a clone by hand: the workspace's index still holds the text, and the proof says so.
    carol.repo_for("private/alice").forget(as_user="carol", owner="alice")
    proof = carol.prove_gone([SECRET], as_user="carol", owner="alice")
    assert proof.verdict == "FAIL"
    assert proof.workspace_files == [f"{CACHE_DIR}/index/fulltext: 1 document(s) whose text is no longer in history"]
    assert SECRET not in str(proof.to_dict())
    # Through the workspace the index is purged (and rebuilt from the notes when next asked).
    carol.forget(as_user="carol", owner="alice")
    assert carol.prove_gone([SECRET], as_user="carol", owner="alice").verdict == "PASS"
    assert [h.path for h in carol.recall("billing deploys", as_user="carol", k=5, now=T1)] == \
        ["team/payments/service/billing/fact/deploy.md"]
    carol.close()


def test_a_combined_head_names_each_mounts_tip():
    tips = {"team/b": "1" * 40, "private/a": None, "team/a": "2" * 40}
    head = combined_head(tips)
    assert split_head(head) == tips
    assert head == combined_head(dict(reversed(list(tips.items()))))  # the same mounts, the same head
    assert split_head("3" * 40) is None and split_head(None) is None


def test_a_team_that_removes_the_person_stops_answering_their_next_recall(tmp_path):
    """Who may read a mount is decided again whenever its tip or its mdmem.toml changes, even in a
    workspace kept open (the answer is kept between recalls only while neither moved)."""
    remotes = {"team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "dana"], founder="dana"),
               "private/alice": scope_remote(tmp_path, "private/alice")}
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                   key="deploy", scope="team", team="payments", now=T0)
    assert [h.path for h in alice.recall("billing deploys", as_user="alice", k=5, now=T1)] == \
        ["team/payments/service/billing/fact/deploy.md"]
    clone = alice.clone_path("team/payments")  # dana's commit, as a pull brings it
    toml = clone / "mdmem.toml"
    toml.write_text(toml.read_text().replace('payments = ["alice", "dana"]', 'payments = ["dana"]'))
    git(clone, "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam", "alice leaves")
    assert alice.recall("billing deploys", as_user="alice", k=5, now=T1) == []
    alice.close()
