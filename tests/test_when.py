"""Questions that name a time rank the notes said or true then higher (valid_from)."""
import datetime as dt

import pytest

from mdmem.search.when import NEAR, named_spans

UTC = dt.timezone.utc


def day(y, m, d):
    return int(dt.datetime(y, m, d, tzinfo=UTC).timestamp())


@pytest.mark.parametrize("question,expected", [
    ("What did Gina find on 1 February, 2023?", [(day(2023, 2, 1), day(2023, 2, 2))]),
    ("What happened on May 23rd, 2023?", [(day(2023, 5, 23), day(2023, 5, 24))]),
    ("What setback did she face in October 2023?", [(day(2023, 10, 1), day(2023, 11, 1))]),
    ("What broke in Dec 2023?", [(day(2023, 12, 1), day(2024, 1, 1))]),
    ("How often did we deploy in 2022?", [(day(2022, 1, 1), day(2023, 1, 1))]),
    ("What changed after 2026-10-15?", [(day(2026, 10, 15), day(2026, 10, 16) + int(NEAR.total_seconds()))]),
    ("What did he do the week before August 3, 2023?",
     [(day(2023, 8, 3) - int(NEAR.total_seconds()), day(2023, 8, 4))]),
])
def test_named_spans(question, expected):
    assert [(s.start, s.end) for s in named_spans(question)] == expected


@pytest.mark.parametrize("question", ["Billing deploys any weekday before 3pm", "May I deploy now?",
                                      "What is on port 8080?", "Who owns 31 flags?", "on 31 February, 2023",
                                      "When did Melanie go camping in June?"])
def test_no_span_where_none_is_named(question):
    assert named_spans(question) == []


def test_a_question_naming_a_date_finds_what_was_said_that_day(repo):
    for when, text in [("2023-05-08T10:00:00Z", "We talked about the garden and the new roses."),
                       ("2023-07-07T10:00:00Z", "We talked about the garden and the flood damage."),
                       ("2023-09-01T10:00:00Z", "We talked about the garden and the harvest.")]:
        repo.remember(text, as_user="alice", kind="episode", subject="user:alice", valid_from=when,
                      now="2023-10-01T00:00:00Z")
    for backend in ("minilm", "none"):
        repo.config.embedder.backend = backend
        repo.close()
        repo._index = repo._recall = None
        hits = repo.recall("What did we talk about on 7 July, 2023?", as_user="alice", now="2023-10-01T00:00:00Z")
        assert hits[0].text == "We talked about the garden and the flood damage.", backend
        hits = repo.recall("What did we talk about in September 2023?", as_user="alice", now="2023-10-01T00:00:00Z")
        assert hits[0].text == "We talked about the garden and the harvest.", backend


@pytest.mark.parametrize("text,tells", [
    ("I went to the support group yesterday.", True),
    ("We painted it last week, took two days.", True),
    ("Got the keys three months ago!", True),
    ("See you on Friday", True),
    ("[7 May 2023] Mel: I painted a sunrise.", False),  # a date in the text is not relative time
    ("The lake was so calm and blue.", False),
    ("Mayday is a word, Sundance a festival, lastly a lasting thing.", False),
])
def test_tells_when(text, tells):
    from mdmem.search.when import tells_when
    assert tells_when(text) is tells


def test_asks_when():
    from mdmem.search.when import asks_when
    assert asks_when("When did Mel paint the sunrise?") and asks_when("  when was the deploy")
    assert not asks_when("What did Mel paint?") and not asks_when("Whenever it rains, what happens?")


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_a_when_question_prefers_the_note_that_places_it_in_time(repo, backend):
    """Both notes say Mel painted the sunrise; only one says when, relative to when it was
    said (the note's valid_from holds that day). The other matches the question better and
    ranks first for any other question, and without WHEN_BOOST for this one too."""
    repo.config.embedder.backend = backend
    timed, untimed = "Mel: Last week I painted a sunrise over the lake.", "Mel: I painted the sunrise over the lake."
    # Said hours apart on the same day: two events, not one conversation's turns (a turn would
    # carry the one before, "last week" included, as its context).
    for text, at in ((timed, "2023-10-01T00:00:00Z"), (untimed, "2023-10-01T03:00:00Z")):
        repo.remember(text, as_user="alice", kind="episode", subject="user:alice", now=at)
    now = "2023-10-02T00:00:00Z"
    when = repo.recall("When did Mel paint the sunrise over the lake?", as_user="alice", now=now)
    plain = repo.recall("Did Mel paint the sunrise over the lake?", as_user="alice", now=now)
    assert when[0].text == timed and plain[0].text == untimed
    if backend == "none":
        # Both questions have the same words; BM25-only scores are at most BM25_WEIGHT, and the
        # boost is scaled to that (the full 0.1 cost REALTALK hit@5 there).
        from mdmem.search.recall import BM25_WEIGHT, WHEN_BOOST
        boost = {h.text: h.score for h in when}[timed] - {h.text: h.score for h in plain}[timed]
        assert boost == pytest.approx(WHEN_BOOST * BM25_WEIGHT, abs=1e-6)


@pytest.mark.parametrize("backend", ["minilm", "none"])
def test_the_when_boost_never_brings_in_an_unrelated_note(repo, backend):
    """The boost acts on notes that already cleared the floor: a note that only says
    'yesterday' is no answer to a question it shares nothing with."""
    repo.config.embedder.backend = backend
    repo.remember("Ann: I went swimming yesterday, last week too.", as_user="alice", kind="episode",
                  subject="user:alice", now="2023-10-01T00:00:00Z")
    assert repo.recall("When did Bob repair the boiler?", as_user="alice", now="2023-10-02T00:00:00Z") == []
