"""A note read from the work tree is checked once per version: read again unchanged it is the
note already checked (a server's episode writes read the day's turns of their subject again and
again); a changed file, or other kinds, are checked anew; a history rewrite forgets them."""
import pytest

from mdmem.errors import NoteInvalid
from mdmem.model.kinds import Contracts
from mdmem.storage.worktree import notes_named, read_note


def test_a_note_read_again_unchanged_is_not_checked_again_and_a_change_is(repo):
    result = repo.remember("Billing deploys on Tuesdays", as_user="bob", kind="fact", subject="service:billing",
                           key="deploy-day", scope="team", team="payments")
    first = read_note(repo.root, result.path, repo.contracts)
    assert read_note(repo.root, result.path, repo.contracts) is first
    other_kinds = Contracts()
    assert read_note(repo.root, result.path, other_kinds) is not first  # checked against those kinds
    path = repo.root / result.path
    path.write_text(path.read_text().replace("Tuesdays", "Thursdays"))
    changed = read_note(repo.root, result.path, repo.contracts)
    assert changed is not first and "Thursdays" in changed.note.text
    path.write_text("---\nnot: a note\n---\n")
    with pytest.raises(NoteInvalid):
        read_note(repo.root, result.path, repo.contracts)


def test_a_history_rewrite_forgets_the_notes_kept_as_read(repo):
    result = repo.remember("The staging database is Postgres 16", as_user="bob", kind="fact",
                           subject="service:staging", key="db", scope="team", team="payments")
    first = read_note(repo.root, result.path, repo.contracts)
    repo.reset_caches()
    assert read_note(repo.root, result.path, repo.contracts) is not first


def test_a_days_notes_are_not_read_through_a_symbolic_link_above_or_at_their_folder(repo, tmp_path):
    result = repo.remember("Deployed v2, all green", as_user="bob", kind="episode", subject="task:deploy",
                           valid_from="2026-10-01T09:00:00Z", now="2026-10-01T09:00:00Z")
    folder, name = result.path.rsplit("/", 1)
    day = (name[:11],)
    assert [s.path for s in notes_named(repo.root, folder, day, repo.contracts)] == [result.path]
    parent = folder.rsplit("/", 1)[0]
    (repo.root / parent).rename(tmp_path / "elsewhere")
    (repo.root / parent).symlink_to(tmp_path / "elsewhere")  # a folder above the day's folder
    assert notes_named(repo.root, folder, day, repo.contracts) == []
    (repo.root / parent).unlink()
    (tmp_path / "elsewhere").rename(repo.root / parent)
    (repo.root / folder).rename(tmp_path / "month")
    (repo.root / folder).symlink_to(tmp_path / "month")  # the folder itself
    assert notes_named(repo.root, folder, day, repo.contracts) == []
