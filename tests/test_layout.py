"""Note identity to path and back: subjects become folders, keys files, episodes sharded by month,
and no subject, key or root name can name a path outside its place."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdmem import BadInput
from mdmem.model import layout
from mdmem.model.layout import episode_path, keyed_path, parse_path, scope_root
from mdmem.model.clock import parse_time


def test_subject_becomes_folders_and_key_the_file():
    path = keyed_path("team/payments", "service:billing", "fact", "deploy.window")
    assert path == "team/payments/service/billing/fact/deploy.window.md"
    loc = parse_path(path)
    assert (loc.scope, loc.team, loc.subject, loc.kind, loc.key) == ("team", "payments", "service:billing", "fact", "deploy.window")


def test_episodes_are_sharded_by_month():
    path = episode_path("private/ali", "service:billing", parse_time("2026-10-03T10:00:00Z"), "deploy-failed")
    assert path == "private/ali/service/billing/episode/2026-10/2026-10-03-deploy-failed.md"
    loc = parse_path(path)
    assert loc.kind == "episode" and loc.key is None and loc.owner == "ali"


@pytest.mark.parametrize("subject", ["service:../etc", "../x:y", "/abs:y", "service", "a:b/c", "a:b\x00",
                                     "a:" + "x" * 300, "a:.hidden", "a:b\\c"])
def test_bad_subjects_never_name_a_path(subject):
    with pytest.raises(BadInput) as err:
        keyed_path("team/payments", subject, "fact", "k")
    assert "subject" in str(err.value)


@pytest.mark.parametrize("key", ["../x", "a/b", "", ".hidden", "a\nb", "x" * 200, "a..b"])
def test_bad_keys_are_refused(key):
    with pytest.raises(BadInput) as err:
        keyed_path("team/payments", "service:billing", "fact", key)
    assert "key" in str(err.value)


def test_scope_roots_validate_names():
    assert scope_root("private", owner="alice") == "private/alice"
    with pytest.raises(BadInput):
        scope_root("team", team="../x")
    with pytest.raises(BadInput):
        scope_root("public", team="x")


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=130), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,125}\n?", fullmatch=True)))
def test_a_part_is_accepted_exactly_when_it_is_a_safe_folder_name(value):
    """The one-regex fast path accepts nothing the full checks refuse (a trailing newline
    matches ``$``, so the full match matters)."""
    safe = (0 < len(value) <= 120 and ".." not in value and value not in (".", "..")
            and all(c.isascii() and (c.isalnum() or c in "_.-") for c in value) and value[0].isalnum())
    try:
        layout.check_key(value)
        accepted = True
    except BadInput:
        accepted = False
    assert accepted == safe, value
