import pytest

from mdmem import BadInput
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
