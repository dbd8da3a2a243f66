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
