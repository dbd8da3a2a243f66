"""Recall in long conversations: a note with a context is embedded alone and with it (its
vector the mean); BM25's length normalisation is mild (B 0.3); without an embedder, a
common word is still evidence. Each measured on LoCoMo and REALTALK (bench_conversations)."""
import numpy as np
import pytest
from conftest import T0, T1

from mdmem.search import fulltext

SAY = dict(as_user="alice", kind="episode", subject="user:alice")
PREVIOUS = ("John: Italy was awesome! Everything from the food to the history and architecture was amazing, "
            "the pasta in Rome, the canals in Venice and the museums in Florence.")
TURN = "Tim: I'm learning German now - tough but fun."


def test_a_note_with_a_context_is_embedded_alone_and_with_it(repo):
    assert fulltext.embedding_texts(None, "hi") == ["hi"]
    assert fulltext.embedding_texts("a.b", "hi", "Bo asked") == ["a b: hi", "Bo asked\na b: hi"]
    repo.remember(TURN, context=f"after {PREVIOUS}", now=T0, **SAY)
    question = "Which language is Tim learning?"
    hit, = repo.recall(question, as_user="alice", now=T1)
    embedder = repo.index.embedder
    q = embedder.embed_query(question)
    alone, with_context = embedder.embed_documents([TURN, f"after {PREVIOUS}\n{TURN}"])
    # Its cosine is the mean of both, not the one with the context that is mostly about Italy.
    assert hit.cosine == pytest.approx((q @ alone + q @ with_context) / 2, abs=1e-3)
    assert hit.cosine > float(q @ with_context) + 0.02


def test_the_cache_proof_knows_both_embedded_texts(repo):
    """Erasure keeps (and its proof allows) only cache entries for texts history holds: both
    texts a note with a key and a context is embedded as are among them."""
    from mdmem.erasure.scan import HistoryScan, history_texts

    repo.remember(TURN, context=f"after {PREVIOUS}", key="language.learning", as_user="alice", kind="fact",
                  subject="user:alice", now=T0)
    repo.recall("Which language is Tim learning?", as_user="alice", now=T1)  # fills the cache
    texts = history_texts(HistoryScan.read(repo.root), repo.contracts)
    wanted = fulltext.embedding_texts("language.learning", TURN, f"after {PREVIOUS}")
    assert len(wanted) == 2 and set(wanted) <= texts


LONG = ("Barcelona is a must-see city, Spain has it all! You'll love exploring the culture, admiring the "
        "architecture and tasting the amazing food in every little restaurant along the old streets of Spain.")


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_a_long_turn_is_not_buried_under_a_short_one_for_its_length(repo, backend):
    """The long turn says 'Spain' twice, the short one once; Whoosh's B 0.75 ranked the short
    one first only for being short."""
    repo.config.embedder.backend = backend
    repo.remember("Spain, maybe.", now=T0, **SAY)
    repo.remember(LONG, now=T0, **SAY)
    hits = {h.text: h for h in repo.recall("What about Spain?", as_user="alice", now=T1)}
    assert hits[LONG].bm25 > hits["Spain, maybe."].bm25
    if backend == "none":
        assert next(iter(hits)) == LONG


def many_turns(repo):
    """60 turns, 40 of them Tim's: his name is in more than half of the notes."""
    items = [dict(text=f"Tim: note number {i} about the weather and the garden", kind="episode",
                  subject="user:alice") for i in range(40)]
    items += [dict(text=f"Ann: reply number {i} on a quiet afternoon", kind="episode", subject="user:alice")
              for i in range(20)]
    repo.remember_many(items, as_user="alice", now=T0)


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_a_common_word_still_fills_the_list(repo, backend):
    """'What does Tim like?' has one findable word, Tim, in 40 of 60 notes: with BM25 alone it
    was left out (IDF near zero) and the question got nothing."""
    repo.config.embedder.backend = backend
    many_turns(repo)
    hits = repo.recall("What does Tim like?", as_user="alice", k=5, now=T1)
    assert len(hits) == 5
    if backend == "none":
        assert all(h.text.startswith("Tim:") for h in hits)


def test_vectors_of_notes_without_context_stay_unit_length(repo):
    repo.remember("I adopted a corgi.", now=T0, **SAY)
    hit, = repo.recall("corgi", as_user="alice", now=T1)
    q = repo.index.embedder.embed_query("corgi")
    v = repo.index.embedder.embed_documents(["I adopted a corgi."])[0]
    assert hit.cosine == pytest.approx(float(q @ v), abs=1e-3)
    assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_a_word_in_every_note_is_left_out_unless_nothing_else_matches(repo, backend):
    """Scoring a word found in every note reads every posting (~40 ms at 10,000 notes), so
    it is left out; but when the question has no other findable word, it is scored rather
    than returning nothing."""
    repo.config.embedder.backend = backend
    items = [dict(text=f"Service number {i} runs in region {i % 7}", kind="episode", subject="user:alice")
             for i in range(59)]
    items.append(dict(text="Service number 99 runs the billing gateway", kind="episode", subject="user:alice"))
    repo.remember_many(items, as_user="alice", now=T0)
    top = repo.recall("Which service runs billing?", as_user="alice", k=5, now=T1)
    assert top[0].text == "Service number 99 runs the billing gateway"
    assert len(repo.recall("Which service?", as_user="alice", k=5, now=T1)) == 5
