"""Notes held in memory after a write (search/recent.py) rank exactly as a full reindex ranks
them: the same hits, the same BM25F scores — the replaced versions on disk are out of the
statistics, not only out of the results."""
import subprocess

import pytest
from conftest import T0, T1, team_fact
from embed_server import EmbedServer

from mdmem import MemoryRepo
from mdmem.cache import ASIDE
from mdmem.config import EmbedderConfig, UserConfig
from mdmem.storage.tree_watch import INotify
from mdmem.storage.gitdir import cache_dir

needs_inotify = pytest.mark.skipif(INotify is None, reason="the in-memory path follows inotify's events (Linux)")

SERVICES = ["billing", "ledger", "payouts", "search", "gateway"]
THINGS = ["deploy window", "retry policy", "timeout", "cache", "queue", "rate limit", "backup schedule", "webhook"]
QUERIES = ["billing deploy window", "retry policy timeout", "ledger cache queue", "who changed the rate limit",
           "payouts webhook retry", "backup schedule for search", "gateway timeout pages", "queue owned by dana"]


def corpus(repo, n=40):
    items = []
    for i in range(n):
        svc, thing = SERVICES[i % len(SERVICES)], THINGS[(i * 3) % len(THINGS)]
        other = THINGS[(i * 5 + 1) % len(THINGS)]
        items.append(dict(text=f"The {svc} {thing} is {i} minutes; ask {['bob', 'dana'][i % 2]} before changing "
                               f"the {other}" + (" and the queue" * (i % 3)) + ".",
                          kind="fact", subject=f"service:{svc}", key=f"{thing.replace(' ', '.')}.{i}", scope="team",
                          team="payments"))
    result = repo.remember_many(items, as_user="bob", now=T0, new_key=True)
    assert not result.refused and not result.held


def embedded_corpus(repo, server):
    """A small corpus embedded by ``server``, past the two calls that walk the tree: from here
    a few changes go to memory."""
    repo.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
    repo.user_config = UserConfig(embedder_url=server.url)
    repo.reset_caches()
    corpus(repo, n=12)
    for _ in range(2):
        repo.recall("billing", as_user="bob", now=T1)


def on_disk(repo) -> bytes:
    return (cache_dir(repo.root) / "state.json").read_bytes()


def ranked(repo, query, *, cosines=False, **kw):
    hits = repo.recall(query, as_user="bob", now=T1, k=100, **kw)
    return sorted((h.path, h.bm25, round(h.score, 4)) + ((h.cosine,) if cosines else ()) for h in hits)


@needs_inotify
def test_recall_from_memory_ranks_as_a_full_reindex(repo):
    corpus(repo)
    for _ in range(2):  # the two calls that walk the tree; from here a few changes go to memory
        repo.recall("billing", as_user="bob", now=T1)
    disk = on_disk(repo)
    # Replaced versions (their words must leave the statistics), new notes, a hand edit and
    # a note deleted by hand.
    team_fact(repo, "The billing deploy window is Friday; the retry policy is none.", subject="service:billing",
              key="deploy.window.0", now=T1)
    team_fact(repo, "The ledger cache is off.", subject="service:ledger", key="cache.1", now=T1)
    team_fact(repo, "Gateway pages on timeout go to dana; the webhook queue drains hourly.",
              subject="service:gateway", key="pages.timeout", new_key=True, now=T1)
    team_fact(repo, "Search backup schedule: nightly, rate limit 5 per second.", subject="service:search",
              key="backup.nightly", new_key=True, now=T1)
    edited = repo.root / repo.get(as_user="bob", subject="service:payouts", kind="fact", key="backup.schedule.2").path
    edited.write_text(edited.read_text().replace("ask", "always ask the payouts webhook owner, or ask", 1))
    (repo.root / repo.get(as_user="bob", subject="service:search", kind="fact", key="webhook.13").path).unlink()
    from_memory = {q: ranked(repo, q) for q in QUERIES}
    assert on_disk(repo) == disk  # all of it answered from memory: the index on disk untouched
    assert any(from_memory.values())

    # The reference: an index rebuilt from the same files. They are committed first: a rebuild
    # with files differing from HEAD indexes them again at its next catch-up (Whoosh keeps the
    # replaced copy in its statistics until a merge), which is not what a reindex gives.
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid",
                    "commit", "-q", "--no-verify", "-m", "by hand"], check=True)
    fresh = MemoryRepo.open(repo.root)
    fresh.reindex(rebuild=True)
    assert {q: ranked(fresh, q) for q in QUERIES} == from_memory


@needs_inotify
def test_a_hand_edit_held_in_memory_answers_the_tag_filter(repo):
    corpus(repo, n=8)
    for _ in range(2):
        repo.recall("billing", as_user="bob", now=T1)
    note = repo.root / repo.get(as_user="bob", subject="service:ledger", kind="fact", key="cache.1").path
    text = note.read_text()
    note.write_text(text.replace("\n---", "\ntags: [urgent]\n---", 1))
    disk = on_disk(repo)
    hits = repo.recall("ledger cache", as_user="bob", now=T1, tags=["urgent"])
    assert [h.path for h in hits] == [str(note.relative_to(repo.root))]
    assert on_disk(repo) == disk
    assert repo.recall("ledger cache", as_user="bob", now=T1, tags=["nothing-has-this"]) == []


@needs_inotify
def test_memory_with_vectors_ranks_as_a_full_reindex(repo):
    """The same with an embedder: vectors of notes in memory join the disk's in one table."""
    with EmbedServer() as server:
        embedded_corpus(repo, server)
        disk = on_disk(repo)
        team_fact(repo, "The billing deploy window is Friday.", subject="service:billing", key="deploy.window.0",
                  now=T1)
        team_fact(repo, "Gateway webhook retries every minute.", subject="service:gateway", key="webhook.retry",
                  new_key=True, now=T1)
        got = {q: ranked(repo, q, cosines=True) for q in QUERIES[:4]}
        assert on_disk(repo) == disk
        assert all(h[3] is not None for hits in got.values() for h in hits)
        repo.reindex(rebuild=True)
        assert {q: ranked(repo, q, cosines=True) for q in QUERIES[:4]} == got


KILLED_EMBEDDING_WRITER = r"""
import sys
from mdmem import MemoryRepo
from mdmem.cache import ASIDE
from mdmem.config import EmbedderConfig, UserConfig
repo = MemoryRepo.open(sys.argv[1])
repo.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
repo.user_config = UserConfig(embedder_url=sys.argv[2])
repo.reset_caches()
now = "2026-10-15T09:00:00Z"
for _ in range(2):
    repo.recall("billing", as_user="bob", now=now)
i = 0
while True:
    repo.remember(f"Gateway retry number {i} waits {i} seconds", as_user="bob", kind="fact",
                  subject="service:gateway", key=f"retry.{i}", scope="team", team="payments", new_key=True, now=now)
    repo.recall(f"gateway retry number {i}", as_user="bob", now=now)  # embeds it: a cache write
    if i == 2:
        print("ready", flush=True)
    i += 1
"""


@needs_inotify
def test_a_writer_killed_at_any_moment_leaves_the_embedding_cache_whole(repo):
    """The embedding cache commits without fsync (see embedding_cache._setup): a kill -9 at a
    random moment of writes that embed must leave a cache SQLite opens and finds whole."""
    import random
    import signal
    import sqlite3
    import sys
    import time

    corpus(repo, n=6)
    with EmbedServer() as server:
        proc = subprocess.Popen([sys.executable, "-c", KILLED_EMBEDDING_WRITER, str(repo.root), server.url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(random.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = sqlite3.connect(cache_dir(repo.root) / "embeddings.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM cache").fetchone()[0] >= 3
        db.close()
        repo.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
        repo.user_config = UserConfig(embedder_url=server.url)
        repo.reset_caches()
        hits = repo.recall("gateway retry number 2", as_user="bob", now=T1)
        assert hits[0].text.startswith("Gateway retry number 2 ") and hits[0].cosine is not None
        assert not (cache_dir(repo.root) / ASIDE).exists()  # nothing was moved aside


def test_a_note_left_edited_is_not_indexed_again_by_every_process(repo):
    """A rebuild records the files that differ from HEAD; a later process's first catch-up
    (it walks the tree) re-indexes only files changed since, not every edited note on each
    start (which also left replaced copies in Whoosh's statistics)."""
    corpus(repo, n=6)
    note = repo.root / repo.get(as_user="bob", subject="service:ledger", kind="fact", key="cache.1").path
    note.write_text(note.read_text().replace("ask dana", "ask dana or erin"))
    repo.reindex(rebuild=True)
    repo.close()

    def disk():
        folder = cache_dir(repo.root) / "fulltext"
        return on_disk(repo), sorted(p.name for p in folder.iterdir())

    before = disk()
    for _ in range(2):  # fresh processes, each walking the tree on its first call
        fresh = MemoryRepo.open(repo.root)
        assert "erin" in fresh.recall("ledger cache erin", as_user="bob", now=T1)[0].text
        fresh.close()
    assert disk() == before
    note.write_text(note.read_text().replace("dana or erin", "dana or frank"))
    fresh = MemoryRepo.open(repo.root)
    assert "frank" in fresh.recall("ledger cache frank", as_user="bob", now=T1)[0].text
    assert disk() != before  # changed since: indexed again
    fresh.close()


@needs_inotify
def test_word_counts_follow_every_write_held_in_memory(repo):
    """Document frequencies are kept per segment reader across recalls (recent.segment_doc_frequency):
    each write's new word counts must still reach the next recall's BM25F, which ranks as a
    reindex of the same notes does."""
    corpus(repo)
    for _ in range(2):
        repo.recall("billing", as_user="bob", now=T1)
    disk = on_disk(repo)
    seen = []
    for i, text in enumerate(["A zebra crossing is painted by the billing office.",
                              "The zebra crossing on the ledger street is closed; ask dana.",
                              "Billing zebra drills run on Fridays."]):
        team_fact(repo, text, subject="service:billing", key=f"zebra.{i}", new_key=True, now=T1)
        seen.append(ranked(repo, "zebra crossing billing"))
        assert len([h for h in seen[-1] if "zebra" in h[0]]) == i + 1
    assert on_disk(repo) == disk  # answered from memory every time
    fresh = MemoryRepo.open(repo.root)
    fresh.reindex(rebuild=True)
    assert ranked(fresh, "zebra crossing billing") == seen[-1]


def test_the_reader_made_after_each_write_equals_one_made_afresh():
    """RecentNotes extends its last reader with the notes a write adds (search/recent.py),
    and makes it afresh when a held note is replaced or removed: after any sequence of
    writes, every posting, length, stored field and docnum equals a reader built from
    scratch over the notes held."""
    import random

    from mdmem.search import fulltext, recent

    rng = random.Random(5)
    words = ["billing", "deploy", "window", "ledger", "cache", "queue", "retry", "timeout", "webhook", "backup"]
    held = recent.RecentNotes(fulltext.make_schema(), old_doc=lambda fields: None)

    def doc(path):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        return dict(doc_id=path, path=path, root="team/payments", body=body, kind="fact", subject="service:x")

    before = None  # (an earlier reader, a copy of its postings): never changed by a later one
    for step in range(80):
        paths = rng.sample([f"team/payments/n{i}.md" for i in range(30)], rng.randint(1, 3))
        gone = [p for p in paths if rng.random() < 0.15]
        held.apply(paths, [doc(p) for p in paths if p not in gone])
        if rng.random() < 0.7:  # a recall after some writes, not all
            got = held.reader()
            fresh = recent.MemoryReader(held.schema, list(held._docs.values()))
            assert got._postings == fresh._postings, step
            assert got._field_lengths == fresh._field_lengths, step
            assert [d.path for d in got._docs] == [d.path for d in fresh._docs], step
            assert list(got.all_stored_fields()) == list(fresh.all_stored_fields()), step
            if before is not None:
                assert {t: (list(a), list(b)) for t, (a, b) in before[0]._postings.items()} == before[1], step
            before = (got, {t: (list(a), list(b)) for t, (a, b) in got._postings.items()})


@needs_inotify
def test_a_hand_edit_right_after_a_write_is_found_and_the_write_itself_is_not_dirty(repo):
    """The catch-up checks the files a write just made against the blob ids that write
    committed (NoteIndex._written), not against HEAD's tree: a person's edit of the same file
    right after must still count, and the write's own file must not look edited."""
    corpus(repo)
    for _ in range(2):
        repo.recall("billing", as_user="bob", now=T1)
    for i in range(3):
        stored = team_fact(repo, f"The walrus gateway {i} drains hourly.", subject="service:gateway",
                           key=f"walrus.{i}", new_key=True, now=T1)
        path = stored.path if hasattr(stored, "path") else f"team/payments/service/gateway/fact/walrus.{i}.md"
        assert any(f"walrus.{i}" in h.path for h in repo.recall(f"walrus gateway {i}", as_user="bob", now=T1))
        assert repo.index.dirty_state() == {}  # the write's own file equals what it committed
        full = repo.root / path
        full.write_text(full.read_text().replace(f"walrus gateway {i}", f"narwhal gateway {i}"))
        hits = repo.recall(f"narwhal gateway {i}", as_user="bob", now=T1)
        assert any(f"walrus.{i}" in h.path for h in hits), i
        assert list(repo.index.dirty_state()) == [path]
        subprocess.run(["git", "-C", str(repo.root), "checkout", "--", path], check=True)
        repo.recall("anything", as_user="bob", now=T1)
        assert repo.index.dirty_state() == {}


@needs_inotify
def three_held_in_memory(repo) -> list[tuple[str, str]]:
    """The corpus, then three notes superseded and held in the in-memory segment: their
    (service, key)s."""
    corpus(repo)
    for _ in range(2):  # the two calls that walk the tree; from here a few changes go to memory
        repo.recall("billing", as_user="bob", now=T1)
    keys = [("billing", "deploy.window.0"), ("ledger", "cache.1"), ("payouts", "backup.schedule.2")]
    for svc, key in keys:
        team_fact(repo, f"The {svc} {key} moved to Friday; ask dana.", subject=f"service:{svc}", key=key, now=T1)
    repo.recall("billing", as_user="bob", now=T1)  # held in memory
    return keys


def test_versions_held_in_memory_are_not_read_back_when_another_process_moves_the_disk_index_on(repo):
    """A server's in-memory segment is made anew each time the disk index moves on (its catch-up
    child, another process): the disk versions it then hides, held in memory before, are not read
    back from git and analysed again (search/recent.py, Analysed); the ranking stays a full
    reindex's."""
    keys = three_held_in_memory(repo)
    other = MemoryRepo.open(repo.root)
    other.reindex()  # the disk index takes those versions
    other.close()
    for svc, key in keys[:2]:
        team_fact(repo, f"The {svc} {key} moved to Monday; ask bob.", subject=f"service:{svc}", key=key, now=T1)
    read_back = []
    real = repo.index._indexed_doc
    repo.index._indexed_doc = lambda fields: read_back.append(fields["path"]) or real(fields)
    answers = {q: ranked(repo, q) for q in QUERIES}
    assert read_back == []
    fresh = MemoryRepo.open(repo.root)
    fresh.reindex(rebuild=True)
    assert {q: ranked(fresh, q) for q in QUERIES} == answers


@needs_inotify
def test_an_index_let_go_of_keeps_no_note_it_held_in_memory(repo):
    """The notes the in-memory segment held (their text) are let go of with the index (as a
    server does after an erasure): nothing analysed, no table over that segment, keeps them."""
    import gc

    from mdmem.search import recent

    corpus(repo)
    for _ in range(2):
        repo.recall("billing", as_user="bob", now=T1)
    team_fact(repo, "The vault code is ZEBRA-SECRET-991.", subject="service:ledger", key="vault.code", new_key=True,
              now=T1)
    assert "ZEBRA" in repo.recall("vault code", as_user="bob", now=T1)[0].text

    def held() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects()
                   if isinstance(o, recent._Indexed) and "ZEBRA" in str(o.stored.get("body", "")))
    assert held() > 0
    repo.index.reopen()
    assert held() == 0
    assert "ZEBRA" in repo.recall("vault code", as_user="bob", now=T1)[0].text  # opened again from disk


def test_another_process_marking_its_catch_up_pending_leaves_the_notes_held_in_memory(repo):
    """Another process's catch-up (a server's child) marks state.json "pending" before its index
    commit: the notes this process holds in memory are not read again (all of them were, against
    the old commit, index held: 40-90 ms at 100 notes, then again once it saved), the answers stay
    a full reindex's, and once that catch-up saves, its commit is taken."""
    import json

    from mdmem import cache as cachefiles

    three_held_in_memory(repo)
    state = json.loads(repo.index.state_path.read_text())
    cachefiles.write_state(repo.index.state_path, {**state, "pending": repo.store.head()})
    assert repo.index.sync().indexed == []  # nothing read again
    answers = {q: ranked(repo, q) for q in QUERIES}
    fresh = MemoryRepo.open(repo.root)
    fresh.reindex(rebuild=True)  # the other process's catch-up ends: it saves a state of its own
    assert {q: ranked(fresh, q) for q in QUERIES} == answers
    fresh.close()
    assert {q: ranked(repo, q) for q in QUERIES} == answers
    assert repo.index.dirty_state() == {} and json.loads(repo.index.state_path.read_text())["commit"] == \
        repo.store.head()


@needs_inotify
def test_a_note_this_process_wrote_is_checked_and_analysed_before_the_recall_that_indexes_it(repo, monkeypatch):
    """The recall after a write catches the index up holding its mutex, every other recall
    waiting: the note it indexes was already checked by the write (storage/worktree.validated)
    and analysed on the writer's thread (NoteIndex._analyse_ahead), so the catch-up does
    neither again; what it holds equals an analysis made from scratch, vector included."""
    import numpy as np

    from mdmem.search import fulltext, recent
    from mdmem.storage import worktree

    with EmbedServer() as server:
        embedded_corpus(repo, server)
        stored = team_fact(repo, "Gateway webhook retries every minute.", subject="service:gateway",
                           key="webhook.retry", new_key=True, now=T1)
        path = stored.path
        checked, analysed = [], []
        real_validate, real_init = worktree.validate_note, recent._Indexed.__init__
        monkeypatch.setattr(worktree, "validate_note", lambda p, *a, **kw: checked.append(p) or real_validate(p, *a, **kw))

        def counting_init(self, schema, doc):
            analysed.append(doc["doc_id"])
            real_init(self, schema, doc)
        monkeypatch.setattr(recent._Indexed, "__init__", counting_init)
        hits = repo.recall("gateway webhook retries", as_user="bob", now=T1)
        assert hits and hits[0].path == path
        assert path not in checked and path not in analysed
        monkeypatch.undo()
        held = repo.index._recent._docs[path]
        doc = fulltext.note_doc(worktree.read_note(repo.root, path, repo.contracts))
        repo.index.embed_docs([doc])
        recent.prepare_vectors(recent._SchemaWriter(repo.index._recent.schema), [doc])
        fresh = recent._Indexed(repo.index._recent.schema, doc)
        assert (held.terms, held.lengths, held.stored) == (fresh.terms, fresh.lengths, fresh.stored)
        assert held.columns.keys() == fresh.columns.keys() and recent.VECTOR_FIELD in held.columns
        assert all(np.array_equal(np.frombuffer(held.columns[k], np.uint8), np.frombuffer(fresh.columns[k], np.uint8))
                   if isinstance(held.columns[k], bytes) else held.columns[k] == fresh.columns[k]
                   for k in held.columns)


def test_the_columns_a_reader_in_memory_keeps_equal_those_read_from_it_whole():
    """DocTable reads a reader in memory's columns as arrays it keeps and extends from the
    reader before it (search/recent.py, MemoryReader.column_array): after any sequence of
    writes they equal the columns read value by value, vectors (and notes without one) too."""
    import random

    import numpy as np

    from mdmem.search import doctable, fulltext, recent

    rng = random.Random(11)
    held = recent.RecentNotes(fulltext.make_schema(), old_doc=lambda fields: None)

    def doc(path, step):
        out = dict(doc_id=path, path=path, root="team/payments", body=rng.choice(["billing", "ledger cache"]),
                   kind="fact", subject="service:x", root_code=doctable.code(f"team/p{rng.randint(0, 2)}"),
                   valid_from=step * 1000 + rng.randint(0, 999), expires_at=rng.randint(1, 10**12))
        if rng.random() < 0.8:
            out[doctable.VECTOR_FIELD] = np.asarray([rng.random() for _ in range(4)], dtype=np.float32)
        return out

    for step in range(60):
        paths = rng.sample([f"team/payments/n{i}.md" for i in range(25)], rng.randint(1, 3))
        held.apply(paths, [doc(p, step) for p in paths if rng.random() > 0.1])
        if rng.random() < 0.7:
            reader = held.reader()
            count = reader.doc_count_all()
            for name in doctable.CODE_COLUMNS + doctable.TIME_COLUMNS:
                whole = doctable.read_column(reader.column_reader(name, translate=False), count, ">i8").astype(np.int64)
                assert np.array_equal(doctable._column(reader, name, count), whole), (step, name)
            if reader.has_column(doctable.VECTOR_FIELD):
                whole = doctable.read_column(reader.column_reader(doctable.VECTOR_FIELD, translate=False), count, "<f4", 4)
                assert np.array_equal(doctable._vector_column(reader, count), whole), step


@needs_inotify
def test_a_disk_catch_up_landing_checks_again_only_the_files_held_as_edited(repo):
    """When the disk index moves on (a server's catch-up child lands, another process), the
    notes held in memory are dropped; of their files only those held in a version other than
    HEAD's are read again (each of the others equalled HEAD, so a change since has an event
    of its own): checking all of them was 12-14 ms a landing under the mutex. A hand edit held
    that way is still found; a later hand edit of a file that was not re-read is too."""
    keys = three_held_in_memory(repo)
    edited = f"team/payments/service/ledger/fact/{keys[1][1]}.md"
    full = repo.root / edited
    full.write_text(full.read_text().replace("moved to Friday", "moved to Sunday (hand edit)"))
    assert any(h.path == edited for h in repo.recall("Sunday hand edit", as_user="bob", now=T1))
    assert list(repo.index.dirty_state()) == [edited]
    other = MemoryRepo.open(repo.root)
    other.reindex()  # the disk index moves on to HEAD
    other.close()
    looked = []
    real = repo.index._tree_state
    repo.index._tree_state = lambda p: looked.append(p) or real(p)
    hits = repo.recall("Sunday hand edit", as_user="bob", now=T1)
    assert looked == [edited]
    assert hits and hits[0].path == edited and "Sunday" in hits[0].text
    later = f"team/payments/service/billing/fact/{keys[0][1]}.md"
    (repo.root / later).write_text((repo.root / later).read_text().replace("moved to Friday", "moved to Saturday"))
    assert any(h.path == later and "Saturday" in h.text for h in repo.recall("Saturday", as_user="bob", now=T1))
