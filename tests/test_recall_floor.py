"""The score floor per mode: it decides whether a question has evidence at all; with BM25
only, once one note clears it, the other notes sharing a word with the question fill the
list below it instead of being dropped (45% of long-conversation questions got
fewer than k notes)."""
from conftest import T1


def bm25_only(repo):
    repo.config.embedder.backend = "none"
    repo.close()
    repo._index = repo._recall = None


def episodes(repo, texts):
    """Separate events, hours apart: not turns of one conversation (which would carry the turn
    before as context, ops/conversation.py)."""
    for i, t in enumerate(texts):
        repo.remember(t, as_user="alice", kind="episode", subject="user:alice", now=f"2026-10-01T{2 * i:02d}:00:00Z")


def test_bm25_only_fills_to_k_with_notes_matching_a_word_once_one_clears_the_floor(repo):
    bm25_only(repo)
    episodes(repo, ["The pottery workshop on Saturday was fun",  # 3 of the 5 words: clears the floor
                    "I bought new glaze",                         # 1 of 5 (0.2): below the floor
                    "The kiln room was cold",                     # 1 of 5
                    "We watched a film about whales"])            # no word of the question
    hits = repo.recall("pottery workshop saturday glaze kiln", as_user="alice", k=5, now=T1)
    assert [h.text for h in hits][0] == "The pottery workshop on Saturday was fun"
    assert {h.text for h in hits[1:]} == {"I bought new glaze", "The kiln room was cold"}


def test_bm25_only_returns_nothing_when_no_note_clears_the_floor(repo):
    bm25_only(repo)
    # Coverage counts the question's words that some note contains: five here, and no note
    # has more than one of them (0.2 < 0.25), so none is evidence and none is returned.
    episodes(repo, ["I bought new pottery glaze", "The weather was grey", "We watched a film about whales",
                    "The kiln broke", "My schedule is full"])
    assert repo.recall("pottery weather whales kiln schedule", as_user="alice", k=5, now=T1) == []


def test_the_floor_off_returns_every_matching_note_in_both_modes(repo):
    episodes(repo, ["I bought new pottery glaze", "The weather was grey"])
    repo.config.score_floor = -1
    for backend in ("minilm", "none"):
        repo.config.embedder.backend = backend
        repo.close()
        repo._index = repo._recall = None
        texts = [h.text for h in repo.recall("pottery kiln temperature schedule firing", as_user="alice", k=5,
                                             now=T1)]
        assert "I bought new pottery glaze" in texts, backend
