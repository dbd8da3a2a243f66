"""The filter columns read whole agree with the stored fields, document by document, across
segments and deletions; the visibility mask never admits another root."""
import random

import numpy as np
from whoosh.filedb.filestore import RamStorage

from mdmem.index import doctable, fulltext

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
