"""A note that only asks a question is weaker evidence than one that answers it."""
import pytest
from conftest import T0, T1

from mdmem.search import recall


def turns(repo):
    # An empty context is given: the answer would otherwise carry the question as its context
    # (ops/conversation.py) and these tests measure the question weight alone.
    repo.remember("Caroline: What was your favourite camping trip with the kids?", as_user="alice",
                  kind="episode", subject="user:alice", now=T0, context="")
    repo.remember("Melanie: My favourite camping trip with the kids was the mountains.",
                  as_user="alice", kind="episode", subject="user:alice", now=T0, context="")


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_the_answer_ranks_above_the_question_that_asked_it(repo, backend):
    repo.config.embedder.backend = backend
    turns(repo)
    hits = repo.recall("favourite camping trip with the kids", as_user="alice", now=T1)
    assert hits[0].text.startswith("Melanie: My favourite camping trip")
    assert len(hits) == 2  # the question is ranked lower, never dropped


def test_without_the_question_weight_the_question_would_win(repo, monkeypatch):
    """Guards the test above: it measures the weight, not an accident of the texts."""
    repo.config.embedder.backend = "none"
    turns(repo)
    monkeypatch.setattr(recall, "QUESTION_WEIGHT", 1.0)
    hits = repo.recall("favourite camping trip with the kids", as_user="alice", now=T1)
    assert hits[0].text.startswith("Caroline: What was your favourite")


def test_asks():
    assert recall.asks("Where did you go? ") and not recall.asks("I went to Paris.")
