"""prove-gone fails closed on what it cannot read, and forget clears what it left.

A proof passed while an erased note's text was still on disk in files it did not read or could
not see into: a linked worktree's own index, Whoosh files outside the current index (compressed,
so a byte scan sees nothing), the view cache's JSON rows (ë written as \\u00eb), a database's
journal without its database, a pack git does not list, a linked worktree's files. One repository
is built and erased once; each test plants one pre-erasure copy into a fresh copy of it."""
import shutil
import subprocess
import time

import pytest

from mdmem import MemoryRepo
from mdmem.storage.gitdir import cache_dir

TEAMS = {"payments": ["alice", "bob", "dana"]}
TEXT = "Zoë Ångström manager is Quentin Øby"
NEEDLES = ["Ångström", "Quentin"]


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def failures(root, needles=NEEDLES) -> dict:
    repo = MemoryRepo.open(root, embedder="none")
    try:
        report = repo.prove_gone(needles, as_user="dana", subject="customer:zoe").to_dict()
    finally:
        repo.close()
    out: dict = {}
    for needle in report["needles"]:
        for name, check in needle["checks"].items():
            if not check["passed"]:
                out.setdefault(name, set()).update(check["where"])
    assert report["passed"] == (not out and all(c["passed"] for c in report["scope"].values()))
    return out


def noted(root) -> MemoryRepo:
    """A repository at ``root`` holding the note about zoe (TEXT), open."""
    repo = MemoryRepo.init(root, teams=TEAMS, erasers=["dana"], as_user="alice", embedder="none")
    repo.remember(TEXT, as_user="bob", kind="fact", subject="customer:zoe", key="manager", scope="team",
                  team="payments", new_key=True)
    return repo


def erase(root) -> None:
    """dana forgets customer:zoe in the repository at ``root``."""
    eraser = MemoryRepo.open(root, embedder="none")
    eraser.forget(as_user="dana", subject="customer:zoe")
    eraser.close()


@pytest.fixture(scope="module")
def erased(tmp_path_factory):
    """(the erased repository, the pre-erasure copies of its caches and objects)."""
    base = tmp_path_factory.mktemp("erased")
    repo = noted(base / "m")
    repo.remember("Acme is a fine customer", as_user="bob", kind="fact", subject="customer:acme", key="status",
                  scope="team", team="payments", new_key=True)
    repo.recall("who manages zoe", as_user="bob")  # the index holds the note
    repo.close()
    saved = base / "saved"
    shutil.copytree(cache_dir(repo.root), saved / "cache")
    git(repo.root, "repack", "-a", "-d", "-q")
    shutil.copytree(repo.root / ".git" / "objects" / "pack", saved / "pack")
    erase(repo.root)
    assert failures(repo.root) == {}  # honestly gone
    return repo.root, saved


@pytest.fixture
def copy(erased, tmp_path):
    root, saved = erased
    shutil.copytree(root, tmp_path / "m", symlinks=True)
    return tmp_path / "m", saved


def test_whoosh_files_outside_the_current_index_fail_the_proof(copy):
    root, saved = copy
    caches = cache_dir(root)
    old_segments = sorted((saved / "cache" / "fulltext").glob("*.seg"))
    assert old_segments
    # A stale segment beside the current index, as a kill mid-merge leaves one.
    shutil.copy(old_segments[0], caches / "fulltext" / ("MAIN_stale" + old_segments[0].name[5:]))
    assert "fulltext_index" in failures(root)
    (caches / "fulltext" / ("MAIN_stale" + old_segments[0].name[5:])).unlink()
    # A swap a kill interrupted (fulltext.old) and a copy moved aside (broken/).
    for where in ("fulltext.old", "broken/fulltext-1"):
        shutil.copytree(saved / "cache" / "fulltext", caches / where)
        assert any("cannot be checked" in w for w in failures(root)["other_cache_files"])
        shutil.rmtree(caches / where, ignore_errors=True)  # (an open may have cleared it since)
    # An index folder whose table of contents is gone.
    shutil.rmtree(caches / "fulltext")
    shutil.copytree(saved / "cache" / "fulltext", caches / "fulltext")
    for toc in (caches / "fulltext").glob("*.toc"):
        toc.unlink()
    assert "fulltext_index" in failures(root)


def test_the_view_cache_is_read_for_the_needle_as_json_writes_it(copy):
    root, saved = copy
    caches = cache_dir(root)
    assert "Ångström".encode() not in (saved / "cache" / "viewmeta.sqlite").read_bytes()  # \u00c5ngstr\u00f6m
    shutil.copy(saved / "cache" / "viewmeta.sqlite", caches / "viewmeta.sqlite")
    assert failures(root, ["Ångström"])["view_cache"] == {"viewmeta.sqlite"}


def test_a_journal_without_its_database_and_a_folder_in_a_databases_place_fail(copy):
    root, saved = copy
    caches = cache_dir(root)
    (caches / "viewmeta.sqlite").unlink(missing_ok=True)
    shutil.copy(saved / "cache" / "viewmeta.sqlite", caches / "viewmeta.sqlite-journal")
    assert failures(root)["view_cache"] == {"viewmeta.sqlite"}
    (caches / "viewmeta.sqlite-journal").unlink()
    (caches / "embeddings.sqlite-wal").mkdir()
    assert failures(root)["embedding_cache"] == {
        "embeddings.sqlite-wal (not a file that can be read: cannot be checked; delete it, it is a cache)"}


@pytest.mark.parametrize("where", ["pack/pack-{}.pack", "pack/tmp_pack_{}", "incoming-x1/pack/pack-{}.pack"])
def test_objects_git_does_not_list_fail_the_proof(copy, where):
    """A pack without its index, a killed fetch's temporary pack, a killed push's quarantine:
    git's object listing skips them, so the proof names them instead of passing."""
    root, saved = copy
    old = next((saved / "pack").glob("*.pack"))
    target = root / ".git" / "objects" / where.format(old.stem[5:])
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(old, target)
    assert [w.split(" ")[0] for w in failures(root)["git_objects"]] == [f".git/objects/{where.format(old.stem[5:])}"]


def test_a_linked_worktree_keeps_no_index_and_no_file_with_the_erased_text(tmp_path):
    """A process working in a linked worktree keeps its own index in .git/worktrees/<n>/mdmem:
    forget left it (holding the erased note) and the proof only scanned its compressed bytes.
    Files in a linked worktree were not checked at all."""
    root = tmp_path / "m"
    noted(root).close()
    tree = tmp_path / "side"
    git(root, "worktree", "add", "-q", "-b", "side", str(tree))
    side = MemoryRepo.open(tree, embedder="none")
    assert side.recall("who manages zoe", as_user="bob")  # its own index holds the note
    side.close()
    linked = root / ".git" / "worktrees" / "side" / "mdmem"
    assert (linked / "fulltext").is_dir()
    saved = tmp_path / "saved"
    shutil.copytree(linked / "fulltext", saved)
    erase(root)
    assert not (linked / "fulltext").exists()
    assert failures(root) == {}
    shutil.copytree(saved, linked / "fulltext")  # a process there wrote it back from its old state
    assert any(w.startswith(".git/worktrees/side/mdmem/fulltext: ") for w in failures(root)["fulltext_index"])
    shutil.rmtree(linked / "fulltext")
    (tree / "notes.txt").write_text(f"copied: {TEXT}\n")
    assert failures(root)["work_tree"] == {f"worktree {tree}: notes.txt"}


@pytest.mark.parametrize("where", ["objects/info/notes.txt", "objects/pack/pack-1234.keep", "mdmem/models/x.json"])
def test_files_beside_git_objects_and_in_models_are_read(copy, where):
    """objects/info/, a pack's .keep or .promisor, and the embedder's models/ folder were
    skipped whole; text there passed the proof (second round)."""
    root, _ = copy
    target = root / ".git" / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"kept: {TEXT}\n")
    check = "other_cache_files" if where.startswith("mdmem/") else "git_objects"
    assert failures(root)[check] == {f".git/{where}"}  # named as the person finds it


def test_a_database_row_across_an_overflow_seam_and_a_compressed_copy_fail(copy):
    """A long row continues on overflow pages, each starting with a 4-byte link: a needle
    across that seam is in no page's bytes, so the proof also reads every database's rows. A
    gzip named *.sqlite.gz was taken for a database and scanned as bytes."""
    import gzip
    import sqlite3

    root, _ = copy
    caches = cache_dir(root)

    def make(path, shift):
        path.unlink(missing_ok=True)
        db = sqlite3.connect(path)
        db.execute("PRAGMA page_size=1024")
        db.execute("CREATE TABLE t (v TEXT)")
        db.execute("INSERT INTO t VALUES (?)", ("x" * shift + f" {TEXT} " + "y" * 3000,))
        db.commit()
        db.close()

    probe = caches / "vectors.sqlite"
    shift = next(s for s in range(2000) if (make(probe, s), b"Quentin" not in probe.read_bytes())[1])
    assert "Quentin" in sqlite3.connect(probe).execute("SELECT v FROM t").fetchone()[0]
    assert failures(root, ["Quentin"])["other_cache_files"] == {".git/mdmem/vectors.sqlite"}, shift
    probe.unlink()
    (caches / "viewmeta.sqlite.bak.gz").write_bytes(gzip.compress(TEXT.encode()))
    assert failures(root, ["Quentin"])["other_cache_files"] == {
        ".git/mdmem/viewmeta.sqlite.bak.gz (compressed or encoded: cannot be checked as bytes; delete it, "
        "it is a cache)"}


@pytest.mark.parametrize("gone", [False, True], ids=["present", "folder deleted"])
def test_forget_moves_a_detached_linked_worktree_off_the_erased_history(tmp_path, gone):
    """A detached linked worktree's HEAD was moved after the reflogs expired (the move logged
    the erased commit, whose objects then stayed); with its folder deleted the move failed
    silently, and its index kept the erased blobs alive."""
    root = tmp_path / "m"
    noted(root).close()
    tree = tmp_path / "side"
    git(root, "worktree", "add", "-q", "--detach", str(tree))
    if gone:
        shutil.rmtree(tree)
    erase(root)
    assert failures(root) == {}


def test_a_repository_whose_git_directory_lives_elsewhere_and_its_linked_worktrees(tmp_path):
    """.git a file (a linked worktree, --separate-git-dir): the proof crashed on paths outside
    the work tree, and forget crashed half way from a linked worktree. A separate git dir is
    erased and proved; a linked worktree proves and is told to erase in the main worktree."""
    from mdmem.errors import Conflict

    root = tmp_path / "m"
    noted(root).close()
    moved = tmp_path / "gitdir"
    shutil.move(root / ".git", moved)
    (root / ".git").write_text(f"gitdir: {moved}\n")
    git(root, "config", "core.worktree", str(root))
    tree = tmp_path / "side"
    git(root, "worktree", "add", "-q", "-b", "side", str(tree))
    linked = MemoryRepo.open(tree, embedder="none")
    with pytest.raises(Conflict, match="main worktree"):
        linked.forget(as_user="dana", subject="customer:zoe")
    linked.close()
    assert set(failures(tree)) >= {"live_notes", "git_objects"}  # proved from the linked worktree
    erase(root)
    assert failures(root) == {}
    assert failures(tree) == {}


def test_a_linked_worktrees_embedding_cache_holds_only_texts_history_holds(copy):
    """The check that every cached vector belongs to a text history still holds read only
    the repository's own cache folder: a linked worktree's vectors of an
    erased text would stay unflagged (their keys are hashes: no byte scan finds the text)."""
    import numpy as np

    from mdmem.search.embedding_cache import EmbeddingCache, cache_key

    root, _ = copy
    folder = root / ".git" / "worktrees" / "gone" / "mdmem"
    folder.mkdir(parents=True)
    cache = EmbeddingCache(folder / "embeddings.sqlite")
    cache.put_many("some-model", {cache_key("some-model", TEXT): np.ones(4, dtype=np.float32)})
    cache.close()
    repo = MemoryRepo.open(root, embedder="none")
    try:
        report = repo.prove_gone(NEEDLES, as_user="dana", subject="customer:zoe").to_dict()
    finally:
        repo.close()
    assert report["scope"]["caches_hold_only_history"]["where"] == [
        ".git/worktrees/gone/mdmem/embeddings.sqlite: 1 entr(y/ies) for texts no longer in history"]


def test_an_interrupted_erasure_is_finished_only_in_the_main_worktree(tmp_path, monkeypatch):
    """Opening a linked worktree finished an interrupted erasure there: the receipt landed on
    the linked worktree's branch, the main worktree kept the erased note, and the journal was
    gone. It is refused there, journal kept; the main one finishes it."""
    from conftest import T1

    import mdmem.erasure.forget as fm
    from mdmem.erasure.journal import Journal
    from mdmem.errors import Conflict
    from mdmem.model.clock import parse_time

    root = tmp_path / "m"
    repo = noted(root)
    tree = tmp_path / "side"
    git(root, "worktree", "add", "-q", "-b", "side", str(tree))
    with monkeypatch.context() as m:
        m.setattr(fm, "_run", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with repo.store.locked(), pytest.raises(KeyboardInterrupt):
            fm.forget(repo, as_user="dana", when=parse_time(T1), subject="customer:zoe")
    repo.close()
    assert Journal(root).exists()
    with pytest.raises(Conflict, match="main worktree"):
        MemoryRepo.open(tree, embedder="none")
    assert Journal(root).exists()
    MemoryRepo.open(root, embedder="none").close()  # finishes it
    assert not Journal(root).exists()
    assert failures(root) == {}


def test_a_locked_linked_worktree_that_is_not_here_fails_the_proof(copy, tmp_path):
    """A locked worktree whose folder is away (an unmounted disk) may come back holding the
    erased text; the proof walked nothing there and passed."""
    root, _ = copy
    tree = tmp_path / "usb"
    git(root, "worktree", "add", "-q", "--detach", str(tree))
    git(root, "worktree", "lock", str(tree))
    shutil.move(tree, tmp_path / "unmounted")
    assert [w.split(" (")[0] for w in failures(root)["work_tree"]] == [f"worktree {tree}"]
    git(root, "worktree", "unlock", str(tree))
    assert failures(root) == {}  # unlocked and gone: named in cannot_reach instead
    repo = MemoryRepo.open(root, embedder="none")
    assert any(str(tree) in line for line in repo.prove_gone(NEEDLES, as_user="dana").cannot_reach)
    repo.close()


def test_short_needles_do_not_match_the_random_bytes_of_vectors_graphs_and_commit_graphs(copy):
    """A two-letter surname matched by chance in the embedder's graph (weights), the
    embedding cache's vectors and git's binary side files: a proof after a clean erasure failed."""
    import numpy as np

    from mdmem.search.embedding_cache import EmbeddingCache

    root, _ = copy
    noise = (b"\x01\x02 Wu \x03\x04" * 200)[:1536]  # as random float bytes may spell it
    cache = EmbeddingCache(cache_dir(root) / "embeddings.sqlite")
    cache.put_many("m", {"k": np.frombuffer(noise, dtype=np.float32)})
    cache.close()
    git(root, "commit-graph", "write", "--reachable")
    info = root / ".git" / "objects" / "info"
    (info / "commit-graph").write_bytes((info / "commit-graph").read_bytes() + noise[:4096])
    report = MemoryRepo.open(root, embedder="none").prove_gone(["Wu"], as_user="dana").to_dict()
    bad = {k for n in report["needles"] for k, c in n["checks"].items() if not c["passed"]}
    assert bad == set()


def test_a_folder_where_a_database_keeps_its_journal_is_named_not_crashed_on(copy):
    """The proof opened the embedding cache as the cache does: it wrote, and a folder at
    embeddings.sqlite-journal made it move the good database to broken/ and crash (exit 70);
    `mdmem index --rebuild` crashed the same way."""
    import numpy as np

    from mdmem.search.embedding_cache import EmbeddingCache

    root, _ = copy
    caches = cache_dir(root)
    cache = EmbeddingCache(caches / "embeddings.sqlite")
    cache.put_many("m", {"k": np.ones(4, dtype=np.float32)})
    cache.close()
    before = (caches / "embeddings.sqlite").read_bytes()
    (caches / "embeddings.sqlite-journal").mkdir()
    assert failures(root)["embedding_cache"] == {
        "embeddings.sqlite-journal (not a file that can be read: cannot be checked; delete it, it is a cache)"}
    assert (caches / "embeddings.sqlite").read_bytes() == before and not (caches / "broken").exists()
    reopened = EmbeddingCache(caches / "embeddings.sqlite")  # as an index rebuild opens it
    assert list(reopened.get_many(["k"])) == ["k"]  # the database kept, the folder moved aside
    reopened.close()
    assert not (caches / "embeddings.sqlite-journal").exists()


def test_a_proof_passes_while_folders_under_git_come_and_go(copy):
    """A repack deletes the loose-object folders it emptied (and a writer its lock files) while
    the proof walks .git: pathlib's walk raised FileNotFoundError on a folder removed under it
    and the proof failed with a traceback. A reading that saw something vanish is made again."""
    root, _ = copy
    churn = root / ".git" / "churn"
    stop = root.parent / "stop"
    churner = subprocess.Popen(
        ["sh", "-c", f'while [ ! -e "{stop}" ]; do mkdir -p "{churn}/a/b/c/d"; touch "{churn}/a/b/c/d/f"; '
                     f'rm -rf "{churn}"; sleep 0.3; done'])
    try:
        for _ in range(25):
            assert failures(root) == {}
    finally:
        stop.touch()
        churner.wait(timeout=30)


def test_a_proof_waits_for_housekeeping_and_housekeeping_for_a_proof(copy):
    """Housekeeping moves objects between files (a pack being written is one git does not list
    yet): a proof reads .git with the repository's housekeeping lock shared, housekeeping
    takes it alone."""
    import threading

    from mdmem.storage.gitstore import GitStore
    from mdmem.storage.maintenance import housekeeping_lock

    root, _ = copy
    results: list = []
    with housekeeping_lock(root, shared=False, timeout=5):
        proof = threading.Thread(target=lambda: results.append(failures(root)))
        proof.start()
        proof.join(timeout=1.0)
        assert proof.is_alive() and not results  # waiting for the housekeeping to end
    proof.join(timeout=60)
    assert results == [{}]
    with housekeeping_lock(root, shared=True, timeout=5):  # as a proof holds it
        proc = GitStore(root).housekeep_in_background()
        time.sleep(1.0)
        assert proc.poll() is None  # waiting for the proof, not packing under it
    assert proc.wait(timeout=60) == 0


def test_a_file_that_vanishes_at_every_reading_fails_the_proof(copy, monkeypatch):
    """A file renamed while the proof walks may be in neither listing: a proof that saw files
    vanish reads again, and names what kept vanishing to fail (never a PASS that skipped it)."""
    import pathlib

    root, _ = copy
    planted = root / ".git" / "description"
    real = pathlib.Path.read_bytes

    def vanishing(path):
        if path == planted:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(pathlib.Path, "read_bytes", vanishing)
    found = failures(root)
    assert any(".git/description (changed while the proof read it" in where
               for where in found.get("other_cache_files", ())), found
