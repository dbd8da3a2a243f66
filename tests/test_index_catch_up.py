"""The full-text index's catch-up beside writes and other processes: a catch-up that waited for the
lock, ran mid-write or was killed after its index commit never loses a superseded note nor keeps
an old version for good; a table of contents replaced by another commit, or git status racing a
write, never moves a healthy index aside; small segments are merged within a budget per commit,
rank as a rebuild once merged, and big segments are never dropped. Real processes where the race
needs them; kill points and pauses are put into the child process by wrapping the named function."""
from __future__ import annotations

import json
import os
import random
import shutil
import time

import pytest
from conftest import T0, T1, start_python, stop, team_fact

from mdmem import MemoryRepo
from mdmem.search import fulltext
from mdmem.search.bulkwriter import BulkWriter
from mdmem.storage.gitdir import cache_dir

VAULT = dict(subject="service:billing", key="vault.codename")


def _texts(hits) -> list[str]:
    return [h.text for h in hits]


def _broken(root) -> list[str]:
    aside = cache_dir(root) / "broken"
    return sorted(os.listdir(aside)) if aside.exists() else []


HOLDER = """
    import sys
    from mdmem import MemoryRepo
    from mdmem.search.note_index import index_lock
    root = {root!r}
    lock = index_lock(root)
    lock.acquire()
    print("held", flush=True)
    sys.stdin.readline()
    r = MemoryRepo.open(root)
    r.index.lock = lambda: lock  # this process's own catch-up, under the lock it holds
    r.recall("vault", as_user="bob")
    print("caught", flush=True)
    lock.release()
    sys.stdin.readline()
"""


WAITER = """
    from mdmem import MemoryRepo
    from mdmem.search.note_index import NoteIndex
    original = NoteIndex.lock
    def lock(self):
        print("waiting", flush=True)  # HEAD has been read (note_index._sync): now the index lock
        return original(self)
    NoteIndex.lock = lock
    r = MemoryRepo.open({root!r})
    r.recall("vault", as_user="bob")
    print("done", flush=True)
"""


def test_a_catch_up_that_waited_for_the_lock_moves_state_back_and_a_superseded_note_stays_found(repo):
    """NoteIndex._sync reads HEAD (note_index.py:178) before it takes the index lock
    (:198) and, under the lock, catches up from state.json's commit to that HEAD and saves it as
    state.json's commit . If another process caught the index up past that HEAD while
    this one waited, state.json goes BACK to the older commit while the index holds the newer
    notes. The next catch-up then sees those notes as new in HEAD ("fresh") and
    add_document's them without deleting what is indexed (:229): the superseded version stays
    in the index next to the new one, for every process, until the note changes again. Here: A reads
    HEAD, waits for the lock; the vault note is written; B catches up (state -> H1); A saves H0;
    the note is updated; a fresh process finds the superseded "alpha1" text. Fix: read HEAD again
    under the lock (or never save a commit that is an ancestor of state.json's)."""
    team_fact(repo, "Deploys happen on Tuesdays")
    repo.recall("deploys", as_user="bob", now=T0)
    root = str(repo.root)
    holder = start_python(HOLDER.format(root=root))
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        waiter = start_python(WAITER.format(root=root))
        assert waiter.stdout.readline().strip() == "waiting", waiter.stderr.read()
        team_fact(repo, "The vault codename is alpha1", new_key=True, **VAULT)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "caught", holder.stderr.read()
        assert waiter.stdout.readline().strip() == "done", waiter.stderr.read()
    finally:
        stop(holder, *([waiter] if waiter else []))
    team_fact(repo, "The vault codename is beta2", **VAULT)
    fresh = MemoryRepo.open(repo.root)
    hits = fresh.recall("vault codename alpha1 beta2", as_user="bob", k=5, now=T1)
    assert [t for t in _texts(hits) if "vault" in t] == ["The vault codename is beta2"]


PAUSED_WRITER = """
    import sys
    from mdmem import MemoryRepo
    from mdmem.storage import gitstore
    def paused(name):
        original = getattr(gitstore.GitStore, name)
        def run(self, changes):
            print("moved", flush=True)  # the branch has moved; the work tree is written next
            sys.stdin.readline()
            return original(self, changes)
        setattr(gitstore.GitStore, name, run)
    paused("_sync_worktree")
    paused("_write_files")
    r = MemoryRepo.open({root!r})
    r.remember("The vault codename is beta2", as_user="bob", kind="fact", subject="service:billing",
               key="vault.codename", scope="team", team="payments")
    print("written", flush=True)
"""


LONG_READER = """
    import json, sys
    from mdmem import MemoryRepo
    from mdmem.search import note_index
    recent_max = {recent_max!r}
    if recent_max is not None:
        note_index.RECENT_MAX = recent_max
    r = MemoryRepo.open({root!r})
    for _ in range(3):  # the two calls that walk the tree; then the watch's events
        r.recall("vault", as_user="bob")
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps([h.text for h in r.recall(line.strip(), as_user="bob", k=5)]), flush=True)
"""


def _lagging_work_tree(repo, recent_max):
    """A long-lived process (an MCP server, the daemon) recalls between another process's commit
    (branch moved) and that commit's work-tree write; then asks again. Returns (its answers
    before and after the write, the long-lived process)."""
    team_fact(repo, "The vault codename is alpha1", new_key=True, **VAULT)
    repo.recall("vault", as_user="bob", now=T0)
    root = str(repo.root)
    reader = start_python(LONG_READER.format(root=root, recent_max=recent_max))
    writer = None
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        writer = start_python(PAUSED_WRITER.format(root=root))
        assert writer.stdout.readline().strip() == "moved", writer.stderr.read()
        reader.stdin.write("vault codename\n")
        reader.stdin.flush()
        during = json.loads(reader.stdout.readline())
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "written", writer.stderr.read()
        time.sleep(0.5)  # the watch's event for the file written
        reader.stdin.write("vault codename beta2\n")
        reader.stdin.flush()
        after = json.loads(reader.stdout.readline())
    finally:
        stop(*([writer] if writer else []))
    return during, after, reader


def test_a_long_lived_process_that_recalls_mid_write_keeps_the_old_version_for_good(repo):
    """GitStore.commit moves
    the branch (storage/) and only then writes the work tree . A catch-up in
    that window diffs to the new HEAD but reads the notes from the work tree (_read_notes ->
    read_note), i.e. the OLD text, and records the path as matching HEAD (it is not rechecked:
    not in the watch's events yet, not dirty). When the file is then written the watch reports
    it, but _changes compares its state (now equal to HEAD: None) with the recorded one (None):
    unchanged, never read again. The MCP server / daemon answers with the superseded text (and
    cannot find the new one) until another process moves state.json or 200 changes pile up."""
    during, after, reader = _lagging_work_tree(repo, recent_max=None)
    stop(reader)
    assert any("beta2" in t for t in after), after


def test_a_catch_up_on_disk_mid_write_leaves_the_old_version_in_the_index_for_every_process(repo):
    """The same window when the catch-up goes to disk (more than RECENT_MAX changes held, or
    here RECENT_MAX = 0 in the long-lived process): the old text is committed to the index and
    state.json says it is HEAD's. Every later process, a fresh one included (its walk finds
    nothing dirty), answers the superseded "alpha1" and misses "beta2"."""
    during, after, reader = _lagging_work_tree(repo, recent_max=0)
    stop(reader)
    fresh = MemoryRepo.open(repo.root)
    # Asked now (no `now=`): the writer process wrote "beta2" on the real clock, after T1.
    hits = fresh.recall("vault codename alpha1 beta2", as_user="bob", k=5)
    assert [t for t in _texts(hits) if "vault" in t] == ["The vault codename is beta2"]


KILLED_CATCH_UP = """
    import os, signal
    from mdmem import MemoryRepo
    from mdmem.search import note_index
    def die(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    # _save_state: the index is committed, state.json not yet; _apply: marked pending, nothing committed
    setattr(note_index.NoteIndex, {where!r}, die)
    r = MemoryRepo.open({root!r})
    r.recall("vault", as_user="bob")
"""


@pytest.mark.parametrize("where", ["_save_state", "_apply"])
def test_a_catch_up_killed_after_its_index_commit_leaves_a_superseded_note_found(repo, where):
    """_apply commits the index (note_index.py:409), _sync then saves
    state.json (:209). A kill -9 in between (a CLI call killed just after its catch-up's commit;
    a kill DURING the commit, merge included, is safe) leaves notes in the index that state.json says are not
    there. The next catch-up add_document's the notes new in HEAD again ("fresh", no delete):
    a duplicate now (recall returns the note twice), and if the note was updated meanwhile the
    superseded version is never deleted: "alpha1" stays found beside "beta2"."""
    team_fact(repo, "Deploys happen on Tuesdays")
    repo.recall("deploys", as_user="bob", now=T0)
    team_fact(repo, "The vault codename is alpha1", new_key=True, **VAULT)
    killed = start_python(KILLED_CATCH_UP.format(root=str(repo.root), where=where))
    killed.communicate(timeout=60)
    assert killed.returncode == -9
    team_fact(repo, "The vault codename is beta2", **VAULT)
    fresh = MemoryRepo.open(repo.root)
    hits = fresh.recall("vault codename alpha1 beta2", as_user="bob", k=5, now=T1)
    assert [t for t in _texts(hits) if "vault" in t] == ["The vault codename is beta2"]


TOC_READER = """
    import sys
    from whoosh.index import TOC
    from mdmem import MemoryRepo
    armed = [False]
    original = TOC._latest_generation.__func__
    def latest(cls, storage, indexname):
        gen = original(cls, storage, indexname)
        if armed[0]:
            armed[0] = False
            print("listed", gen, flush=True)  # the newest table of contents named; read next
            sys.stdin.readline()
        return gen
    TOC._latest_generation = classmethod(latest)
    r = MemoryRepo.open({root!r})
    for _ in range(3):
        r.recall("vault", as_user="bob")
    print("ready", flush=True)
    sys.stdin.readline()
    armed[0] = True
    print("hits", [h.text for h in r.recall("vault codename", as_user="bob")], flush=True)
"""


def test_a_table_of_contents_replaced_by_another_commit_moves_a_healthy_index_aside(repo):
    """Seen once under a multi-process stress ("unreadable cache (FileNotFoundError:
    .../fulltext/_MAIN_107.toc); moved aside ... and rebuilt"). Whoosh's open_dir, exists_in and
    FileIndex.schema read the newest _MAIN_<n>.toc without retrying (only FileIndex.reader
    retries), and every commit deletes the older one. NoteIndex._apply_recent reads
    self._ix.schema with no lock (note_index.py:444; likewise VersionsIndex.ensure's open_dir,
    versions.py:77, and _state's exists_in, :87): a long-lived process that lists the folder
    just before another process's catch-up commits gets FileNotFoundError, which recall takes
    for damage: the index is moved aside with a warning and rebuilt from every note (minutes at
    100k). Here the moment is held open between the listing and the read."""
    team_fact(repo, "Deploys happen on Tuesdays")
    repo.recall("deploys", as_user="bob", now=T0)
    reader = start_python(TOC_READER.format(root=str(repo.root)))
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        team_fact(repo, "The vault codename is alpha1", new_key=True, **VAULT)
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().startswith("listed"), reader.stderr.read()
        other = MemoryRepo.open(repo.root)  # another process's first call: a catch-up on disk
        assert other.recall("vault", as_user="bob", now=T1)
        other.close()
        reader.stdin.write("\n")
        reader.stdin.flush()
        line = reader.stdout.readline()
        assert line.startswith("hits") and "alpha1" in line, reader.stderr.read()
    finally:
        stop(reader)
    assert _broken(repo.root) == [], reader.stderr.read()


STATUS_RACE = """
    import pygit2
    from mdmem import MemoryRepo
    calls = [0]
    real_status = pygit2.Repository.status
    def status(self, *a, **k):
        calls[0] += 1
        if calls[0] == 1:  # what libgit2 raises when a file shrinks between its stat and its read
            raise OSError("error reading file for hashing: ")
        return real_status(self, *a, **k)
    pygit2.Repository.status = status
    r = MemoryRepo.open({root!r})
    print("hits", [h.text for h in r.recall("deploys", as_user="bob")], flush=True)
"""


def test_git_status_racing_a_note_write_moves_a_healthy_index_aside(repo):
    """A fresh process's first catch-up walks the work tree with git
    status (queries.dirty_note_paths -> pygit2 status). When a note file is replaced while status
    hashes it (any write by another process, an editor's save), libgit2 raises
    OSError("error reading file for hashing"); recall's catch-all (ops/searching.py:57) takes it
    for a damaged index: moved aside with a warning and rebuilt from every note. Observed
    naturally 3 times in 90 s with one writing and one reading process; the
    error is injected here once, as libgit2 raises it, to make the moment certain."""
    team_fact(repo, "Deploys happen on Tuesdays")
    repo.recall("deploys", as_user="bob", now=T0)
    proc = start_python(STATUS_RACE.format(root=str(repo.root)))
    out, err = proc.communicate(timeout=60)
    assert "Deploys happen on Tuesdays" in out, err
    assert _broken(repo.root) == [], err


WORDS = ("ledger payout invoice refund gateway timeout deploy window billing tuesday coffee rollout "
         "canary shard replica queue retry backoff audit token vault quorum alert pager owner budget "
         "schema migration index cache warm cold region zone latency error budget release freeze").split()


def _doc(i: int, rnd: random.Random) -> dict:
    body = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(12, 30))) + f" item{i}"
    path = f"team/payments/service/ledger/fact/n{i}.md"
    return dict(doc_id=path, path=path, root="team/payments", kind="fact", subject="service:ledger",
                root_code=1, kind_code=2, subject_code=3, key=f"n.{i}", key_text=f"n {i}",
                subject_text="service ledger", body=body, context_text="", scope="team", team="payments",
                owner="bob", source="user", note_id=f"id{i}", version=f"v{i}", valid_from=0,
                valid_until=fulltext.NEVER, expires_at=fulltext.NEVER, start=0, end=fulltext.NEVER, commit="",
                tags="")


def test_a_one_note_catch_up_never_rewrites_more_than_the_merge_budget(tmp_path):
    """Three small segments of 650 notes and a catch-up of ONE note:
    merge_when_many rewrote all 1,950 documents through Whoosh's add_reader (stored fields, every
    field's length, every posting: one Python call each, ~1-2 ms a document, about twice the cost
    of indexing them anew): 1.9-2.0 s here, 4.4 s with 20 dictionary words a note; a 1,900-note
    commit over [1,951, 1,900, 1,900] merged into one 7,651-document segment in 10.4 s (the
    tier admitted each next segment up to twice what was merged so far). Paid by a process's
    first recall under the index lock. Now one commit rewrites at most MERGE_BUDGET_DOCS old
    documents, and only segments under half of it are merged at all."""
    for case, sizes in enumerate(([650, 650, 650], [290, 290, 290], [40, 120, 280], [10, 10, 10])):
        rnd = random.Random(16 + case)
        ix = fulltext.open_or_create(tmp_path / f"fulltext{case}")
        n = 0
        for size in sizes:
            writer = BulkWriter(ix)
            for _ in range(size):
                writer.add_document(**_doc(n, rnd))
                n += 1
            writer.commit(merge=False)
        before = {s.segment_id() for s in ix._segments()}
        writer = BulkWriter(ix)
        writer.add_document(**_doc(n, rnd))
        writer.commit(mergetype=fulltext.merge_when_many)
        after = ix._segments()
        written = [s for s in after if s.segment_id() not in before]
        assert len(written) == 1 and written[0].doc_count_all() - 1 <= fulltext.MERGE_BUDGET_DOCS, (sizes, after)
        small = [s for s in after if s.doc_count_all() < fulltext.MERGE_BELOW_DOCS]
        assert len(small) < fulltext.MERGE_AFTER_SEGMENTS, (sizes, after)
        with ix.searcher() as searcher:
            assert searcher.doc_count() == n + 1


def test_notes_written_by_a_few_processes_rank_as_a_rebuild_once_merged(repo, tmp_path):
    """Whoosh's add_reader copies each document's field length as the byte it
    stored (quantised: 11, 15, 19, 22, 24, 27... come back different) and sums those into the
    merged segment's field-length totals; a segment written from the notes sums the true
    lengths. So once the segments holding them are merged, BM25F's average field lengths (and
    every score) differ from a rebuild of the same notes (~2-3e-4 relative here), with no
    update or deletion at all. The repository holds recall to "ranks exactly as a full reindex"
    (tests/test_recent_notes.py, exact bm25); when small segments were not merged, these 5 segments stayed apart
    (NO_MERGE below 8) and the scores were equal. Fixed since: recall's BM25F
    statistics are the reader's (bm25.Visible), summed from each document's stored length byte,
    which a merge copies as it is."""
    from test_recent_notes import QUERIES, corpus, ranked

    corpus(repo)
    repo.recall("billing", as_user="bob", now=T1)
    for rnd in range(4):  # four processes write three notes each; the next one's first call catches up
        w = MemoryRepo.open(repo.root)
        for i in range(3):
            team_fact(w, f"Round {rnd} note {i}: the billing deploy window is {rnd * 7 + i} minutes and "
                         f"the retry policy, the ledger cache and the payouts webhook queue are owned by dana "
                         + "and bob " * (i + rnd), key=f"round.{rnd}.{i}", new_key=True, now=T1)
        w.close()
        reader = MemoryRepo.open(repo.root)
        reader.recall("billing", as_user="bob", now=T1)
        reader.close()
    folder = cache_dir(repo.root) / "fulltext"
    assert len(list(folder.glob("*.seg"))) < 5  # merged
    got = {q: ranked(MemoryRepo.open(repo.root), q) for q in QUERIES}
    copy = tmp_path / "copy"
    shutil.copytree(repo.root, copy, symlinks=True)
    rebuilt = MemoryRepo.open(copy)
    rebuilt.reindex(rebuild=True)
    assert {q: ranked(rebuilt, q) for q in QUERIES} == got


def test_big_segments_left_without_a_live_document_are_never_dropped(tmp_path, monkeypatch):
    """merge_when_many keeps every segment of MERGE_BELOW_DOCS documents or more
    as it is, counting deleted ones (doc_count_all), even when none is alive. Whoosh's
    MERGE_SMALL, used before (the versions index always, note_index at 8 segments), dropped a
    segment with doc_count() == 0 for free. A batch of >= 2,000 changed notes (an import, a
    pull, a re-import of the same export) writes a big segment; the next such batch over the
    same notes leaves the old one dead -- kept, its long lists decoded into a .longpost
    (postings.Attacher counts doc_count_all), its columns (vectors: 7.7 MB per 5,000 notes with
    MiniLM) read by every process that opens the index, its terms looked up by every first-time
    word. One more per batch, until `mdmem index --rebuild`. MERGE_BELOW_DOCS is 30 here (as
    test_index_segments does with 50) so that a batch of 40 is a big segment: after 9 batches 9 of
    10 segments are dead. On 3876086 the same steps pass (MERGE_SMALL at 8 segments drops them)."""
    monkeypatch.setattr(fulltext, "MERGE_BELOW_DOCS", 30, raising=False)
    root = tmp_path / "mem"
    repo = MemoryRepo.init(root, teams={"payments": ["bob", "dana"]}, as_user="bob")

    def batch(version: int, new_key: bool) -> None:
        w = MemoryRepo.open(root)
        result = w.remember_many([{"text": f"Ledger {i} closes at {i % 12}pm, export {version}", "kind": "fact",
                                   "subject": "service:ledger", "key": f"close.{i}", "scope": "team",
                                   "team": "payments"} for i in range(40)], as_user="bob", now=T0, new_key=new_key)
        assert not result.refused and not result.held
        w.close()
        r = MemoryRepo.open(root)
        assert f"export {version}" in r.recall("ledger 7 closes export", as_user="dana", k=1, now=T0)[0].text
        r.close()

    batch(0, True)
    repo.reindex(rebuild=True)
    for version in range(1, 10):  # the same 40 notes exported again, each time
        batch(version, False)
    from whoosh import index as windex
    segments = windex.open_dir(str(cache_dir(root) / "fulltext"))._segments()
    dead = [s.doc_count_all() for s in segments if s.doc_count() == 0]
    assert dead == [], f"{len(dead)} of {len(segments)} segments hold no live document"
