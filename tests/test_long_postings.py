"""A big segment's long posting lists, decoded once into a file beside it (search/postings.py):
read from the file they give exactly the decoded lists, Whoosh's own scores and order (deleted
documents included in the file, left out when read); a repo writes the file when its index is
built and answers as without it; a damaged file is not used and is written again; the file goes
with its segment; a killed writer's temporary is removed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import T0, T1, team_fact
from test_index_bm25 import corpus_index, rank_as_whoosh

from mdmem import MemoryRepo
from mdmem.search import fulltext, postings
from mdmem.storage.gitdir import cache_dir


@pytest.fixture
def small_lists(monkeypatch):
    """Files for small segments and short lists, so a test-sized index has them."""
    monkeypatch.setattr(postings, "LONG_SEGMENT_DOCS", 5)
    monkeypatch.setattr(postings, "LONG_POSTINGS", 3)


@pytest.mark.parametrize("seed", range(8))
def test_lists_from_the_file_score_and_rank_as_whoosh_does(seed, tmp_path, small_lists):
    ix, rng = corpus_index(seed, segments=1 + seed % 3, deletions=seed % 3 * 7)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        listed = 0
        for leaf, _ in s.leaf_searchers():
            reader = leaf.reader()
            path = postings.write(tmp_path, reader, fulltext.FIELD_BOOSTS)
            long = postings.LongPostings(path, reader.doc_count_all(), reader.segment().segment_id(), 1 << 30)
            for field in fulltext.FIELD_BOOSTS:
                for btext, info in reader.iter_field(field):
                    got = long.get(field, btext)
                    if info.doc_frequency() < postings.LONG_POSTINGS:
                        assert got is None
                        continue
                    ids, tf, _ = postings.decode(reader.postings(field, btext))
                    assert np.array_equal(got[0], ids) and np.array_equal(got[1], tf)
                    listed += 1
            assert long.get("body", b"no-such-term") is None
            reader.__dict__["_mdmem_long"] = long
        assert listed and rank_as_whoosh(s, rng, 6)


QUESTIONS = ["when does billing deploy", "refunds for marketplace orders", "ledger codename", "postgres failover",
             "who owns the webhook retries", "deploy window billing tuesday"]


def filled(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "mem", teams={"payments": ["bob", "dana"]}, now=T0, as_user="mdmem")
    topics = ["billing deploys", "refunds for marketplace orders", "postgres failover", "webhook retries"]
    for i in range(24):
        team_fact(repo, f"Note {i}: {topics[i % 4]} follow rule {i % 5} of the ledger codename plan",
                  key=f"rule.n{i}", new_key=True)
    return repo


def answers(repo) -> list:
    return [[(h.path, h.text, round(h.score, 6)) for h in repo.recall(q, as_user="dana", k=6, now=T1)]
            for q in QUESTIONS]


def long_files(root) -> list:
    return sorted((cache_dir(root) / "fulltext").glob(f"*{postings.SUFFIX}"))


def test_a_repo_writes_the_file_with_its_index_and_answers_as_without_it(tmp_path, small_lists, monkeypatch):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    assert len(long_files(repo.root)) == 1
    # A note of the big segment superseded: its old version is a deleted document there.
    team_fact(repo, "Note 0: billing deploys only after the freeze lifts", key="rule.n0", now=T1)
    with_file = answers(repo)
    readers = [leaf.reader() for leaf, _ in repo.index._disk_searcher().leaf_searchers()]
    assert any(r.__dict__.get("_mdmem_long") is not None for r in readers)
    assert all("freeze" in h[1] for a in with_file for h in a if h[0].endswith("n0.md"))
    repo.close()
    monkeypatch.setattr(postings.Attacher, "attach", lambda self, searcher: None)
    again = MemoryRepo.open(repo.root)
    assert answers(again) == with_file
    again.close()


def regions(data: bytes) -> dict:
    """Where a file's parts start (the layout in search/postings.py)."""
    _, n_keys, key_bytes, n_post, docs, fewest, small_crc, segid = postings._HEADER.unpack_from(data, 0)
    ids_at = postings._HEADER.size + 16 * (n_keys + 1) + (key_bytes + 7) // 8 * 8 + (4 * n_keys + 7) // 8 * 8
    return dict(n_keys=n_keys, n_post=n_post, docs=docs, fewest=fewest, segid=segid, ids_at=ids_at,
                tf_at=ids_at + (4 * n_post + 7) // 8 * 8)


def attached(repo) -> list:
    return [leaf.reader().__dict__.get("_mdmem_long") for leaf, _ in repo.index._disk_searcher().leaf_searchers()]


def damage_file(path, damage: str) -> None:
    data = path.read_bytes()
    r = regions(data)
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    elif damage == "fifo":  # an open that would block for ever (attack 9, F7)
        path.unlink()
        os.mkfifo(path)
    elif damage == "other segment":
        path.write_bytes(data[:52] + b"MAIN_someoneelse0000000".ljust(24, b"\0") + data[76:])
    elif damage in ("ids beyond", "ids zeroed"):
        fill = b"\xff" if damage == "ids beyond" else b"\0"
        path.write_bytes(data[:r["ids_at"]] + fill * (4 * r["n_post"]) + data[r["ids_at"] + 4 * r["n_post"]:])
    elif damage in ("weights nan", "weights negative"):  # attack 9, F1: scores NaN reached --json
        tf = np.frombuffer(data[r["tf_at"]:r["tf_at"] + 4 * r["n_post"]], "<f4")
        bad = np.full(len(tf), np.nan, "<f4") if damage == "weights nan" else (tf * -7).astype("<f4")
        path.write_bytes(data[:r["tf_at"]] + bad.tobytes() + data[r["tf_at"] + 4 * r["n_post"]:])
    elif damage == "millions of empty keys":  # attack 9, F2: 2 GB and seconds per process at 2^26
        n = 1 << 22
        with open(path, "wb") as f:
            f.write(postings._HEADER.pack(postings.MAGIC, n, 0, 0, r["docs"], r["fewest"], 0, r["segid"]))
            f.truncate(postings._HEADER.size + 20 * (n + 1))
    elif damage == "one huge key":  # attack 9, F2: every new term copied a 64 MB key to compare
        kb = 1 << 26
        with open(path, "wb") as f:
            f.write(postings._HEADER.pack(postings.MAGIC, 1, kb, 0, r["docs"], r["fewest"], 0, r["segid"]))
            f.truncate(postings._HEADER.size + 16 + kb + 24)
    else:
        raise AssertionError(damage)


DAMAGES = ["truncated", "garbage", "empty", "folder", "fifo", "other segment", "ids beyond", "ids zeroed",
           "weights nan", "weights negative", "millions of empty keys", "one huge key"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_file_is_not_used_and_is_written_again(tmp_path, small_lists, damage):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    expected = answers(repo)
    repo.close()
    [path] = long_files(repo.root)
    damage_file(path, damage)
    # In another process: a FIFO must not hang it (a subprocess, so a hang fails the test).
    probe = subprocess.run([sys.executable, "-c", PROBE, str(repo.root)], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert json.loads(probe.stdout) == [[list(h) for h in a] for a in expected]
    damaged = MemoryRepo.open(repo.root)  # (the probe may have written it again already)
    assert answers(damaged) == expected
    damaged.close()
    again = MemoryRepo.open(repo.root)
    assert answers(again) == expected
    assert any(long is not None for long in attached(again))  # a good file again, and used
    again.close()
    [rewritten] = long_files(repo.root)
    assert rewritten.read_bytes()[:8] == postings.MAGIC and rewritten.stat().st_size < 1 << 20


PROBE = """
import json, sys
from mdmem import MemoryRepo
from mdmem.search import postings
postings.LONG_SEGMENT_DOCS, postings.LONG_POSTINGS = 5, 3
sys.path.insert(0, "tests")
from test_long_postings import answers
repo = MemoryRepo.open(sys.argv[1])
print(json.dumps(answers(repo)))
repo.close()
"""


def test_a_file_cut_short_under_a_running_reader_does_not_kill_it(tmp_path, small_lists):
    """A long-lived process reads lists as it needs them: a file cut short in place meanwhile
    (a copy over it, a sync tool) was a SIGBUS through the memory map (attack 9, F9)."""
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    expected = answers(repo)
    repo.close()
    reader = MemoryRepo.open(repo.root)
    reader.recall("ledger", as_user="dana", k=2)  # the file opened, some lists not read yet
    [path] = long_files(repo.root)
    os.truncate(path, regions(path.read_bytes())["ids_at"] + 8)
    assert answers(reader) == expected
    reader.close()


def test_the_file_goes_with_its_segment(tmp_path, small_lists):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    [first] = long_files(repo.root)
    repo.reindex(rebuild=True)  # a new segment (and a new folder)
    [second] = long_files(repo.root)
    assert first != second and not first.exists()
    repo.close()


def test_a_killed_writers_temporary_is_removed_once_stale(tmp_path, small_lists):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    expected = answers(repo)
    repo.close()
    [path] = long_files(repo.root)
    folder = path.parent
    stale, fresh = folder / f".{path.name}.1.tmp", folder / f".{path.name}.2.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")  # perhaps another process writing it right now
    old = time.time() - 3600
    os.utime(stale, (old, old))
    again = MemoryRepo.open(repo.root)
    assert answers(again) == expected
    again.close()
    assert not stale.exists() and fresh.exists() and path.exists()  # swept once by a process, file there


WORD = "zanzibarqxwvplmnk"


def word_repo(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"], now=T0,
                           as_user="alice", embedder="none")
    for i in range(12):
        team_fact(repo, f"Note {i}: the {WORD} project ships rule {i}", key=f"rule.z{i}", new_key=True)
    repo.reindex(rebuild=True)
    return repo


def test_a_reader_of_the_index_before_an_erasure_writes_no_file_after_it(tmp_path, small_lists, monkeypatch):
    """A process that opened the index before an erasure (an MCP server) writes a segment's
    file only under the index lock and only while the segment is still the index's: it wrote
    the old segment's file, erased words and all, into the rebuilt folder (attack 9, F6)."""
    word_repo(tmp_path).close()
    root = tmp_path / "m"
    [path] = long_files(root)
    path.unlink()  # an index without its file yet
    attach = postings.Attacher.attach
    monkeypatch.setattr(postings.Attacher, "attach", lambda self, searcher, **kw: None)
    reader = MemoryRepo.open(root)
    old = reader.index._disk_searcher()  # the old segment's readers, no file written
    monkeypatch.setattr(postings.Attacher, "attach", attach)
    eraser = MemoryRepo.open(root)
    eraser.forget(as_user="dana", texts=[WORD], now=T1)
    eraser.close()
    reader.index._long.attach(old)  # what the reader does next with what it opened
    reader.close()
    leftovers = [p.name for p in (cache_dir(root) / "fulltext").iterdir() if p.is_file() and WORD.encode() in p.read_bytes()]
    assert leftovers == []
    checker = MemoryRepo.open(root)
    assert checker.prove_gone([WORD], as_user="dana").passed
    checker.close()


def test_prove_gone_sees_a_word_left_in_a_file_of_long_lists(tmp_path, small_lists):
    """Each key ends with a NUL: a raw scan finds a word there as in Whoosh's own files; a
    killed writer's temporary holding an erased word fails the proof (attack 9, F10)."""
    repo = word_repo(tmp_path)
    [path] = long_files(repo.root)
    before = path.read_bytes()
    assert WORD.encode() + b"\0" in before
    repo.forget(as_user="dana", texts=[WORD], now=T1)
    repo.close()
    (path.parent / f".{path.name}.999.1.tmp").write_bytes(before)
    checker = MemoryRepo.open(repo.root)
    assert not checker.prove_gone([WORD], as_user="dana").passed
    checker.close()
