"""Our vectorised BM25F gives Whoosh's own scores and order, on every path it can take:
several segments, deleted documents, inlined short posting lists, the public-API walk."""
import random

import numpy as np
import pytest
from whoosh import query as Q
from whoosh.filedb.filestore import RamStorage

from mdmem.search import bm25, fulltext, postings

# Already analysed (stems), as fulltext.query_terms would hand them over.
WORDS = "bill deploy refund window stage postgr search rank invoic currenc webhook retri".split()


def corpus_index(seed: int, *, segments: int, deletions: int):
    """A Whoosh index with our schema, written in several commits, some documents deleted."""
    rng = random.Random(seed)
    ix = RamStorage().create_index(fulltext.make_schema())
    n = 0
    for _ in range(segments):
        w = ix.writer()
        for _ in range(rng.randint(5, 80)):
            body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
            w.add_document(doc_id=f"d{n}", path=f"d{n}", root=rng.choice(["team/a", "team/b"]), kind="fact",
                           subject="service:x", key_text=rng.choice(WORDS), subject_text="service x", body=body)
            n += 1
        w.commit(merge=False)
    if deletions:
        w = ix.writer()
        for i in rng.sample(range(n), min(deletions, n)):
            w.delete_by_term("doc_id", f"d{i}")
        w.commit(merge=False)
    return ix, rng


def whoosh_ranking(searcher, terms, allowed: np.ndarray, limit: int):
    q = Q.Or([Q.Term(f, t, boost=b) for t in terms for f, b in fulltext.FIELD_BOOSTS.items()])
    results = searcher.search(q, filter=set(np.flatnonzero(allowed).tolist()), limit=limit)
    return [(hit.docnum, hit.score) for hit in results]


@pytest.mark.parametrize("seed", range(12))
def test_scores_and_order_equal_whooshs_own(seed):
    ix, rng = corpus_index(seed, segments=1 + seed % 4, deletions=seed % 3 * 7)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        assert len(s.leaf_searchers()) >= min(2, 1 + seed % 4)  # several segments really exist
        assert rank_as_whoosh(s, rng, 5)


def rank_as_whoosh(searcher, rng, questions: int) -> int:
    """Random questions over random allowed sets: ours ranks and scores as Whoosh does.
    Returns how many hits were compared."""
    compared = 0
    for _ in range(questions):
        terms = rng.sample(WORDS, rng.randint(1, 4))
        allowed = np.array([rng.random() < 0.7 for _ in range(searcher.doc_count_all())])
        ours = bm25.search(searcher, terms, fulltext.FIELD_BOOSTS, allowed, limit=15, B=fulltext.B, K1=fulltext.K1)
        theirs = whoosh_ranking(searcher, terms, allowed, 15)
        assert [h.docnum for h in ours] == [d for d, _ in theirs]
        assert [h.score for h in ours] == pytest.approx([sc for _, sc in theirs], rel=1e-9)
        compared += len(theirs)
    return compared


def test_deleted_and_disallowed_documents_are_never_returned():
    ix, _ = corpus_index(3, segments=3, deletions=30)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        deleted = {d for d in range(s.doc_count_all()) if s.reader().is_deleted(d)}
        assert deleted
        allowed = np.ones(s.doc_count_all(), dtype=bool)
        allowed[::2] = False
        hits = bm25.search(s, WORDS, fulltext.FIELD_BOOSTS, allowed, limit=1000)
        assert hits and not {h.docnum for h in hits} & deleted
        assert all(allowed[h.docnum] for h in hits)


def test_the_public_matcher_walk_gives_the_same_postings(monkeypatch):
    ix, _ = corpus_index(5, segments=2, deletions=5)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        allowed = np.ones(s.doc_count_all(), dtype=bool)
        blocks = []
        monkeypatch.setattr(postings, "_w3_blocks", lambda m, real=postings._w3_blocks: blocks.append(1) or real(m))
        assert bm25._length_bytes(s.leaf_searchers()[0][0].reader(), "body") is not None
        fast = bm25.search(s, ["bill", "deploy"], fulltext.FIELD_BOOSTS, allowed, limit=50)
        monkeypatch.setattr(postings, "W3LeafMatcher", None)
        monkeypatch.setattr(bm25, "_length_bytes", lambda reader, field: None)
        assert blocks  # the fast path was taken
        slow = bm25.search(s, ["bill", "deploy"], fulltext.FIELD_BOOSTS, allowed, limit=50)
        assert fast == slow and fast


def test_a_field_no_document_of_a_segment_has_reads_as_zero_lengths_at_once():
    # No note here has a context: the segment has no length column for it. Whoosh answers 0 per
    # document after a stat of the missing file each time; read per document, that was most of
    # a server's recall CPU after every write (a new searcher recomputes the lengths).
    ix, _ = corpus_index(7, segments=2, deletions=0)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        for leaf, _ in s.leaf_searchers():
            reader = leaf.reader()
            column = bm25._length_bytes(reader, "context_text")
            assert column is not None and len(column) == reader.doc_count_all() and not column.any()
            assert [reader.doc_field_length(d, "context_text") or 0 for d in range(reader.doc_count_all())] \
                == column.tolist()
        visible = np.ones(s.doc_count_all(), dtype=bool)
        assert bm25.Visible(s, visible).avg_field_length("context_text") == 1.0  # none: the floor of 1


def test_coverage_counts_findable_words_outside_the_subject():
    ix = RamStorage().create_index(fulltext.make_schema())
    with ix.writer() as w:
        w.add_document(doc_id="a", path="a", root="team/a", kind="fact", subject="service:billing",
                       key_text="", subject_text="billing", body="deploys on tuesdays")
        w.add_document(doc_id="b", path="b", root="team/a", kind="fact", subject="service:x",
                       key_text="", subject_text="x", body="billing deploys on fridays")
        w.add_document(doc_id="c", path="c", root="team/a", kind="fact", subject="service:x",
                       key_text="deploy window", subject_text="x", body="deploys need a green build")
    with ix.searcher(weighting=fulltext.weighting()) as s:
        hits = bm25.search(s, fulltext.query_terms("billing deploy zebra"), fulltext.FIELD_BOOSTS, np.ones(3, bool), limit=5,
                           evidence_fields=fulltext.EVIDENCE_FIELDS)
        coverage = {s.stored_fields(h.docnum)["path"]: h.coverage for h in hits}
        # "zebra" is in no note, so it does not count; a's "billing" is only its subject;
        # c has "deploy" in its key and its body: one word, counted once.
        assert coverage == {"b": 1.0, "a": 0.5, "c": 0.5}


@pytest.mark.parametrize("limit", [1, 3, 7, 40])
def test_equal_scores_past_the_limit_are_cut_by_docnum_as_whoosh_does(limit):
    """Only documents scoring at least the limit-th best are sorted (np.partition): of many
    documents with one score, the lowest docnums come first, as in Whoosh, in every segment."""
    ix = RamStorage().create_index(fulltext.make_schema())
    for segment in range(3):
        w = ix.writer()
        for i in range(12):
            body = "refund window" if i % 4 else "refund window refund"  # two scores, many ties each
            w.add_document(doc_id=f"d{segment}-{i}", path=f"d{segment}-{i}", root="team/a", kind="fact",
                           subject="service:x", key_text="", subject_text="x", body=body)
        w.commit(merge=False)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        allowed = np.array([d % 5 != 2 for d in range(s.doc_count_all())])
        for terms in (["refund"], ["window"], ["refund", "window"]):
            ours = bm25.search(s, terms, fulltext.FIELD_BOOSTS, allowed, limit=limit, B=fulltext.B, K1=fulltext.K1)
            assert [(h.docnum, pytest.approx(h.score, rel=1e-9)) for h in ours] == whoosh_ranking(s, terms, allowed, limit)


@pytest.mark.parametrize("seed", range(6))
def test_coverage_of_each_hit_equals_a_count_over_its_fields(seed):
    """A hit's coverage (computed for the returned documents alone, from the kept lists) is the
    share of findable words found in its evidence fields, by Whoosh's public postings; asked
    twice, so the second answer comes from the searcher's kept weights."""
    ix, rng = corpus_index(seed, segments=1 + seed % 3, deletions=seed % 2 * 5)
    with ix.searcher(weighting=fulltext.weighting()) as s:
        for _ in range(4):
            terms = rng.sample(WORDS, rng.randint(1, 4)) + ["zebra"]
            allowed = np.array([rng.random() < 0.8 for _ in range(s.doc_count_all())])
            findable = [t for t in terms if any(s.doc_frequency(f, t) for f in fulltext.FIELD_BOOSTS)]
            holders = {t: {d for f in fulltext.EVIDENCE_FIELDS if s.doc_frequency(f, t)
                           for d in s.postings(f, t).all_ids()} for t in findable}
            for _ in range(2):
                hits = bm25.search(s, terms, fulltext.FIELD_BOOSTS, allowed, limit=10, B=fulltext.B, K1=fulltext.K1,
                                   evidence_fields=fulltext.EVIDENCE_FIELDS)
                assert hits
                for h in hits:
                    assert h.coverage == sum(h.docnum in holders[t] for t in findable) / len(findable)


@pytest.mark.parametrize("seed", range(4))
def test_a_counting_searcher_asks_each_segment_once_per_word_and_ranks_the_same(seed, monkeypatch):
    """The disk searcher counts a term's documents from its segments' kept counts
    (bm25.count_by_segment): Whoosh's own asked every segment's term table for BM25F's count,
    again for idf, and _segment_postings asked twice more (is the term there, how long is its
    list); at 100,000 notes those lookups were most of a first-time question's p95. Each
    (segment, field, term) is now looked up once in a searcher's life, and the ranking and
    scores are Whoosh's."""
    from whoosh.reading import SegmentReader

    ix, rng = corpus_index(seed, segments=3, deletions=seed * 5)
    asked: list[tuple] = []
    looked_up: list[tuple] = []
    real_df, real_contains = SegmentReader.doc_frequency, SegmentReader.__contains__

    def doc_frequency(self, fieldname, text):
        asked.append((id(self), fieldname, text))
        return real_df(self, fieldname, text)

    def contains(self, term):
        looked_up.append(term)
        return real_contains(self, term)

    with ix.searcher(weighting=fulltext.weighting()) as s:
        bm25.count_by_segment(s)
        assert len(s.leaf_searchers()) >= 3
        assert rank_as_whoosh(s, rng, 6)
    with ix.searcher(weighting=fulltext.weighting()) as s:  # a fresh one: nothing asked yet
        bm25.count_by_segment(s)
        monkeypatch.setattr(SegmentReader, "doc_frequency", doc_frequency)
        monkeypatch.setattr(SegmentReader, "__contains__", contains)
        for _ in range(3):
            terms = rng.sample(WORDS, 3)
            bm25.search(s, terms, fulltext.FIELD_BOOSTS, np.ones(s.doc_count_all(), bool), limit=10,
                        B=fulltext.B, K1=fulltext.K1)
        assert asked and looked_up == []
        assert len(asked) == len(set(asked))  # never the same segment, field and word twice
