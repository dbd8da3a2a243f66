"""A note's frontmatter: parsing with UTC times, round trips, each schema break named by its field,
kind aliases and contracts."""
import pytest

from mdmem import NoteInvalid
from mdmem.model.kinds import Contracts
from mdmem.errors import BadInput
from mdmem.model.validate import validate_note

GOOD = """---
id: 01JDQ6Z4V4K3Y8N1XQ2W5T7RZC
kind: fact
subject: service:billing
key: deploy.window
scope: team
team: payments
owner: bob
source: user
valid_from: 2026-10-15T09:00:00Z
valid_until: null
expires_at: null
derived_from: []
---
Billing deploys any weekday before 3pm.
"""
PATH = "team/payments/service/billing/fact/deploy.window.md"


def test_a_good_note_parses_with_times_in_utc():
    note = validate_note(PATH, GOOD, Contracts())
    assert note.key == "deploy.window" and note.valid_from.isoformat() == "2026-10-15T09:00:00+00:00"
    assert note.text == "Billing deploys any weekday before 3pm."


def test_dump_then_parse_round_trips():
    note = validate_note(PATH, GOOD, Contracts())
    assert validate_note(PATH, note.dumps(), Contracts()) == note


@pytest.mark.parametrize("change,field", [
    (("kind: fact", "kind: gossip"), "kind"),
    (("key: deploy.window\n", ""), "key"),
    (("scope: team", "scope: public"), "scope"),
    (("source: user", "source: rumour"), "source"),
    (("valid_from: 2026-10-15T09:00:00Z", "valid_from: yesterday"), "valid_from"),
    (("owner: bob\n", ""), "owner"),
    (("subject: service:billing", "subject: service:search"), "subject"),
    (("kind: fact", "kind: semantic"), "kind"),
    (("derived_from: []", "derived_from: 3"), "derived_from"),
    (("expires_at: null", "expires_at: null\ntags: 3"), "tags"),
    (("team: payments", "team: [oops"), "frontmatter"),
])
def test_each_schema_break_names_the_field(change, field):
    broken = GOOD.replace(*change)
    with pytest.raises(NoteInvalid) as err:
        validate_note(PATH, broken, Contracts())
    assert err.value.field == field and err.value.path == PATH
    assert str(err.value).startswith(f"{PATH}: {field}: ")


def test_aliases_resolve_to_their_kind():
    c = Contracts()
    assert c.resolve("preference").name == "profile"
    assert c.resolve("semantic").name == "fact"
    assert c.resolve("procedural").name == "procedure" == c.resolve("rule").name
    assert c.resolve("episodic").name == "episode" == c.resolve("event").name
    assert c.resolve("buffer").name == "working" == c.resolve("scratch").name
    with pytest.raises(BadInput):
        c.resolve("gossip")


def test_contracts_read_overrides_from_config():
    from mdmem.config import Config
    cfg = Config.from_dict({"kinds": {"working": {"default_ttl": "2h", "aliases": ["tmp"]}}})
    assert cfg.contracts.resolve("tmp").default_ttl.total_seconds() == 7200


def test_a_note_made_from_another_never_reuses_its_file_text():
    """dumps() is made once per Note; evolve (and equality) must not see that cache."""
    import datetime as dt

    from mdmem.model.note import Note

    note = Note(id="01J", kind="fact", subject="service:billing", scope="private", owner="bob", source="user",
                valid_from=dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc), text="Deploys close at 3pm",
                extra={"tags": ["deploy"]})
    first = note.dumps()
    assert note.dumps() is first
    changed = note.evolve(text="Deploys close at 4pm", id="01K")
    assert "4pm" in changed.dumps() and "01K" in changed.dumps() and "3pm" not in changed.dumps()
    same = note.evolve()
    assert same == note and hash(same) == hash(note) and same.dumps() == first
