"""The filter columns read whole agree with the stored fields, document by document, across
segments and deletions; the visibility mask never admits another root."""
import random

import numpy as np
from whoosh.filedb.filestore import RamStorage

from mdmem.search import doctable, fulltext

ROOTS = ["team/payments", "team/search", "private/alice", "private/bob"]
KINDS = ["fact", "episode", "working"]
SUBJECTS = ["service:billing", "service:search", "user:alice"]


def random_index(seed: int):
    rng = random.Random(seed)
    ix = RamStorage().create_index(fulltext.make_schema())
    n = 0
    for _ in range(rng.randint(1, 4)):
        w = ix.writer()
        for _ in range(rng.randint(1, 60)):
            root, kind, subject = rng.choice(ROOTS), rng.choice(KINDS), rng.choice(SUBJECTS)
            times = {f: rng.choice([0, 100, 200, 300, fulltext.NEVER]) for f in doctable.TIME_COLUMNS}
            w.add_document(doc_id=f"d{n}", path=f"d{n}", root=root, kind=kind, subject=subject,
                           root_code=doctable.code(root), kind_code=doctable.code(kind),
                           subject_code=doctable.code(subject), body="x", **times)
            n += 1
        w.commit(merge=False)
    w = ix.writer()
    for i in rng.sample(range(n), n // 5):
        w.delete_by_term("doc_id", f"d{i}")
    w.commit(merge=False)
    return ix, rng


def expected(s, roots, kinds, subject, at):
    out = np.zeros(s.doc_count_all(), dtype=bool)
    for d in range(s.doc_count_all()):
        if s.reader().is_deleted(d):
            continue
        f = s.stored_fields(d)
        out[d] = (f["root"] in roots and (not kinds or f["kind"] in kinds) and (not subject or f["subject"] == subject)
                  and (at is None or (f["valid_from"] <= at < f["valid_until"] and f["expires_at"] > at)))
    return out


def test_masks_equal_a_brute_force_reading_of_stored_fields():
    for seed in range(15):
        ix, rng = random_index(seed)
        with ix.searcher() as s:
            table = doctable.DocTable(s)
            for _ in range(10):
                roots = rng.sample(ROOTS, rng.randint(0, 3))
                kinds = rng.sample(KINDS, rng.randint(0, 2)) or None
                subject = rng.choice([None, *SUBJECTS])
                at = rng.choice([None, 50, 150, 250])
                got = table.allowed(roots, kinds=kinds, subject=subject, live_at=at)
                assert (got == expected(s, roots, kinds, subject, at)).all()


def test_times_of_the_versions_index():
    ix, _ = random_index(99)
    with ix.searcher() as s:
        table = doctable.DocTable(s)
        current = table.allowed(ROOTS, current_at=150)
        started = table.allowed(ROOTS, started_by=150)
        for d in range(s.doc_count_all()):
            if s.reader().is_deleted(d):
                assert not current[d] and not started[d]
                continue
            f = s.stored_fields(d)
            assert current[d] == (f["start"] <= 150 < f["end"])
            assert started[d] == (f["start"] <= 150)


def test_no_roots_sees_nothing_and_a_table_follows_its_searcher():
    ix, _ = random_index(7)
    s = ix.searcher()
    table = doctable.DocTable(s)
    assert not table.allowed([]).any()
    assert doctable.DocTable.of(s, table) is table
    other = ix.searcher()
    assert doctable.DocTable.of(other, table) is not table


def test_admits_checks_the_stored_strings():
    fields = {"root": "team/payments", "kind": "fact", "subject": "service:billing"}
    assert doctable.admits(fields, ["team/payments"], ["fact"], "service:billing")
    assert not doctable.admits(fields, ["team/search"])
    assert not doctable.admits(fields, ["team/payments"], ["episode"])
    assert not doctable.admits(fields, ["team/payments"], None, "service:search")


def test_columns_read_whole_equal_the_public_column_reader():
    ix, _ = random_index(11)
    with ix.searcher() as s:
        for leaf, _ in s.leaf_searchers():
            reader = leaf.reader()
            for name in doctable.CODE_COLUMNS + doctable.TIME_COLUMNS:
                fast = doctable._column(reader, name, reader.doc_count_all())
                public = [reader.column_reader(name, translate=False)[d] for d in range(reader.doc_count_all())]
                assert fast.tolist() == public


def vector_index(vectors: dict[str, list[float]], roots: dict[str, str]):

    ix = RamStorage().create_index(fulltext.make_schema())
    docs = [dict(doc_id=p, path=p, root=roots[p], root_code=doctable.code(roots[p]), body="x",
                 valid_until=fulltext.NEVER, expires_at=fulltext.NEVER, end=fulltext.NEVER,
                 vec=np.array(v, dtype=np.float32)) for p, v in vectors.items()]
    with ix.writer() as w:
        doctable.prepare_vectors(w, docs)
        for d in docs:
            w.add_document(**d)
    return ix


def test_nearest_compares_only_allowed_documents_best_first():
    ix = vector_index({"a": [1, 0, 0], "b": [0.9, 0.1, 0], "c": [0, 1, 0], "secret": [1, 0, 0]},
                      {"a": "team/x", "b": "team/x", "c": "team/x", "secret": "private/alice"})
    with ix.searcher() as s:
        table = doctable.DocTable(s)
        mask = table.allowed(["team/x"], live_at=100)
        hits = table.nearest(np.array([1, 0, 0], dtype=np.float32), mask, 2)
        assert [s.stored_fields(d)["path"] for d, _ in hits] == ["a", "b"]
        assert hits[0][1] == 1.0
        secret = next(d for d in range(s.doc_count_all()) if s.stored_fields(d)["path"] == "secret")
        assert not mask[secret] and secret not in dict(table.nearest(np.array([1, 0, 0], np.float32), mask, 10))
        assert table.cosines(np.array([0, 1, 0], np.float32), [secret]) == {secret: 0.0}
        assert not table.has_vectors(np.zeros(5, np.float32))  # another model's dimension


def test_a_vector_of_another_width_is_refused_and_nothing_is_written():
    from mdmem.errors import EmbedderError

    ix = vector_index({"a": [1, 0, 0]}, {"a": "team/x"})
    w = ix.writer()
    try:
        doctable.prepare_vectors(w, [{"vec": np.zeros(4, np.float32)}])
        raise AssertionError("expected EmbedderError")
    except EmbedderError as exc:
        assert "index --rebuild" in str(exc)
    finally:
        w.cancel()
    assert ix.doc_count() == 1


def test_a_new_searcher_reads_only_the_segments_it_has_not_seen():
    ix = vector_index({"a": [1, 0, 0], "b": [0, 1, 0]}, {"a": "team/x", "b": "team/x"})
    first = doctable.DocTable(ix.searcher())
    w = ix.writer()
    w.add_document(doc_id="c", path="c", root="team/x", root_code=doctable.code("team/x"), body="y",
                   valid_until=fulltext.NEVER, expires_at=fulltext.NEVER, end=fulltext.NEVER,
                   vec=np.array([0, 0, 1], np.float32).tobytes())
    w.delete_by_term("doc_id", "a")
    w.commit(merge=False)
    s = ix.searcher()
    second = doctable.DocTable.of(s, first)
    shared = set(first._segments) & set(second._segments)
    assert shared and all(first._segments[k] is second._segments[k] for k in shared)
    visible = [s.stored_fields(d)["path"] for d in np.flatnonzero(second.allowed(["team/x"], live_at=1))]
    assert sorted(visible) == ["b", "c"]  # the deletion is seen although the segment was reused


def test_vectors_stay_per_segment_and_a_segment_without_them_counts_as_zero():
    ix = RamStorage().create_index(fulltext.make_schema())
    w = ix.writer()
    w.add_document(doc_id="old", path="old", root="team/x", root_code=doctable.code("team/x"), body="x",
                   valid_until=fulltext.NEVER, expires_at=fulltext.NEVER, end=fulltext.NEVER)
    w.commit(merge=False)
    for batch in (["a", "b"], ["c"]):
        docs = [dict(doc_id=p, path=p, root="team/x", root_code=doctable.code("team/x"), body="x",
                     valid_until=fulltext.NEVER, expires_at=fulltext.NEVER, end=fulltext.NEVER,
                     vec=np.array([1.0, 0.0] if p != "b" else [0.0, 1.0], dtype=np.float32)) for p in batch]
        w = ix.writer()
        doctable.prepare_vectors(w, docs)
        for d in docs:
            w.add_document(**d)
        w.commit(merge=False)
    with ix.searcher() as s:
        assert len(s.leaf_searchers()) == 3
        table = doctable.DocTable(s)
        mask = table.allowed(["team/x"], live_at=1)
        ranked = [(s.stored_fields(d)["path"], round(c, 3)) for d, c in table.nearest(np.array([1, 0], np.float32),
                                                                                        mask, 10)]
        assert ranked[:2] in ([("a", 1.0), ("c", 1.0)], [("c", 1.0), ("a", 1.0)])
        assert sorted(ranked[2:]) == [("b", 0.0), ("old", 0.0)]
        by_path = {s.stored_fields(d)["path"]: c for d, c in
                   table.cosines(np.array([0, 1], np.float32), range(s.doc_count_all())).items()}
        assert by_path == {"old": 0.0, "a": 0.0, "b": 1.0, "c": 0.0}


def test_a_column_reader_without_whoosh3_internals_gives_the_same_arrays():
    class Public:
        """Only what every Whoosh column reader offers: one value per document."""

        def __init__(self, col):
            self.col = col

        def __getitem__(self, d):
            return self.col[d]

    ix = vector_index({"a": [1, 0, 0], "b": [0, 0.5, 1]}, {"a": "team/x", "b": "team/y"})
    with ix.searcher() as s:
        reader = s.leaf_searchers()[0][0].reader()
        n = reader.doc_count_all()
        for name, dtype, width in (("vec", "<f4", 3), ("root_code", ">i8", 1), ("valid_until", ">i8", 1)):
            col = reader.column_reader(name, translate=False)
            fast = doctable.read_column(col, n, dtype, width)
            slow = doctable.read_column(Public(col), n, dtype, width)
            assert fast.shape == slow.shape and (fast == slow).all()
