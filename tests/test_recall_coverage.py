"""With an embedder, a note's fused score counts how many of the question's words it has
(its word coverage), not only BM25F's sum scaled to the best note: measured on LoCoMo's dev
half and confirmed on REALTALK (bench_conversations, MEMORY.md). Without an embedder the
fusion is unchanged (coverage there cost REALTALK hit@1)."""
import pytest
from conftest import T0, T1

from mdmem.search.recall import BM25_WEIGHT, COVERAGE_WEIGHT

SAY = dict(as_user="alice", kind="episode", subject="user:alice")
PART = "Ann: We fixed the boiler."
ALL = "Ann: We fixed the boiler and the leaking pipe."
# Findable words: ann, fix, boiler, pipe. PART has three of the four, ALL has every one.
QUESTION = "Did Ann fix the boiler and the pipe?"


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_the_fused_score_adds_the_share_of_the_question_a_note_covers(repo, backend):
    repo.config.embedder.backend = backend
    repo.remember(PART, now=T0, **SAY)
    repo.remember(ALL, now=T0, **SAY)
    hits = {h.text: h for h in repo.recall(QUESTION, as_user="alice", now=T1)}
    best = max(h.bm25 for h in hits.values())
    assert hits[ALL].bm25 == best
    for text, coverage in ((ALL, 1.0), (PART, 0.75)):
        h = hits[text]
        if backend == "minilm":
            expected = h.cosine + BM25_WEIGHT * h.bm25 / best + COVERAGE_WEIGHT * coverage
        else:
            expected = BM25_WEIGHT * h.bm25 / best
        assert h.score == pytest.approx(expected, abs=1e-3), text
    assert COVERAGE_WEIGHT > 0
