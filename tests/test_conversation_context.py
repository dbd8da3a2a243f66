"""Conversation turns carry their context: an episode written right after another episode of
the same subject by the same writer gets the one before as its context, unless given one."""
from mdmem.storage.worktree import read_note

T = "2026-10-01T09:00:00Z"


def episode(repo, text, at, user="alice", subject="user:alice", **kw):
    result = repo.remember(text, as_user=user, kind="episode", subject=subject, now=at, valid_from=at, **kw)
    return read_note(repo.root, result.path, repo.contracts).note


def test_an_episode_right_after_another_gets_it_as_context(repo):
    first = episode(repo, "Ann: I adopted a puppy called Biscuit.", "2026-10-01T09:00:00Z")
    assert first.context == "1 October 2026, Ann"  # a turn names its date and speaker, the first one too
    reply = episode(repo, "Bo: What breed is it?", "2026-10-01T09:00:05Z")
    assert reply.context == "1 October 2026, Bo; after Ann: I adopted a puppy called Biscuit."
    third = episode(repo, "[1 October 2026] Ann: A corgi!", "2026-10-01T09:00:09Z")
    assert third.context == "1 October 2026, Ann; after Bo: What breed is it?"
    plain = episode(repo, "Deployed v2, all green", "2026-10-01T09:00:20Z")
    assert plain.context == "1 October 2026; after Ann: A corgi!"


def test_an_episode_that_is_no_turn_and_follows_none_gets_no_context(repo):
    assert episode(repo, "Deployed the billing service", "2026-10-01T09:00:00Z").context is None


def test_a_given_context_wins_and_other_writers_subjects_and_late_turns_are_not_followed(repo):
    episode(repo, "Ann: I adopted a puppy.", "2026-10-01T09:00:00Z")
    assert episode(repo, "Bo: Nice!", "2026-10-01T09:00:01Z", context="the caller's own").context == "the caller's own"
    assert episode(repo, "Other subject", "2026-10-01T09:00:02Z", subject="user:other").context is None
    assert episode(repo, "Bob's turn", "2026-10-01T09:00:03Z", user="bob", subject="user:alice").context is None
    assert episode(repo, "A day later", "2026-10-02T09:00:00Z").context is None


def test_a_batch_of_turns_follows_one_another_across_midnight_and_what_came_before_it(repo):
    episode(repo, "Ann: It is almost midnight.", "2026-10-01T23:59:00Z")
    items = [dict(text=f"turn {i}", kind="episode", subject="user:alice", key=f"t{i}",
                  valid_from=f"2026-10-02T00:0{i}:00Z") for i in range(3)]
    items.append(dict(text="given", kind="episode", subject="user:alice", key="given", context="mine",
                      valid_from="2026-10-02T00:05:00Z"))
    result = repo.remember_many(items, as_user="alice", now="2026-10-02T01:00:00Z")
    notes = [read_note(repo.root, c["path"], repo.contracts).note for c in result.committed]
    assert [n.context for n in notes] == ["2 October 2026; after Ann: It is almost midnight.",
                                         "2 October 2026; after: turn 0", "2 October 2026; after: turn 1", "mine"]
