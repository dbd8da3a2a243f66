"""The fast frontmatter reader must agree with YAML on every note mdmem writes, and step
aside (return None) for anything it is not sure of."""
import datetime as dt

import frontmatter
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mdmem.model.note import Note, _fast_metadata, _split_frontmatter

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), min_size=1, max_size=80)
sources = st.one_of(st.just("user"), st.just("agent"), names.map(lambda n: f"tool:{n}"),
                    names.map(lambda n: f"web:https://{n}.example/x?y=1"), names.map(lambda n: f"human:{n}"))
times = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=dt.timezone.utc))


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.none(), names), team=st.one_of(st.none(), names), owner=names, source=sources,
       subject=st.tuples(names, names).map(":".join), text=texts, start=times,
       until=st.one_of(st.none(), times), derived=st.lists(names, max_size=3), kind=names)
def test_fast_reader_agrees_with_yaml(key, team, owner, source, subject, text, start, until, derived, kind):
    if not text.strip():
        return
    note = Note(id="01J" + owner, kind=kind, subject=subject, key=key, scope="team" if team else "private",
                team=team, owner=owner, source=source, valid_from=start, valid_until=until,
                derived_from=tuple(derived), text=text)
    data = note.dumps()
    fm, _ = _split_frontmatter(data)
    fast = _fast_metadata(fm)
    slow = frontmatter.loads(data, handler=frontmatter.YAMLHandler()).metadata
    if fast is not None:
        assert fast == {k: (v.isoformat().replace("+00:00", "Z") if isinstance(v, dt.datetime) else v)
                        for k, v in slow.items()} or fast == slow


def test_fast_reader_steps_aside_when_unsure():
    for fm in ["key: 123", "key: yes", "key: 2026-10-15", 'key: "quoted"', "key: [a, b]", "key: a # c",
               "nested:\n  x: 1", "key: &anchor x", "key: 'it''s' extra'"]:
        assert _fast_metadata(fm) is None, fm
    assert _fast_metadata("key: 'it''s'\nlist:\n- a\n- b\nempty: []\nnone: null") == {
        "key": "it's", "list": ["a", "b"], "empty": [], "none": None}
    assert _fast_metadata("a:\nb: x") == {"a": None, "b": "x"} == yaml.safe_load("a:\nb: x")


def yaml_dumps(note):
    """The note's file as PyYAML writes it (what Note.dumps wrote before its fast path)."""
    from mdmem.model.note import _handler

    post = frontmatter.Post(note.text.strip() + "\n")
    post.metadata.update(note.metadata())
    return frontmatter.dumps(post, handler=_handler(), sort_keys=False) + "\n"


# Scalars near the edges of YAML's plain style: ones its resolver reads as something else
# (quoted), indicators, and the ones a writer that guessed would get wrong.
edgy = st.one_of(names, st.text(st.sampled_from("aZ09_.:-=<~!@#$%&*()+|?>,;'\"[]{} \té\n"), min_size=1,
                                 max_size=12),
                 st.sampled_from([".5", "~", "=", "<<", "0x1F", "0o17", "0b101", "1_000", "1:20", "yes", "Off", "Y",
                                  "null", "NULL", "2024-01-01", "2024-1-1T10:00:00Z", ".inf", "-.5e3", "a:", "a: b",
                                  "a #b", "-a", "?a", "1e3", "+1", "_", "a" * 81]))


@settings(max_examples=400, deadline=None)
@given(key=st.one_of(st.none(), edgy), team=st.one_of(st.none(), edgy), owner=edgy, source=st.one_of(sources, edgy),
       subject=edgy, text=texts, start=times, until=st.one_of(st.none(), times), derived=st.lists(names, max_size=2),
       kind=edgy, ident=edgy)
def test_the_fast_writer_writes_what_yaml_writes_or_steps_aside(key, team, owner, source, subject, text, start, until,
                                                                 derived, kind, ident):
    from mdmem.model.note import _dump_flat

    if not text.strip():
        return
    note = Note(id=ident, kind=kind, subject=subject, key=key, scope="team" if team else "private", team=team,
                owner=owner, source=source, valid_from=start, valid_until=until, derived_from=tuple(derived),
                text=text)
    fast = _dump_flat(note)
    assert fast is None or fast == yaml_dumps(note)
    assert note.dumps() == yaml_dumps(note)


def test_an_ordinary_note_is_written_without_yaml():
    """The import's notes (keyed, team, an expiry or none) take the fast writer, and read back
    as the same note."""
    from mdmem.model.note import _dump_flat, parse_note

    start = dt.datetime(2026, 12, 1, 3, 16, 43, tzinfo=dt.timezone.utc)
    for key, team, expires in [("deploy-window.17", "payments", None), (None, None, start + dt.timedelta(days=30)),
                               ("on-call-rotation.3", "payments", start + dt.timedelta(hours=5))]:
        note = Note(id="01M8QTB9388M249EKHFQFC13SE", kind="fact", subject="service:billing3", key=key,
                    scope="team" if team else "private", team=team, owner="bob", source="user", valid_from=start,
                    expires_at=expires, text="The billing team agreed: deploys on Tuesdays.\n\nAsk dana first.")
        fast = _dump_flat(note)
        assert fast is not None and fast == yaml_dumps(note) == note.dumps()
        assert parse_note("team/payments/x.md", fast.encode()) == note
