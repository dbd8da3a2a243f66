"""A bulk import's full-text index built in a second process (search/index_worker.py): the
index it leaves equals a cold rebuild of the work tree (documents, postings, lengths,
statistics, scores); anything the worker's segment does not match exactly is read from
disk as before; and a kill -9 of the importer leaves no worker process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from whoosh import index as windex
from whoosh.query import Term

from conftest import T0, T1, TEAMS, git_status

from mdmem import MemoryRepo
from mdmem.ops import write
from mdmem.search import fulltext
from mdmem.search.index_worker import IndexWorker
from mdmem.storage.gitdir import cache_dir

TEXT_FIELDS = ("body", "key_text", "subject_text", "context_text", "tags")
COLUMNS = ("root_code", "kind_code", "subject_code", "valid_from", "valid_until", "expires_at", "start", "end")
QUERY_WORDS = ("service", "pages", "checks", "health", "42", "svc3", "pager", "rollback", "nightly")


def items(n, *, offset=0, **kw):
    return [dict(text=f"Service {i} pages the on-call after {i + 3} failed health checks; rollback {i % 5} nightly",
                 kind="fact", subject=f"service:svc{i % 7}", key=f"pager.{i}", scope="team", team="payments", **kw)
            for i in range(offset, offset + n)]


@pytest.fixture
def bm25(tmp_path) -> MemoryRepo:
    MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem").close()
    return MemoryRepo(tmp_path / "mem", embedder="none")


def import_(repo, batch, **kw):
    return write.remember_many(repo, batch, as_user="bob", now=kw.pop("now", T0), **kw)


def fingerprint(root: Path, *, statistics: bool = True) -> dict:
    """Everything recall reads from the index, by doc_id (document numbers differ with the
    order notes were indexed in): stored fields, columns, postings with weights, field
    lengths; with ``statistics``, document frequencies, total field lengths and BM25F scores."""
    ix = windex.open_dir(str(cache_dir(root) / "fulltext"))
    with ix.searcher(weighting=fulltext.weighting()) as s:
        r = s.reader()
        ids = {d: f["doc_id"] for d, f in r.iter_docs()}  # live documents only
        out: dict = {"doc_ids": sorted(ids.values()),  # a path twice would show here
                     "docs": {i: dict(r.stored_fields(d)) for d, i in ids.items()}}
        for name in COLUMNS:
            col = r.column_reader(name)
            out[name] = {i: col[d] for d, i in ids.items()}
        postings: dict = {}
        for field, text in r.all_terms():
            if field not in TEXT_FIELDS and field != "doc_id":
                continue
            m = r.postings(field, text)
            live = []
            while m.is_active():
                if m.id() in ids:
                    live.append((ids[m.id()], m.weight()))
                m.next()
            if live:
                postings[(field, text)] = sorted(live)
        out["postings"] = postings
        out["lengths"] = {(f, i): r.doc_field_length(d, f) for d, i in ids.items() for f in TEXT_FIELDS[:4]}
        if statistics:
            out["count"] = s.doc_count()
            out["df"] = {k: r.doc_frequency(*k) for k in postings}
            out["field_length"] = {f: r.field_length(f) for f in TEXT_FIELDS[:4]}
            out["scores"] = {(f, w): {ids[hit.docnum]: round(hit.score, 9)
                                      for hit in s.search(Term(f, w), limit=None)}
                             for f in ("body", "key_text", "subject_text")
                             for w in fulltext.query_terms(" ".join(QUERY_WORDS))}
    return out


def cold_rebuild(root: Path) -> dict:
    again = MemoryRepo(root, embedder="none")
    again.reindex(rebuild=True)
    again.close()
    return fingerprint(root)


@pytest.mark.parametrize("segment_docs", [1000, 30])
def test_an_import_indexed_by_the_worker_equals_a_cold_rebuild(bm25, monkeypatch, segment_docs):
    # 30: the worker writes a segment whenever it has 30 documents and waits for the next batch.
    monkeypatch.setattr(IndexWorker, "segment_docs", segment_docs)

    def progress(done, total, what):
        # The worker catches up and waits: a segment for each batch (with 30). Waiting for its
        # first segment file, not for a fixed time: on a loaded machine (or beside other test
        # processes) the worker can still be starting when a fixed sleep ends.
        if segment_docs == 30:
            deadline = time.monotonic() + 30
            while not list((cache_dir(bm25.root) / "bulk").glob("*/*.seg")) and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.1)

    result = import_(bm25, items(130, new_key=True), batch_size=40, index_worker=True, progress=progress)
    assert len(result.committed) == 130
    assert result.index["by_worker"] == 130 and result.index["indexed"] == 130  # not read back from disk
    hits = bm25.recall("after 100 failed health checks", as_user="dana", now=T0, k=3)
    assert any(h.path.endswith("pager.97.md") for h in hits)
    with windex.open_dir(str(cache_dir(bm25.root) / "fulltext")).reader() as reader:
        segments = [leaf.segment() for leaf, _ in reader.leaf_readers()]
    assert len(segments) == 1 if segment_docs == 1000 else len(segments) > 1
    built = fingerprint(bm25.root)
    bm25.close()
    assert built == cold_rebuild(bm25.root)
    assert git_status(bm25.root) == ""
    assert not (cache_dir(bm25.root) / "bulk").exists() or not any((cache_dir(bm25.root) / "bulk").iterdir())


def test_an_import_into_an_indexed_repo_joins_the_segment_and_replaces_older_versions(bm25, monkeypatch):
    monkeypatch.setattr(IndexWorker, "segment_docs", 50)
    import_(bm25, items(30, new_key=True), index_worker=False)
    bm25.recall("health checks", as_user="dana", now=T0)  # an index on disk to be caught up
    # 20 of the 30 again (a new version each: the old one must leave the index) and 190 new:
    # more than a process keeps in memory (note_index.RECENT_MAX), so the catch-up is on disk.
    result = import_(bm25, [dict(i, text=i["text"] + " twice") for i in items(20)] + items(190, offset=30, new_key=True),
                     batch_size=60, index_worker=True, now=T1)
    assert sum(c["op"] == "supersede" for c in result.committed) == 20
    assert result.index["by_worker"] == 210 and not result.index["rebuilt"]
    live = fingerprint(bm25.root, statistics=False)
    assert len(live["doc_ids"]) == len(live["docs"]) == 220
    assert sum(len(p) for (f, t), p in live["postings"].items() if f == "body" and t == b"twice") == 20
    bm25.close()
    # The catch-up leaves replaced versions in Whoosh's statistics until a merge (as without
    # the worker); the live documents and their postings are a cold rebuild's.
    rebuilt = cold_rebuild(bm25.root)
    assert live == {k: rebuilt[k] for k in live}
    assert git_status(bm25.root) == ""


def test_a_path_written_twice_in_one_import_is_read_from_disk(bm25):
    batch = items(30, new_key=True) + [dict(items(1)[0], text="Service 0 pages nobody at all")]
    result = import_(bm25, batch, batch_size=50, index_worker=True)
    assert result.index["by_worker"] == 0  # two versions of pager.0 in the worker's segment
    hits = bm25.recall("pages nobody at all", as_user="dana", now=T0, k=1)
    assert hits[0].path.endswith("pager.0.md") and "nobody" in hits[0].text
    built = fingerprint(bm25.root)
    bm25.close()
    assert built == cold_rebuild(bm25.root)


def test_a_hand_edit_during_the_import_is_indexed_as_edited(bm25):
    edited = "team/payments/service/svc1/fact/pager.1.md"

    def progress(done, total, what):
        path = bm25.root / edited
        if what == "writing notes" and done == 20:  # after the first batch: edit one of its notes
            path.write_text(path.read_text().replace("failed health checks", "hand edited marmalade"))

    result = import_(bm25, items(40, new_key=True), batch_size=20, index_worker=True, progress=progress)
    assert result.index["by_worker"] == 0
    hits = bm25.recall("marmalade", as_user="dana", now=T0, k=1)
    assert hits and hits[0].path == edited
    built = fingerprint(bm25.root)
    bm25.close()
    assert built == cold_rebuild(bm25.root)


def test_held_and_refused_items_are_as_without_the_worker(bm25):
    batch = items(25, new_key=True)
    batch[1]["source"] = "web:https://example.com"  # untrusted: held for review
    batch[2]["scope"], batch[2]["team"] = "team", "search"  # bob is not in search: refused
    batch[3].pop("key")  # keyed kind without a key: refused
    result = import_(bm25, batch, batch_size=10, index_worker=True)
    assert len(result.committed) == 22 and [h["line"] for h in result.held] == [2]
    assert sorted(r["line"] for r in result.refused) == [3, 4]
    assert result.index["by_worker"] == 22
    assert all("example" not in h.text for h in bm25.recall("health checks", as_user="bob", k=30, now=T0))
    assert git_status(bm25.root) == ""
    built = fingerprint(bm25.root)
    bm25.close()
    assert built == cold_rebuild(bm25.root)


def worker_processes(folder: Path) -> list[int]:
    """Processes whose command line names a worker folder under ``folder``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"mdmem.search.index_worker" in cmd and str(folder).encode() in cmd:
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry))
    return found


def test_a_worker_ends_when_its_input_ends_without_finish(bm25):
    worker = IndexWorker.start(cache_dir(bm25.root), bm25.contracts, None)
    assert worker is not None
    worker.send({"team/payments/service/a/fact/x.md": b"not a note"})
    assert worker.proc.stdin is not None
    worker.proc.stdin.close()  # as when the importer dies: EOF, nothing committed
    assert worker.proc.wait(timeout=60) == 1
    assert not (worker.folder / "indexed.json").exists()
    worker.discard()
    assert not worker.folder.exists()


KILLED = r"""
import sys
from mdmem import MemoryRepo
from mdmem.ops import write
root = sys.argv[1]
items = [dict(text=f"Service {i} pages the on-call after {i + 3} failed health checks", kind="fact",
              subject=f"service:svc{i % 7}", key=f"pager.{i}", scope="team", team="payments", new_key=True)
         for i in range(int(sys.argv[2]))]
print("started", flush=True)
write.remember_many(MemoryRepo(root, embedder="none"), items, as_user="bob", batch_size=200, index_worker=True,
                    now="2026-10-01T09:00:00Z")
print("done", flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8, 1.5])
def test_a_kill_of_the_importer_leaves_no_worker_and_an_index_that_finds_every_commit(bm25, delay):
    bm25.recall("health checks", as_user="dana", now=T0)  # an index on disk to be caught up
    bm25.close()
    bulk = cache_dir(bm25.root) / "bulk"
    proc = subprocess.Popen([sys.executable, "-I", "-c", KILLED, str(bm25.root), "3000"], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (bulk.is_dir() and any(bulk.iterdir())) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL  # killed mid-import, not after it finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The worker ends once it reads the end of its input; how soon depends on the machine's load
    # (it may be mid-batch), so the bound is only there to end a test whose worker never would.
    deadline = time.monotonic() + 120
    while worker_processes(bulk) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_processes(bulk) == []
    reopened = MemoryRepo(bm25.root, embedder="none")
    keys = {k.key for s in range(7) for k in reopened.keys(as_user="dana", subject=f"service:svc{s}", kind="fact",
                                                           now=T0)}
    for key in sorted(keys, key=lambda k: int(k.split(".")[1]))[-3:]:  # the last committed are found
        i = int(key.split(".")[1])
        hits = reopened.recall(f"after {i + 3} failed health checks", as_user="dana", now=T0, k=3)
        assert any(h.path.endswith(f"/{key}.md") for h in hits), key
    reopened.close()
    # A new import removes the dead worker's folder.
    worker = IndexWorker.start(cache_dir(bm25.root), bm25.contracts, None)
    assert worker is not None
    try:
        assert [f.name for f in bulk.iterdir()] == [worker.folder.name]
    finally:
        worker.discard()


@pytest.mark.parametrize("attack", ["kill the worker", "remove its folder"])
def test_a_worker_killed_or_robbed_of_its_folder_mid_import_costs_only_speed(bm25, attack):
    bulk = cache_dir(bm25.root) / "bulk"

    def progress(done, total, what):
        if what == "writing notes" and done == 20:
            if attack == "kill the worker":
                for pid in worker_processes(bulk):
                    os.kill(pid, signal.SIGKILL)
            else:
                for folder in bulk.iterdir():
                    subprocess.run(["rm", "-rf", str(folder)], check=True)

    result = import_(bm25, items(60, new_key=True), batch_size=20, index_worker=True, progress=progress)
    assert len(result.committed) == 60 and result.index["by_worker"] == 0 and result.index["indexed"] == 60
    assert worker_processes(bulk) == []
    built = fingerprint(bm25.root)
    bm25.close()
    assert built == cold_rebuild(bm25.root)
    assert git_status(bm25.root) == ""
