"""History from git: every version of a note, its state at a past time, and never a version the
reader may not see."""
import pytest
from conftest import T0, T1, team_fact

from mdmem import NotFound


def test_history_lists_every_version_from_git(repo):
    team_fact(repo, "Tuesdays and Thursdays")
    team_fact(repo, "Any weekday before 3pm", now=T1)
    versions = repo.history(as_user="dana", subject="service:billing", kind="fact", key="deploy.window")
    assert [v.note.text for v in versions] == ["Any weekday before 3pm", "Tuesdays and Thursdays"]
    assert [v.op for v in versions] == ["supersede", "create"] and versions[0].actor == "bob"


def test_history_at_a_past_time(repo):
    team_fact(repo, "Tuesdays and Thursdays")
    r = team_fact(repo, "Any weekday before 3pm", now=T1)
    [v] = repo.history(as_user="bob", path=r.path, at="2026-10-10T00:00:00Z")
    assert v.note.text == "Tuesdays and Thursdays"
    with pytest.raises(NotFound):
        repo.history(as_user="bob", path=r.path, at="2026-09-01T00:00:00Z")


def test_history_of_the_team_fact_never_shows_a_private_note(repo):
    team_fact(repo, "Any weekday before 3pm")
    repo.remember("My own note: Mondays only", as_user="alice", kind="fact", subject="service:billing",
                  key="deploy.window", now=T1)
    for user in ("bob", "dana"):
        versions = repo.history(as_user=user, subject="service:billing", kind="fact", key="deploy.window")
        assert all("Mondays" not in v.note.text for v in versions)


def test_history_of_a_note_you_may_not_see_is_not_found(repo):
    r = repo.remember("secret", as_user="alice", kind="fact", subject="user:alice", key="k", now=T0)
    with pytest.raises(NotFound):
        repo.history(as_user="bob", path=r.path)


def test_a_walk_stops_at_the_first_version_the_user_may_not_see(repo):
    import subprocess
    r = team_fact(repo, "public now")
    # A hand edit that once re-scoped the file's frontmatter to a private owner.
    path = repo.root / r.path
    text = path.read_text()
    path.write_text(text.replace("scope: team\nteam: payments", "scope: private"))
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qam", "oops", "--no-verify"], check=True)
    path.write_text(text.replace("public now", "public again"))
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qam", "fix", "--no-verify"], check=True)
    versions = repo.history(as_user="dana", path=r.path)
    assert [v.note.text for v in versions] == ["public again"]
