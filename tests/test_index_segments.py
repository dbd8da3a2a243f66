"""How many segments the full-text index holds over a repository's life.

Whoosh's own merge (MERGE_SMALL) never merges catch-ups' segments of tens of notes once a big
segment (a rebuild's) is there: the segments piled up one per process that wrote, and a word
met for the first time is looked up and decoded in each (9 segments at 100k: a first-time
recall ~2x slower). fulltext.merge_when_many keeps fewer than MERGE_AFTER_SEGMENTS small ones
and never rewrites a big one."""
from __future__ import annotations

from whoosh.filedb.filestore import RamStorage

from mdmem import MemoryRepo
from mdmem.search import fulltext
from tests.conftest import T0


def _doc(i: int) -> dict:
    return {"doc_id": f"team/payments/n{i}.md", "body": f"note number {i} about ledger{i % 7} payouts",
            "subject": "service:billing", "kind": "fact"}


def small(segments) -> list:
    return [s for s in segments if s.doc_count_all() < fulltext.MERGE_BELOW_DOCS]


def test_catch_up_commits_keep_few_segments_and_never_rewrite_the_big_one(monkeypatch):
    monkeypatch.setattr(fulltext, "MERGE_BELOW_DOCS", 300)
    ix = RamStorage().create_index(fulltext.make_schema())
    writer = ix.writer()
    for i in range(300):  # the rebuild's segment
        writer.add_document(**_doc(i))
    writer.commit()
    big = ix._segments()[0].segment_id()
    n = 300
    for _ in range(12):  # a catch-up of 40 notes each: Whoosh's merge kept every one of them
        writer = ix.writer()
        for _ in range(40):
            writer.add_document(**_doc(n))
            n += 1
        writer.commit(mergetype=fulltext.merge_when_many)
        segments = ix._segments()
        assert len(small(segments)) < fulltext.MERGE_AFTER_SEGMENTS
        assert len(segments) <= fulltext.MERGE_AFTER_SEGMENTS  # the big one + the small ones
        assert big in {s.segment_id() for s in segments}
    with ix.searcher() as s:
        assert s.doc_count() == n
        assert {f["doc_id"] for f in s.all_stored_fields()} == {f"team/payments/n{i}.md" for i in range(n)}


def test_merging_drops_deleted_documents_of_the_small_segments(monkeypatch):
    monkeypatch.setattr(fulltext, "MERGE_BELOW_DOCS", 300)
    ix = RamStorage().create_index(fulltext.make_schema())
    writer = ix.writer()
    for i in range(300):
        writer.add_document(**_doc(i))
    writer.commit()
    for round_ in range(fulltext.MERGE_AFTER_SEGMENTS):
        writer = ix.writer()
        for i in range(300 + 40 * round_, 340 + 40 * round_):
            writer.add_document(**_doc(i))
        writer.delete_by_term("doc_id", f"team/payments/n{300 + 40 * round_ - 1}.md")  # the last round's last note
        writer.commit(mergetype=fulltext.merge_when_many)
    with ix.searcher() as s:
        merged = [r for r, _ in s.ixreader.leaf_readers() if 40 < r.doc_count_all() < 300]
        assert merged and all(r.doc_count() == r.doc_count_all() for r in merged)
        assert s.doc_count() == 300 + 40 * fulltext.MERGE_AFTER_SEGMENTS - fulltext.MERGE_AFTER_SEGMENTS


def test_a_repository_written_by_many_processes_keeps_few_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(fulltext, "MERGE_BELOW_DOCS", 50, raising=False)  # the rebuild's 60 notes are a big segment
    root = tmp_path / "mem"
    repo = MemoryRepo.init(root, teams={"payments": ["bob", "dana"]}, as_user="bob")
    repo.remember_many([{"text": f"Ledger {i} closes at {i % 12}pm for payouts", "kind": "fact",
                         "subject": "service:ledger", "key": f"close.{i}", "scope": "team", "team": "payments",
                         "new_key": True} for i in range(60)], as_user="bob", now=T0)
    repo.reindex(rebuild=True)
    repo.close()
    folder = root / ".git" / "mdmem" / "fulltext"
    big = {p.name for p in folder.glob("*.seg")}
    assert len(big) == 1
    for round_ in range(5):  # each process writes a few notes; the next one's first call catches up on disk
        writer = MemoryRepo.open(root)
        for i in range(3):
            writer.remember(f"Round {round_} codename r{round_}x{i} settles payouts", as_user="bob", kind="fact",
                            subject="service:ledger", key=f"round{round_}.{i}", scope="team", team="payments",
                            new_key=True, now=T0)
        writer.close()
        reader = MemoryRepo.open(root)
        hits = reader.recall(f"codename r{round_}x1", as_user="dana", k=3, now=T0)
        assert hits and f"r{round_}x1" in hits[0].text
        reader.close()
        names = {p.name for p in folder.glob("*.seg")}
        assert big <= names and len(names - big) < fulltext.MERGE_AFTER_SEGMENTS
