"""erasure/proof.py on its own: one repository holding a needle in each place prove-gone reads
(a live note, old git objects, a ref name, a stash message, an untracked file, a symlink out, a
stale embedding-cache journal, the view cache, the index), asked by an eraser, by a person about
themself and by someone who may not read it. Every report is compared whole: which checks exist,
which fail and where, what was not checked and how much. Written against mutmut's survivors
(the previous tests asserted a few checks of a few reports), and quick enough for mutation runs:
the repository is built once per module, with a loopback embedding server for the vectors."""
import json
import shutil
import subprocess

import numpy as np
import pytest
from conftest import T0, T1, team_fact
from embed_server import EmbedServer

from mdmem import MemoryRepo
from mdmem.config import UserConfig
from mdmem.errors import BadInput, Refused
from mdmem.search.embedding_cache import EmbeddingCache, cache_key
from mdmem.storage.gitdir import cache_dir

TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol"]}
LOCKER = "LOCKER-2468"  # in alice's live private note
FEE = "FEE-OLD-7"  # in a superseded payments fact: history only
CAROL = "CAROL-SECRET-5"  # in carol's live search note
REF = "REFNEEDLE-1"  # a branch name
UNTRACKED = "UNTRACKED-NEEDLE-3"  # a file nobody committed
LINKED = "LINKED-NEEDLE-4"  # outside the repo, behind a symlink
JOURNAL = "JOURNAL-NEEDLE-6"  # a stale journal of the embedding cache
STASH = "STASH-NEEDLE-8"  # a stash message
ABSENT = "NOWHERE-AT-ALL-9"
EVERY_CHECK = ["live_notes", "git_objects", "refs_reflogs_stash_notes", "work_tree", "fulltext_index",
               "embedding_cache", "view_cache", "trust_cache", "other_cache_files", "memory_views"]
PERSON_CHECKS = ["live_notes", "git_objects", "refs_reflogs_stash_notes", "work_tree", "fulltext_index",
                 "memory_views"]


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("proof")
    with EmbedServer() as server:
        repo = MemoryRepo.init(base / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
        cfg = repo.root / "mdmem.toml"
        text = cfg.read_text()
        assert 'backend = "minilm"\n' in text
        cfg.write_text(text.replace('backend = "minilm"\n', 'backend = "ollama"\nmodel = "nomic-embed-text"\n', 1))
        git(repo.root, "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam", "embedder",
            "--no-verify")
        repo = MemoryRepo.open(repo.root, user_config=UserConfig(embedder_url=server.url))
        locker = repo.remember(f"Alice's locker code is {LOCKER}", as_user="alice", kind="profile",
                               subject="user:alice", key="locker", now=T0)
        repo.remember(f"The refund fee is {FEE}", as_user="bob", kind="fact", subject="service:billing",
                      key="refund.fee", scope="team", team="payments", now=T0)
        fee = repo.remember("The refund fee is 2 EUR", as_user="bob", kind="fact", subject="service:billing",
                            key="refund.fee", scope="team", team="payments", now=T1)
        carol = repo.remember(f"The search admin is {CAROL}", as_user="carol", kind="fact", subject="service:search",
                              key="admin", scope="team", team="search", now=T0)
        repo.reindex()
        repo.close()  # the view cache's rows reach its file
        repo = MemoryRepo.open(repo.root, user_config=UserConfig(embedder_url=server.url))
        git(repo.root, "branch", f"wip-{REF}")
        (repo.root / "MEMORY.md").write_text((repo.root / "MEMORY.md").read_text() + "\nscratch\n")
        git(repo.root, "stash", "push", "-q", "-m", f"wip {STASH}")
        (repo.root / "notes.txt").write_text(f"remember {UNTRACKED}\n")
        outside = base / "outside.txt"
        outside.write_text(f"{LINKED}\n")
        (repo.root / "link.txt").symlink_to(outside)
        yield {"repo": repo, "locker": locker.path, "fee": fee.path, "carol": carol.path, "server": server}


def failed(needle_report) -> dict[str, list[str]]:
    return {k: c["where"] for k, c in needle_report["checks"].items() if not c["passed"]}


def test_an_erasers_proof_reads_every_place(world):
    repo = world["repo"]
    # Planted here, not in the fixture: opening the embedding cache (any eraser's proof checks
    # what it holds) lets SQLite discard a journal that is not one, so a proof run earlier
    # (mutmut orders the tests its own way) would have removed the needle.
    (cache_dir(repo.root) / "embeddings.sqlite-journal").write_bytes(f"stale {JOURNAL}".encode())
    # a journal beside the view cache: read with the file, not instead of it
    (cache_dir(repo.root) / "viewmeta.sqlite-journal").write_bytes(b"stale")
    try:
        erasers_proof(world, repo)
    finally:
        (cache_dir(repo.root) / "viewmeta.sqlite-journal").unlink()


def erasers_proof(world, repo):
    report = repo.prove_gone([LOCKER, FEE, REF, UNTRACKED, LINKED, JOURNAL, STASH, ABSENT], as_user="dana")
    by = {n["needle_index"]: n for n in report.needles}
    assert list(by) == list(range(8)) and all(list(n["checks"]) == EVERY_CHECK for n in report.needles)
    locker = failed(by[0])
    assert locker["live_notes"] == [world["locker"]]
    assert locker["work_tree"] == sorted([world["locker"], "private/alice/MEMORY.md"])
    assert locker["memory_views"] == ["private/alice/MEMORY.md"]
    assert locker["view_cache"] == ["viewmeta.sqlite"]
    assert len(locker["git_objects"]) == 2 and all(w.startswith("blob ") for w in locker["git_objects"])
    assert locker["fulltext_index"] == [f"fulltext: {world['locker']}"]
    assert set(locker) == {"live_notes", "work_tree", "memory_views", "view_cache", "git_objects", "fulltext_index"}
    fee = failed(by[1])  # superseded: only history (its blob and its view's) and the view cache
    assert set(fee) == {"git_objects", "view_cache"} and len(fee["git_objects"]) == 2, fee
    assert failed(by[2]) == {"refs_reflogs_stash_notes": [f"file name logs/refs/heads/wip-{REF}",
                                                          f"file name refs/heads/wip-{REF}",
                                                          f"ref name refs/heads/wip-{REF}"]}
    assert failed(by[3]) == {"work_tree": ["notes.txt"]}
    assert failed(by[4]) == {}  # a symlink's target is outside what mdmem controls
    assert failed(by[5]) == {"embedding_cache": ["embeddings.sqlite"]}
    stash = failed(by[6])  # the stash list, its reflog and the stash commit's message
    assert stash["refs_reflogs_stash_notes"] == [".git/logs/refs/stash", "stash"]
    assert len(stash["git_objects"]) == 1 and stash["git_objects"][0].startswith("commit ")
    assert failed(by[7]) == {} and by[7]["passed"] is True
    assert [n["passed"] for n in report.needles] == [False] * 4 + [True, False, False, True]
    assert report.passed is False and report.not_checked == {}
    assert report.subject is None and report.owner is None
    assert set(report.scope) == {"no_erasure_in_progress", "caches_hold_only_history"}
    assert all(c["passed"] for c in report.scope.values())
    # the nearest remaining note dana may read: a pointer for review
    assert by[1]["nearest"]["path"] == world["fee"] and 0 < by[1]["nearest"]["cosine"] <= 1
    assert report.to_dict()["needles"][0]["checks"]["live_notes"] == {"passed": False, "where": [world["locker"]]}


def test_a_persons_proof_covers_what_they_may_read_and_counts_the_rest(world):
    repo = world["repo"]
    mine = repo.prove_gone([LOCKER], as_user="alice", owner="alice")
    assert list(mine.needles[0]["checks"]) == PERSON_CHECKS
    assert failed(mine.needles[0]) == {
        "live_notes": [world["locker"]], "work_tree": sorted([world["locker"], "private/alice/MEMORY.md"]),
        "memory_views": ["private/alice/MEMORY.md"], "git_objects": failed(mine.needles[0])["git_objects"],
        "fulltext_index": failed(mine.needles[0])["fulltext_index"]}
    assert mine.needles[0]["nearest"]["path"] == world["locker"]
    # each needle's own nearest note (mutmut: asking for the nearest of nothing survived)
    assert [n["nearest"]["path"] for n in repo.prove_gone([LOCKER, FEE], as_user="alice").needles] == [
        world["locker"], world["fee"]]
    assert mine.scope["no_private_root_for_owner"]["where"] == sorted(
        p for p in git(repo.root, "ls-files").split() if p.startswith("private/alice/"))
    assert mine.scope["no_note_owned"]["where"] == [world["locker"]]
    assert mine.scope["no_orphaned_index_entries"] == {"passed": False, "where": [world["locker"]]}
    # bob may read payments and his own root: alice's and carol's notes are no business of his proof
    theirs = repo.prove_gone([LOCKER, CAROL, FEE], as_user="bob")
    fee = failed(repo.prove_gone([FEE], as_user="dana").needles[0])
    assert [failed(n) for n in theirs.needles[:2]] == [{}, {}]
    assert failed(theirs.needles[2]) == {"git_objects": fee["git_objects"]}
    assert theirs.needles[0]["nearest"]["path"] != world["locker"]
    # the index files hold every root's words: only an eraser's proof scans their bytes
    admin = "admin"  # a word of carol's search note only, kept whole in the index's term dictionary
    assert any(w.startswith(".git/mdmem/fulltext/") for w in failed(repo.prove_gone([admin], as_user="dana").needles[0])
               ["fulltext_index"])
    assert "fulltext_index" not in failed(repo.prove_gone([admin], as_user="bob").needles[0])
    # bob's proof reads every document of the index he may read, past the ones he may not
    assert failed(repo.prove_gone(["EUR"], as_user="bob").needles[0])["fulltext_index"] == [
        f"fulltext: {world['fee']}"]
    hidden = theirs.not_checked
    assert hidden["roots"] == ["private/alice", "team/search"]
    assert hidden["git_metadata"] == "not checked (needs the eraser role)"
    assert hidden["caches"] == "not checked (they hold every root; needs the eraser role)"
    # every object is either checked or counted: nothing silently skipped
    total = len(git(repo.root, "cat-file", "--batch-all-objects", "--batch-check").splitlines())
    alices = repo.prove_gone([ABSENT], as_user="alice")
    assert hidden["git_objects"] > 0 and alices.not_checked["git_objects"] > 0
    readable_by_dana = repo.prove_gone([ABSENT], as_user="dana")
    assert readable_by_dana.not_checked == {}
    assert hidden["git_objects"] == total - checked_objects(repo, "bob")


def checked_objects(repo, user):
    """Objects a user's proof reads: versions of notes in roots they may read, and commits
    touching only such roots (with the repository's own files)."""
    from mdmem.erasure.scan import REPO_FILES, HistoryScan, root_of

    scan = HistoryScan.read(repo.root)

    def readable(root):
        return root == REPO_FILES or repo.access.may_read_root(user, root)
    blobs = {b for p, bs in scan.path_blobs.items() if readable(root_of(p)) for b in bs}
    blobs |= {c for c, roots in scan.commit_roots.items() if all(readable(r) for r in roots)}
    present = set(git(repo.root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    return len(blobs & present)


def test_allowed_mentions_are_not_failures(world):
    """Mentions a person reviewed and kept (allow_paths): their note, the view lines quoting it
    and the index entries built from it pass; anything else holding the needle still fails."""
    repo = world["repo"]
    report = repo.prove_gone([LOCKER], as_user="dana", allow_paths=[world["locker"]])
    assert failed(report.needles[0]) == {}, failed(report.needles[0])
    assert report.passed is True
    # the same allowance does not cover other words around the needle elsewhere
    stray = repo.root / "copy.txt"
    stray.write_text(f"the code was {LOCKER}, said someone\nand another line\n")
    try:
        report = repo.prove_gone([LOCKER], as_user="dana", allow_paths=[world["locker"]])
        assert failed(report.needles[0]) == {"work_tree": ["copy.txt"]}
        # a line quoting the allowed note's link is explained, whatever else the file holds
        stray.write_text(f"- {LOCKER} [[{world['locker']}]]\nunrelated\n")
        assert failed(repo.prove_gone([LOCKER], as_user="dana", allow_paths=[world["locker"]]).needles[0]) == {}
    finally:
        stray.unlink()


def test_scope_checks_by_subject_or_owner(world):
    repo = world["repo"]
    by_subject = repo.prove_gone([ABSENT], as_user="dana", subject="service:billing")
    assert set(by_subject.scope) == {"no_note_for_subject", "no_orphaned_index_entries", "no_erasure_in_progress",
                                     "caches_hold_only_history"}
    assert by_subject.scope["no_note_for_subject"]["where"] == sorted(
        {world["fee"]} | {p for p in git(repo.root, "ls-files").split() if "/service/billing/" in p})
    assert by_subject.scope["no_orphaned_index_entries"] == {"passed": False, "where": [world["fee"]]}
    assert by_subject.subject == "service:billing" and by_subject.owner is None and not by_subject.passed
    by_owner = repo.prove_gone([ABSENT], as_user="dana", owner="carol")
    assert set(by_owner.scope) == {"no_private_root_for_owner", "no_note_owned", "no_orphaned_index_entries",
                                   "no_erasure_in_progress", "caches_hold_only_history"}
    assert by_owner.owner == "carol" and by_owner.subject is None
    assert by_owner.scope["no_private_root_for_owner"] == {"passed": True, "where": []}
    assert by_owner.scope["no_note_owned"] == {"passed": False, "where": [world["carol"]]}
    assert by_owner.scope["no_orphaned_index_entries"] == {"passed": True, "where": []}
    nobody = repo.prove_gone([ABSENT], as_user="dana", subject="service:nothing")
    assert nobody.scope["no_note_for_subject"] == {"passed": True, "where": []}
    assert nobody.passed is True


def test_who_may_ask_and_what_must_be_given(world):
    repo = world["repo"]
    with pytest.raises(BadInput, match="^prove-gone: give at least one --needle$"):
        repo.prove_gone([], as_user="dana")
    with pytest.raises(Refused, match="prove-gone: bob may prove erasure of their own data only"):
        repo.prove_gone([LOCKER], as_user="bob", owner="alice")
    with pytest.raises(Refused):
        repo.prove_gone([LOCKER], as_user="bob", subject="user:alice")
    assert repo.prove_gone([ABSENT], as_user="bob", subject="user:bob").subject == "user:bob"


def test_cannot_reach_names_remotes_and_the_embedding_provider(world):
    repo = world["repo"]
    git(repo.root, "remote", "add", "backup", "/srv/nowhere/mem.git")
    try:
        assert repo.prove_gone([ABSENT], as_user="dana").cannot_reach[0] == (
            "remote backup (/srv/nowhere/mem.git): holds whatever was last pushed; after `forget --push` it must "
            "also expire its reflogs and gc before old objects are gone there")
    finally:
        git(repo.root, "remote", "remove", "backup")
    assert repo.prove_gone([ABSENT], as_user="dana").cannot_reach == [
        "other clones of this repository (each must re-clone or run `mdmem sync`, which refuses erased history)",
        "backups, snapshots and freed disk blocks of this machine",
        f"the embedding provider (ollama at {world['server'].url}) saw the text when it was embedded",
        "anyone or anything that read the memory before (agents' transcripts, exports)"]


def test_caches_holding_erased_texts_and_an_interrupted_erasure_fail_the_scope(repo):
    """An embedding-cache entry for a text no longer in history (a vector is the text, nearly),
    and an erasure's journal left behind: both fail the proof's scope checks."""
    repo.remember("Bob's pager number is 555-0199", as_user="bob", kind="profile", subject="user:bob", key="pager",
                  now=T0)
    assert repo.prove_gone([ABSENT], as_user="dana").scope["caches_hold_only_history"] == {"passed": True, "where": []}
    cache = EmbeddingCache(cache_dir(repo.root) / "embeddings.sqlite")
    try:
        cache.put_many("some-model", {cache_key("some-model", "a text history never held"): np.ones(4, np.float32),
                                      cache_key("some-model", "Bob's pager number is 555-0199"):
                                          np.ones(4, np.float32)})
    finally:
        cache.close()
    # Someone who may not read every root is told nothing about the shared embedding cache (its
    # keys name no root: a count would tell about others' texts); an eraser is.
    assert repo.prove_gone([ABSENT], as_user="dana").scope["caches_hold_only_history"] == {
        "passed": True, "where": []}
    cfg = repo.root / "mdmem.toml"
    cfg.write_text(cfg.read_text().replace("erasers = []", 'erasers = ["dana"]'))
    git(repo.root, "-c", "user.email=mdmem@mdmem.invalid", "-c", "user.name=mdmem", "commit", "-qam", "dana erases",
        "--no-verify")
    with MemoryRepo.open(repo.root, embedder="none") as again:
        report = again.prove_gone([ABSENT], as_user="dana")
    assert report.scope["caches_hold_only_history"] == {
        "passed": False, "where": ["embeddings.sqlite: 1 entr(y/ies) for texts no longer in history"]}
    assert report.passed is False
    (repo.root / ".git" / "mdmem-erasure").mkdir()
    report = repo.prove_gone([ABSENT], as_user="bob", owner="bob")
    assert report.scope["no_erasure_in_progress"] == {
        "passed": False, "where": [".git/mdmem-erasure (an erasure was interrupted: run mdmem forget --resume)"]}


def test_an_allowance_covers_the_allowed_notes_texts_and_nothing_else(repo):
    """Allowed mentions are read from every version the allowed paths ever had: a body with a
    ``---`` line in it, a hand-committed version without frontmatter (and not UTF-8), a path
    history never held; the note's frontmatter (its context) is not a text views quote, so a
    copy of it elsewhere still fails (mutmut: _allowed's splitting and decoding survived)."""
    note = repo.remember("Alice's locker code is NEEDLE-A\n---\nkept in the blue cabinet", as_user="alice",
                         kind="profile", subject="user:alice", key="locker", context="said in room NEEDLE-C today",
                         now=T0).path
    draft = repo.root / "private" / "alice" / "draft.txt"
    draft.write_bytes(b"NEEDLE-B is the code\n---\n\xff footer\n")  # no frontmatter, not UTF-8
    git(repo.root, "add", "private/alice/draft.txt")
    # the commit's message quotes the draft: a commit is never an allowed mention
    git(repo.root, "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid", "commit", "-qm",
        "NEEDLE-B is the code", "--no-verify")
    draft_commit = git(repo.root, "rev-parse", "HEAD").strip()
    stray = repo.root / "copy.txt"  # quotes each allowed text's needle line, and the note's context
    stray.write_bytes(b"Alice's locker code is NEEDLE-A\nNEEDLE-B is the code\nsaid in room NEEDLE-C today\n")
    git(repo.root, "add", "copy.txt")
    git(repo.root, "-c", "user.name=alice", "-c", "user.email=alice@mdmem.invalid", "commit", "-qm", "copy",
        "--no-verify")
    copy_blob = git(repo.root, "rev-parse", "HEAD:copy.txt").strip()
    (repo.root / "notes.txt").write_bytes(b"\xff NEEDLE-C, not UTF-8\n")  # untracked
    view = repo.root / "private" / "alice" / "MEMORY.md"  # a hand edit of a view, not UTF-8 either
    view.write_bytes(view.read_bytes() + b"\xff NEEDLE-C\n")
    allow = [note, "private/alice/draft.txt", "private/alice/never-written.md"]
    report = repo.prove_gone(["NEEDLE-A", "NEEDLE-B", "NEEDLE-C"], as_user="alice", owner="alice",
                             allow_paths=allow)
    assert [failed(n).get("work_tree") for n in report.needles] == [
        None, None, ["copy.txt", "notes.txt", "private/alice/MEMORY.md"]]
    assert [failed(n).get("memory_views") for n in report.needles] == [None, None, ["private/alice/MEMORY.md"]]
    assert [failed(n).get("git_objects") for n in report.needles] == [
        None, [f"commit {draft_commit}"], [f"blob {copy_blob}"]]
    without = repo.prove_gone(["NEEDLE-A", "NEEDLE-B"], as_user="alice", owner="alice", allow_paths=allow[2:])
    assert [failed(n)["work_tree"] for n in without.needles] == [
        sorted(["copy.txt", note, "private/alice/MEMORY.md"]), ["copy.txt", "private/alice/draft.txt"]]


def test_an_erasers_proof_reads_index_files_raw_and_gits_objects_only_inflated(tmp_path):
    """An eraser's proof scans the bytes of both indexes' files (a word is kept whole in the
    term dictionaries of segments, deleted documents' too) and reads git's objects inflated,
    under git_objects: an uncompressed loose object is not reported a second time as a file of
    .git (mutmut: the raw scan's file list and the objects/ exclusion survived)."""
    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
    for text, when in (("The kestrel nests on the roof", T0), ("The roof is empty now", T1)):
        repo.remember(text, as_user="bob", kind="fact", subject="service:billing", key="bird", scope="team",
                      team="payments", now=when)
    assert repo.recall("kestrel roof", as_user="bob", include_history=True)  # builds the versions index
    oid = subprocess.run(["git", "-C", str(repo.root), "-c", "core.looseCompression=0", "hash-object", "-w",
                          "--stdin"], input="a scrap about ZEBRA-OBJ-1\n", capture_output=True, text=True,
                         check=True).stdout.strip()
    obj = repo.root / ".git" / "objects" / oid[:2] / oid[2:]
    assert b"ZEBRA-OBJ-1" in obj.read_bytes()  # stored, not deflated
    # a write-ahead log left beside a cache: its bytes are the cache's too
    (cache_dir(repo.root) / "viewmeta.sqlite-wal").write_bytes(b"stale WAL-NEEDLE-2")
    kestrel, zebra, wal = repo.prove_gone(["kestrel", "ZEBRA-OBJ-1", "WAL-NEEDLE-2"], as_user="dana").needles
    assert failed(wal) == {"view_cache": ["viewmeta.sqlite"]}
    # a check names at most 50 places
    for n in range(51):
        (repo.root / f"scrap-{n:02}.txt").write_text("MANY-NEEDLE-3\n")
    [many] = repo.prove_gone(["MANY-NEEDLE-3"], as_user="dana").needles
    assert failed(many) == {"work_tree": [f"scrap-{n:02}.txt" for n in range(50)]}
    # the superseded version: its document in the versions index, and the segment file's bytes
    segment, document = failed(kestrel)["fulltext_index"]
    assert segment.startswith(".git/mdmem/versions/") and segment.endswith(".seg")
    assert document.startswith("versions: team/payments/service/billing/fact/bird.md@")
    # the allowed note's own words in the index files' bytes are explained by its texts
    allowed = repo.prove_gone(["kestrel"], as_user="dana", allow_paths=["team/payments/service/billing/fact/bird.md"])
    assert "fulltext_index" not in failed(allowed.needles[0])
    # the current index gone (a cache, deleted or moved aside): the versions index is still read
    shutil.rmtree(cache_dir(repo.root) / "fulltext")
    [again] = repo.prove_gone(["kestrel"], as_user="dana").needles
    assert failed(again)["fulltext_index"] == [segment, document]
    assert failed(zebra) == {"git_objects": [f"blob {oid}"]}


def test_a_persons_proof_of_their_subject_names_only_what_they_may_read(tmp_path):
    """bob proves his own subject gone: a note about him in a root he may not read is counted
    among what was not checked, never named (it was: path and key of carol's team note, an
    oracle); an eraser's proof names it."""
    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
    theirs = repo.remember("Bob is being considered for the search lead", as_user="carol", kind="fact",
                           subject="user:bob", key="promo", scope="team", team="search", now=T0).path
    mine = repo.remember("Bob likes tea", as_user="bob", kind="profile", subject="user:bob", key="drink", now=T0).path
    broken = "private/bob/user/bob/profile/broken.md"  # tracked, in the subject's folder, no note
    (repo.root / broken).write_text("---\nkind: [\n---\nBob's old notes\n")
    git(repo.root, "add", broken)
    git(repo.root, "-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "x", "--no-verify")
    repo.reindex()
    bobs = repo.prove_gone(["ABSENT-1"], as_user="bob", subject="user:bob")
    assert bobs.scope["no_note_for_subject"] == {"passed": False, "where": sorted([broken, mine])}
    assert bobs.scope["no_orphaned_index_entries"] == {"passed": False, "where": [mine]}
    assert bobs.not_checked["roots"] == ["team/search"] and bobs.not_checked["git_objects"] > 0
    danas = repo.prove_gone(["ABSENT-1"], as_user="dana", subject="user:bob")
    assert danas.scope["no_note_for_subject"] == {"passed": False, "where": sorted([broken, mine, theirs])}
    assert danas.scope["no_orphaned_index_entries"] == {"passed": False, "where": sorted([mine, theirs])}


def test_caches_hold_only_history_reads_the_index_documents(tmp_path):
    """Every index document (deleted ones too: they linger in the segments) must hold a text
    history or the work tree holds: a hand edit the index took and that was then undone leaves
    one that does not, and an embedding-cache entry, and fails the check (mutmut: the index
    half of the check survived; only the embedding cache's half was tested)."""
    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
    path = repo.remember("Bob likes tea", as_user="bob", kind="profile", subject="user:bob", key="drink", now=T0).path
    other = repo.remember("Bob walks to work", as_user="bob", kind="profile", subject="user:bob", key="commute",
                          new_key=True, now=T0).path
    repo.reindex()
    assert repo.prove_gone(["ABSENT-1"], as_user="dana").scope["caches_hold_only_history"] == {
        "passed": True, "where": []}
    note = repo.root / path
    committed = note.read_text()
    note.write_text(committed.replace("Bob likes tea", "Bob likes coffee"))
    # A second hand edit, kept: its document keeps the catch-up's segment alive (a segment left
    # with no live document is dropped at the next commit, and its deleted ones with it).
    (repo.root / other).write_text((repo.root / other).read_text().replace("walks", "cycles"))
    repo.close()
    repo = MemoryRepo.open(repo.root)  # a new process: its first catch-up reads the work tree
    assert repo.prove_gone(["ABSENT-1"], as_user="dana").scope["caches_hold_only_history"]["passed"] is True
    note.write_text(committed)  # the hand edit undone: the index's document of it is deleted, and lingers
    repo.close()
    repo = MemoryRepo.open(repo.root)
    assert repo.prove_gone(["ABSENT-1"], as_user="dana").scope["caches_hold_only_history"] == {
        "passed": False, "where": ["embeddings.sqlite: 1 entr(y/ies) for texts no longer in history",
                                   "fulltext: 1 document(s) whose text is no longer in history"]}
    # and the needle check names that document, marked as a deleted one
    [coffee] = repo.prove_gone(["coffee"], as_user="dana").needles
    index = failed(coffee)["fulltext_index"]
    assert [w for w in index if not w.startswith(".git/mdmem/fulltext/")] == [f"fulltext: {path} (deleted, lingering)"]


def test_cannot_reach_names_an_openai_provider_at_its_default_address(tmp_path):
    """An openai embedder with no URL in the user's config nor the repo's: the text went to the
    provider's default address (mutmut: the openai branch and the no-URL words survived)."""
    from mdmem.erasure.proof import cannot_reach

    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
    cfg = repo.root / "mdmem.toml"
    text = cfg.read_text()
    assert 'backend = "minilm"\n' in text
    cfg.write_text(text.replace('backend = "minilm"\n', 'backend = "openai"\nmodel = "text-embedding-3-small"\n', 1))
    git(repo.root, "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam", "embedder",
        "--no-verify")
    repo = MemoryRepo.open(repo.root, user_config=UserConfig())
    assert cannot_reach(repo)[2] == ("the embedding provider (openai at its default address) saw the text when it "
                                     "was embedded")


def test_caches_hold_only_history_reads_the_versions_index(tmp_path):
    """A version dropped from history (a person's `git reset --hard` past it) while the versions
    index kept its document: the check names the versions index (mutmut: only the current
    index's half was reached)."""
    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["dana"], as_user="dana", now=T0, embedder="none")
    for text, when in (("The kestrel nests on the roof", T0), ("The roof is empty now", T1)):
        repo.remember(text, as_user="bob", kind="fact", subject="service:billing", key="bird", scope="team",
                      team="payments", now=when)
    assert repo.recall("kestrel roof", as_user="bob", include_history=True)  # builds the versions index
    git(repo.root, "reset", "-q", "--hard", "HEAD~1")
    where = repo.prove_gone(["ABSENT-1"], as_user="dana").scope["caches_hold_only_history"]["where"]
    assert "versions: 1 document(s) whose text is no longer in history" in where, where


def test_the_trust_cache_check_fails_closed_on_a_file_it_cannot_read(tmp_path):
    """A damaged verify.json was searched as bytes, where JSON's escapes hide a
    non-ASCII needle (zoë is written zo\\u00eb); a folder in its place crashed prove-gone."""
    from mdmem.erasure.proof import _trust_cache_check

    cache = tmp_path / "verify.json"

    def check(needle, allowed=()):  # the files the check names (none: passed)
        return _trust_cache_check(cache, lambda path: path.name, needle, list(allowed))

    assert check("zoë-brandt") == []  # absent: nothing to hold it
    cache.write_text(json.dumps({"touch": {"team/x/user/zoë-brandt/fact/a.md": ["c", "e@x"]}}))
    assert check("zoë-brandt") == ["verify.json"]
    assert check("zoë-brandt", ["team/x/user/zoë-brandt/fact/a.md"]) == []
    cache.write_text(cache.read_text()[:-3])  # truncated: \u00eb in its bytes, never "ë"
    assert "ë".encode() not in cache.read_bytes()
    assert check("zoë-brandt") == ["verify.json (damaged: cannot be checked; delete it, it is a cache)"]
    cache.write_text("[" * 100_000)
    assert check("anything") != []
    cache.unlink()
    cache.mkdir()
    assert check("zoë-brandt") == ["verify.json (cannot be read; delete it, it is a cache)"]


def test_the_rest_of_the_cache_folder_is_checked_and_forget_clears_the_daemon_log(tmp_path):
    """prove-gone read no file of .git/mdmem but the index, the two SQLite
    caches and verify.json: a daemon's log, a moved-aside copy or a half-written temporary file
    could keep an erased text unseen. forget now removes the log and temporary files."""
    from mdmem import MemoryRepo
    from mdmem.storage.gitdir import cache_dir

    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["bob", "dana"]}, erasers=["dana"],
                           as_user="bob", embedder="none")
    repo.remember("Quokkaberry pays with a green card", as_user="bob", kind="fact", subject="customer:quokka",
                  key="card", scope="team", team="payments", new_key=True)
    caches = cache_dir(repo.root)
    (caches / "daemon.log").write_text("mdmem: warning about Quokkaberry\n")
    (caches / "verify.tmp").write_text("Quokkaberry")
    repo.forget(as_user="dana", subject="customer:quokka")
    assert not (caches / "daemon.log").exists() and not list(caches.glob("*.tmp"))
    passed = repo.prove_gone(["Quokkaberry"], as_user="dana", subject="customer:quokka").to_dict()
    assert passed["needles"][0]["checks"]["other_cache_files"] == {"passed": True, "where": []}
    (caches / "broken").mkdir(exist_ok=True)
    (caches / "broken" / "viewmeta.sqlite.1").write_bytes(b"...Quokkaberry...")
    (caches / "daemon.log").write_text("Quokkaberry\n")
    failed = repo.prove_gone(["Quokkaberry"], as_user="dana", subject="customer:quokka").to_dict()
    assert sorted(failed["needles"][0]["checks"]["other_cache_files"]["where"]) == [
        ".git/mdmem/broken/viewmeta.sqlite.1", ".git/mdmem/daemon.log"]


def test_the_lock_files_names_do_not_fail_an_erasers_proof(tmp_path):
    """The eraser's proof reads every file of .git outside objects/ and the cache folder, and
    also checks every such file's *name* for the needle (mdmem/erasure/proof.py:179-183: only
    parts[0] in ("objects", CACHE_NAME) is skipped). Before the move the lock files were in
    .git/mdmem/locks/, inside the skipped cache folder; now .git/mdmem-locks/{write,index,
    daemon}.lock (and .git/worktrees/<n>/mdmem-locks/...) are named in the scan, so a proof of
    "daemon" or "lock" fails with only `file name mdmem-locks/daemon.lock` -- names mdmem chose
    itself, which no erasure can remove (forget leaves mdmem-locks be, rightly): the proof
    can never pass for those needles, and prove-gone exits 7 on a clean repository."""
    from mdmem.cli import daemon

    repo = MemoryRepo.init(tmp_path / "mem", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           as_user="alice", embedder="none")
    try:
        team_fact(repo, "Billing deploys any weekday before noon")
        repo.recall("billing", as_user="bob")  # the index lock
        daemon.starting(repo.root)  # the daemon's lock file, as every daemon start or probe makes it
        assert (repo.root / ".git" / "mdmem-locks" / "daemon.lock").is_file()
        report = repo.prove_gone(["daemon", "lock"], as_user="dana").to_dict()
    finally:
        repo.close()
    failing = {name: check["where"] for needle in report["needles"] for name, check in needle["checks"].items()
               if not check["passed"]}
    assert report["passed"], failing
