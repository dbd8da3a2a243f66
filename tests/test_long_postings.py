"""A big segment's long posting lists, decoded once into a file beside it (search/postings.py):
read from the file they give exactly the decoded lists, Whoosh's own scores and order (deleted
documents included in the file, left out when read); a repo writes the file when its index is
built and answers as without it; a damaged file is not used and is written again; the file goes
with its segment; a killed writer's temporary is removed."""
from __future__ import annotations

import gc
import json
import os
import shutil
import zlib
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import T0, T1, team_fact
from test_index_bm25 import corpus_index, rank_as_whoosh

from mdmem import MemoryRepo
from mdmem.search import bm25, fulltext, postings
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


def test_the_disk_searcher_counts_by_segment_and_answers_as_whooshs_counts(tmp_path, small_lists, monkeypatch):
    """NoteIndex's disk searcher counts a word's documents from its segments' kept counts
    (bm25.count_by_segment), which also check a kept long list's length: the answers, scores
    included, equal those with Whoosh's own counting, with and without a superseded note."""
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    team_fact(repo, "Note 0: billing deploys only after the freeze lifts", key="rule.n0", now=T1)
    counted = answers(repo)
    readers = [leaf.reader() for leaf, _ in repo.index._disk_searcher().leaf_searchers()]
    assert any(r.__dict__.get("_mdmem_long") is not None for r in readers)
    assert all(r.__dict__.get("_mdmem_df") for r in readers)  # every segment's counts were kept
    repo.close()
    from whoosh.reading import SegmentReader

    asked: list[tuple] = []
    real = SegmentReader.doc_frequency

    def doc_frequency(self, fieldname, text):
        asked.append((id(self), fieldname, text))
        return real(self, fieldname, text)

    monkeypatch.setattr(SegmentReader, "doc_frequency", doc_frequency)
    fresh = MemoryRepo.open(repo.root)  # holds no recent notes: the disk searcher alone
    assert answers(fresh) == counted
    fresh.close()
    assert asked and len(asked) == len(set(asked))  # each segment, field and word asked once
    monkeypatch.setattr(bm25, "count_by_segment", lambda searcher: None)
    again = MemoryRepo.open(repo.root)
    assert answers(again) == counted
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
    elif damage == "fifo":  # an open that would block for ever
        path.unlink()
        os.mkfifo(path)
    elif damage == "other segment":
        path.write_bytes(data[:52] + b"MAIN_someoneelse0000000".ljust(24, b"\0") + data[76:])
    elif damage in ("ids beyond", "ids zeroed"):
        fill = b"\xff" if damage == "ids beyond" else b"\0"
        path.write_bytes(data[:r["ids_at"]] + fill * (4 * r["n_post"]) + data[r["ids_at"] + 4 * r["n_post"]:])
    elif damage in ("weights nan", "weights negative"):  # scores NaN reached --json
        tf = np.frombuffer(data[r["tf_at"]:r["tf_at"] + 4 * r["n_post"]], "<f4")
        bad = np.full(len(tf), np.nan, "<f4") if damage == "weights nan" else (tf * -7).astype("<f4")
        path.write_bytes(data[:r["tf_at"]] + bad.tobytes() + data[r["tf_at"] + 4 * r["n_post"]:])
    elif damage == "millions of empty keys":  # 2 GB and seconds per process at 2^26
        n = 1 << 22
        with open(path, "wb") as f:
            f.write(postings._HEADER.pack(postings.MAGIC, n, 0, 0, r["docs"], r["fewest"], 0, r["segid"]))
            f.truncate(postings._HEADER.size + 20 * (n + 1))
    elif damage == "one huge key":  # every new term copied a 64 MB key to compare
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
    (a copy over it, a sync tool) was a SIGBUS through the memory map."""
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
    the old segment's file, erased words and all, into the rebuilt folder."""
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
    killed writer's temporary holding an erased word fails the proof."""
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


# --- checksummed files that still lie, descriptors, a linked folder ------------
def read_entries(path):
    """(docs, segment id, [(key without its NUL, ids, tf)]) of a v2 file."""
    data = path.read_bytes()
    _, n_keys, key_bytes, n_post, docs, fewest, _, segid = postings._HEADER.unpack_from(data, 0)
    at = postings._HEADER.size
    key_at = np.frombuffer(data, "<u8", n_keys + 1, at).astype(int)
    keys_from = at + 8 * (n_keys + 1)
    post_from = keys_from + postings._pad8(key_bytes)
    post_at = np.frombuffer(data, "<u8", n_keys + 1, post_from).astype(int)
    ids_from = post_from + 8 * (n_keys + 1) + postings._pad8(4 * n_keys)
    tf_from = ids_from + postings._pad8(4 * n_post)
    ids = np.frombuffer(data, "<u4", n_post, ids_from)
    tf = np.frombuffer(data, "<f4", n_post, tf_from)
    out = []
    for i in range(n_keys):
        key = data[keys_from + key_at[i]:keys_from + key_at[i + 1] - 1]
        out.append((key, ids[post_at[i]:post_at[i + 1]].copy(), tf[post_at[i]:post_at[i + 1]].copy()))
    return docs, segid, out


def write_entries(path, docs, segid, entries):
    """A v2 file with valid checksums, as postings.write makes it, from any entries."""
    keys = b"".join(k + b"\0" for k, _, _ in entries)
    key_at = np.zeros(len(entries) + 1, "<u8")
    key_at[1:] = np.cumsum([len(k) + 1 for k, _, _ in entries])
    post_at = np.zeros(len(entries) + 1, "<u8")
    post_at[1:] = np.cumsum([len(i) for _, i, _ in entries])
    crcs = np.array([zlib.crc32(t.astype("<f4").tobytes(), zlib.crc32(i.astype("<u4").tobytes()))
                     for _, i, t in entries], "<u4")
    n_post = int(post_at[-1])
    ids = np.concatenate([i for _, i, _ in entries]).astype("<u4")
    tf = np.concatenate([t for _, _, t in entries]).astype("<f4")
    small = (key_at.tobytes() + keys.ljust(postings._pad8(len(keys)), b"\0") + post_at.tobytes()
             + crcs.tobytes().ljust(postings._pad8(4 * len(entries)), b"\0"))
    fewest = min(len(i) for _, i, _ in entries)
    header = postings._HEADER.pack(postings.MAGIC, len(entries), len(keys), n_post, docs, fewest,
                                   zlib.crc32(small), segid)
    path.write_bytes(header + small + ids.tobytes().ljust(postings._pad8(4 * n_post), b"\0") + tf.tobytes())




def _term(word: str) -> bytes:
    return [t.text for t in fulltext.ANALYZER(word)][0].encode()


def test_a_checksummed_list_shorter_than_the_segments_is_not_used(tmp_path, small_lists):
    """A list of 3 where Whoosh has 6, rising, inside, positive, with a good checksum: its
    length is checked against the term's document frequency. A file crafted
    with good checksums and lists of the right length but other documents would still be used,
    as Whoosh's own segment files would be."""
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    expected = [[h.path for h in repo.recall("billing deploys", as_user="dana", k=6, now=T1)]]
    repo.close()
    [path] = long_files(repo.root)
    docs, segid, entries = read_entries(path)
    cut = {b"body\0" + _term("billing"), b"body\0" + _term("deploys")}
    write_entries(path, docs, segid, [(k, ids[:3], tf[:3]) if k in cut else (k, ids, tf) for k, ids, tf in entries])
    again = MemoryRepo.open(repo.root)
    got = [[h.path for h in again.recall("billing deploys", as_user="dana", k=6, now=T1)]]
    again.close()
    assert got == expected


def test_a_touched_file_is_not_removed_by_a_reader_that_still_holds_it(tmp_path, small_lists):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    repo.close()
    [path] = long_files(repo.root)
    good = path.read_bytes()
    again = MemoryRepo.open(repo.root)
    first = again.index._disk_searcher()  # a recall in flight on one thread (MCP server, daemon)
    [reader] = [leaf.reader() for leaf, _ in first.leaf_searchers()
                if leaf.reader().__dict__.get("_mdmem_long") is not None]
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a backup tool, touch, rsync -t
    second = again.index._ix.searcher(weighting=fulltext.weighting())  # another thread's refreshed searcher
    again.index._long.attach(second)  # the same file, new stamp: the kept LongPostings is closed
    found = bm25._segment_postings(reader, "body", _term("billing").decode())  # the first recall reads on
    assert found is not None
    second.close()
    again.close()
    assert path.exists() and path.read_bytes() == good, "the good file was removed (discard on 'closed')"


def test_repos_dropped_unclosed_leak_no_descriptors(tmp_path, small_lists):
    repo = filled(tmp_path)
    repo.reindex(rebuild=True)
    repo.close()
    assert long_files(repo.root)

    def fds():
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    def one():  # a script, a notebook, a web handler: open, ask, drop
        MemoryRepo.open(repo.root).recall("billing deploys", as_user="dana", k=3, now=T1)

    one()
    before = fds()
    for _ in range(30):
        one()
    after = fds()
    leaked = []
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue
        if target.endswith(postings.SUFFIX):
            leaked.append(target)
    assert after - before < 5 and len(leaked) < 5, f"{after - before} descriptors leaked over 30 dropped repos; {len(leaked)} on {leaked[:1]}"


def test_an_erasure_clears_an_index_folder_moved_behind_a_link(tmp_path):
    repo = word_repo(tmp_path)
    repo.close()
    folder = cache_dir(repo.root) / "fulltext"
    elsewhere = tmp_path / "bigdisk" / "fulltext"  # the index moved to another disk, linked back
    elsewhere.parent.mkdir()
    shutil.move(str(folder), str(elsewhere))
    folder.symlink_to(elsewhere)
    again = MemoryRepo.open(repo.root)
    assert again.recall(WORD, as_user="dana", now=T1)
    again.forget(as_user="dana", texts=[WORD], now=T1)
    hits = again.recall(WORD, as_user="dana", now=T1)
    proof = again.prove_gone([WORD], as_user="dana")
    again.close()
    left = [str(p) for p in [*folder.parent.rglob("*"), *elsewhere.rglob("*")]
            if p.is_file() and not p.is_symlink() and WORD.encode() in p.read_bytes()]
    assert not hits, "recall still finds the erased word"
    assert left == [] or not proof.passed, f"prove-gone passed with the word still in {left}"


def test_a_file_of_lists_shorter_than_any_long_list_is_not_read(tmp_path, small_lists):
    """Lists of 2 postings (a real file's have LONG_POSTINGS or more): a million such keys fit
    the size cap and cost every process 0.8 s and 136 MB at open."""
    path = tmp_path / "MAIN_x.longpost"
    entries = [(f"body\0w{i}".encode(), np.array([0, 1 + i % 5]), np.array([1.0, 1.0])) for i in range(1000)]
    write_entries(path, 3000, b"MAIN_x", entries)
    with pytest.raises(ValueError):
        postings.LongPostings(path, 3000, "MAIN_x", 1 << 30).close()


