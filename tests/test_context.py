"""A note's context: what was around it when written (a conversation turn's speaker, date and
the turn before). It is indexed and embedded with the note but is never the note's text."""
import datetime as dt
import json

import pytest
import yaml
from conftest import T0, T1
from test_erasure import all_bytes

from mdmem import BadInput, NoteInvalid
from mdmem.model.note import MAX_CONTEXT, Note, _fast_metadata, _split_frontmatter, parse_note

WHEN = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc)


def turn(text, context):
    return Note(id="01J", kind="episode", subject="user:alice", scope="private", owner="alice", source="user",
                valid_from=WHEN, text=text, context=context)


@pytest.mark.parametrize("context", [
    "8 May 2023, Caroline; after Melanie: I'm swamped: with \"kids\" & work # ok",
    "- a list? no", "|- a block marker", "'quoted'", "x" * MAX_CONTEXT, "tabs\tand\nnewlines  collapse",
    "null", "2023-05-08", "key: value", "ünïcødé — dashes", "#comment",
])
def test_context_round_trips_and_the_fast_reader_agrees_with_yaml(context):
    text = turn("Yes, last Tuesday!", context).dumps()
    fm = _split_frontmatter(text)[0]
    fast = _fast_metadata(fm)
    assert fast is None or fast == yaml.safe_load(fm)
    parsed = parse_note("p.md", text)
    assert parsed.context == " ".join(context.split())
    assert parsed.text == "Yes, last Tuesday!"


def test_context_is_written_verbatim_so_a_quoted_line_can_be_found_in_the_file():
    line = "Melanie: I'm swamped with the kids & work, \"really\": what's up?"
    assert line in turn("Me too.", f"after {line}").dumps()


def test_bad_context_is_refused_with_the_field_named(repo):
    with pytest.raises(BadInput, match="context"):
        turn("hi", "x" * (MAX_CONTEXT + 1))
    with pytest.raises(BadInput, match="context"):
        repo.remember("hi", as_user="alice", kind="episode", subject="user:alice", context=["a", "list"], now=T0)
    bad = turn("hi", None).dumps().replace("derived_from: []", "derived_from: []\ncontext: {a: 1}")
    with pytest.raises(NoteInvalid, match="context"):
        parse_note("p.md", bad)


def test_a_note_without_context_is_written_as_before():
    assert "context" not in turn("hi", None).dumps()
    assert "context" not in turn("hi", "   ").dumps()


def test_recall_finds_a_turn_through_its_context_and_shows_only_the_turn(repo):
    repo.remember("Yes, last Tuesday!", as_user="alice", kind="episode", subject="user:alice",
                  context="Melanie asked: did you go to the pottery workshop?", now=T0)
    repo.remember("The weather was lovely on the lake.", as_user="alice", kind="episode", subject="user:alice",
                  now=T0)
    for backend in ("minilm", "none"):
        repo.config.embedder.backend = backend
        repo.close()
        repo._index = repo._recall = None
        hits = repo.recall("pottery workshop", as_user="alice", now=T1)
        assert hits and hits[0].text == "Yes, last Tuesday!", backend
        assert "pottery" not in hits[0].text


def test_forgetting_a_turn_scrubs_it_from_the_next_turns_context(repo):
    secret = "my new passport number is X1234567"
    first = repo.remember(f"Caroline: {secret}", as_user="alice", kind="episode", subject="user:alice", now=T0)
    repo.remember("Melanie: Wow, exciting!", as_user="alice", kind="episode", subject="user:alice",
                  context=f"after Caroline: {secret}", now=T0)
    repo.recall("passport", as_user="alice", now=T1)
    assert secret.encode() in all_bytes(repo.root)
    repo.forget(as_user="alice", paths=[first.path], now=T1)
    assert secret.encode() not in all_bytes(repo.root)
    assert repo.prove_gone([secret], as_user="alice", owner="alice").needles[0]["passed"]
    hits = repo.recall("exciting", as_user="alice", now=T1)
    assert [h.text for h in hits] == ["Melanie: Wow, exciting!"]


def test_cli_remember_takes_a_context_and_recall_finds_the_turn_by_it(repo):
    from conftest import run_cli

    r = run_cli("remember", "Yes, last Tuesday!", "--kind", "episode", "--subject", "user:alice", "--context",
                "Melanie asked: did you go to the pottery workshop?", "--repo", str(repo.root), "--as", "alice",
                "--json")
    assert r.returncode == 0, r.stderr
    path = json.loads(r.stdout)["path"]
    assert "context: |-" in (repo.root / path).read_text()
    r = run_cli("recall", "pottery workshop", "--repo", str(repo.root), "--as", "alice", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    hits = out["hits"] if isinstance(out, dict) else out
    assert hits[0]["text"] == "Yes, last Tuesday!"
