"""Who commits: mdmem's own commits carry [people.<user>] name and e-mail when configured;
`watch --commit` commits a person's edits under their own git identity."""
import subprocess

import pytest
from conftest import T0, TEAMS, team_fact

from mdmem import MemoryRepo
from mdmem.config import Config
from mdmem.errors import BadInput


def _configure_people(repo, text):
    cfg = repo.root / "mdmem.toml"
    cfg.write_text(cfg.read_text() + text)
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qam", "people", "--no-verify"], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "mdmem@mdmem.invalid", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    return MemoryRepo.open(repo.root)


def test_mdmem_commits_use_the_people_table(repo):
    repo = _configure_people(repo, '\n[people.bob]\nname = "Bob Builder"\nemail = "bob@example.org"\n'
                                   'emails = ["bob@old.example.org"]\n')
    team_fact(repo, "Billing deploys any weekday")
    assert repo.store.git("log", "-1", "--format=%an <%ae>").strip() == "Bob Builder <bob@example.org>"
    # Without an entry the handle at a domain that cannot receive mail is used.
    repo.remember("Dana's note", as_user="dana", kind="fact", subject="user:dana", key="x", now=T0)
    assert repo.store.git("log", "-1", "--format=%an <%ae>").strip() == "dana <dana@mdmem.invalid>"


def test_people_emails_map_back_to_the_user():
    cfg = Config.from_dict({"people": {"bob": {"emails": ["Bob@Example.org"]}}})
    assert cfg.user_for_email("bob@example.org") == "bob"
    assert cfg.identity("bob") == ("bob", "Bob@Example.org")
    assert cfg.user_for_email("eve@example.org") is None


@pytest.mark.parametrize("people,field", [
    ({"bob": {"name": "Bob <evil>"}}, "people.bob.name"),
    ({"bob": {"email": "a\nb"}}, "people.bob.email"),
    ({"bob": {"emails": "bob@x"}}, "people.bob.emails"),
    ({"bob": "x"}, "people.bob"),
    ({"bad name!": {}}, "people"),
])
def test_bad_people_entries_name_the_field(people, field):
    with pytest.raises(BadInput, match=field.replace(".", r"\.")):
        Config.from_dict({"people": people})


def test_memory_repo_of_a_path_opens_it(repo):
    again = MemoryRepo(repo.root)
    assert again.config.teams == {t: frozenset(m) for t, m in TEAMS.items()}
    with pytest.raises(BadInput, match="mdmem.toml"):
        MemoryRepo(repo.root.parent)
