"""Findings of the fifth attack (notes/attack5.md), each a test that failed before its fix."""
from __future__ import annotations

import pytest

from conftest import T0, git, run_cli
from mdmem import MemoryRepo
from mdmem.errors import BadInput, Refused

ENV = {"MDMEM_EMBEDDER": "none"}


@pytest.fixture
def team(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           erasers=["dana"], now=T0, as_user="alice", embedder="none")
    repo.remember("Alice home phone 555-0142", as_user="alice", kind="profile", subject="user:alice", key="phone",
                  now=T0)
    repo.remember("Search reindexes nightly", as_user="carol", kind="fact", subject="service:search",
                  key="reindex", scope="team", team="search", now=T0)
    return repo


def widen_locally(root):
    """bob's uncommitted edit: himself an eraser, a member of search, self-approval on."""
    cfg = root / "mdmem.toml"
    text = cfg.read_text()
    text = text.replace('erasers = ["dana"]', 'erasers = ["dana", "bob"]')
    text = text.replace('search = ["carol"]', 'search = ["carol", "bob"]')
    text = text.replace("self_approve = false", "self_approve = true")
    assert text != cfg.read_text()
    cfg.write_text(text)


# A1. An uncommitted edit of mdmem.toml gave its author every role in his clone: he erased
# another person's notes (and pushed the rewrite through the guard), approved his own held
# write and rendered views naming himself a reader.
def test_an_uncommitted_config_edit_grants_no_role(team):
    root = team.root
    widen_locally(root)
    r = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert (root / "private" / "alice").exists() and "555-0142" in git(root, "log", "-p", "--all").stdout
    with MemoryRepo(root, embedder="none") as repo:
        assert "bob" not in repo.access.erasers and "bob" not in repo.access.teams["search"]
        assert not repo.config.self_approve
        assert repo.recall("reindexes nightly", as_user="bob", now=T0) == []
        with pytest.raises(Refused):
            repo.remember("Search is slow", as_user="bob", kind="fact", subject="service:search", key="speed",
                          scope="team", team="search", now=T0)
        held = repo.remember("p50 is 20ms", as_user="bob", kind="fact", subject="service:billing", key="p50",
                             scope="team", team="payments", source="tool:grafana", new_key=True, now=T0)
        assert held.status == "held"
        with pytest.raises(Refused):
            repo.approve(held.review_id, as_user="bob", now=T0)
        repo.render(as_user="bob")
    assert "bob" not in (root / "team" / "search" / "MEMORY.md").read_text()


def test_an_admins_config_edit_applies_once_committed(team):
    root = team.root
    widen_locally(root)
    git(root, "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam", "bob joins search",
        "--no-verify")
    with MemoryRepo(root, embedder="none") as repo:
        assert "bob" in repo.access.erasers and "bob" in repo.access.teams["search"]
        assert [h.subject for h in repo.recall("reindexes nightly", as_user="bob", now=T0)] == ["service:search"]


def test_an_uncommitted_config_that_does_not_parse_is_still_the_persons_error(team):
    (team.root / "mdmem.toml").write_text("[teams\n")
    r = run_cli("recall", "phone", "--as", "alice", env=ENV, cwd=team.root)
    assert r.returncode == 2 and "does not parse as TOML" in r.stderr


# A2. Trusted sources that name a writer were taken on the caller's word: bob committed a
# team fact as human:dana, unreviewed, and every view said dana wrote it.
@pytest.mark.parametrize("source", ["human:dana", "system:sync", "system:consolidate"])
def test_a_person_cannot_write_as_another_person_or_as_mdmem(team, source):
    before = git(team.root, "rev-parse", "HEAD").stdout
    r = run_cli("remember", "Payments on-call is carol", "--kind", "fact", "--subject", "service:billing",
                "--key", "oncall", "--scope", "team", "--team", "payments", "--new-key", "--source", source,
                "--as", "bob", env=ENV, cwd=team.root)
    assert r.returncode == 3 and f"source: {source}" in r.stderr, (r.returncode, r.stderr)
    assert git(team.root, "rev-parse", "HEAD").stdout == before
    # The same claim in an import line is refused with its line; the rest is written.
    items = [{"text": "On-call is carol", "kind": "fact", "subject": "service:billing", "key": "oncall",
              "scope": "team", "team": "payments", "source": source, "line": 1},
             {"text": "On-call rota is weekly", "kind": "fact", "subject": "service:billing", "key": "rota",
              "scope": "team", "team": "payments", "line": 2}]
    result = team.remember_many(items, as_user="bob", now=T0, new_key=True)
    assert [r["line"] for r in result.refused] == [1] and len(result.committed) == 1


def test_a_person_may_name_themselves(team):
    w = team.remember("I deploy on Fridays", as_user="bob", kind="fact", subject="service:billing", key="mine",
                      scope="team", team="payments", source="human:bob", new_key=True, now=T0)
    assert w.status == "committed"
    digest = team.consolidate(as_user="bob", subject="service:billing", scope="team", team="payments", now=T0)
    assert digest.status == "committed"
    assert "Memory-Source: system:consolidate" in git(team.root, "log", "-1", "--format=%B").stdout


# A10. A person approved their own agent's held team write alone: "waits for a teammate's
# review" was not true, and an agent with a shell could approve itself.
def test_an_agents_team_write_is_approved_by_a_teammate_not_its_person(team):
    held = team.remember("Refunds are 90 days now", as_user="bob", kind="fact", subject="service:billing",
                         key="refunds", scope="team", team="payments", source="agent:claude", channel="agent",
                         new_key=True, now=T0)
    assert held.status == "held"
    with pytest.raises(Refused, match=rf"approve {held.review_id} --as alice \(or dana\)$"):
        team.approve(held.review_id, as_user="bob", now=T0)
    assert team.approvers(held.review_id, as_user="bob") == ["alice", "dana"]
    assert team.approve(held.review_id, as_user="alice", now=T0).status == "committed"
    # In the person's own private root the person is the only reader: they approve.
    mine = team.remember("I prefer tabs", as_user="bob", kind="fact", subject="user:bob", key="tabs",
                         source="agent:claude", channel="agent", now=T0)
    assert mine.status == "held" and team.approve(mine.review_id, as_user="bob", now=T0).status == "committed"


# A5. ttl 0 (or under a second) wrote `expires_at: null`: a working note that never expires,
# past the agent's ttl cap.
@pytest.mark.parametrize("ttl", ["0s", "0", "-0s", "1e-9s", 0])
def test_a_ttl_under_a_second_is_refused(team, ttl):
    for channel, source in (("human", "user"), ("agent", "agent:claude")):
        with pytest.raises(BadInput, match="ttl: .* under a second"):
            team.remember("zero ttl", as_user="bob", kind="working", subject="user:bob", key="z0", ttl=ttl,
                          source=source, channel=channel, now=T0)
    assert not (team.root / "private" / "bob").exists()


# A7. recall's warning about a broken note printed a committed file name's newline raw: a
# teammate could fake extra output lines.
def test_recall_warnings_are_one_line_each(team):
    folder = team.root / "team" / "payments" / "service" / "billing" / "fact"
    folder.mkdir(parents=True)
    (folder / "x\nFAKE ok: all good.md").write_text("---\nkind: fact\n---\nhi\n")
    git(team.root, "add", "-A")
    git(team.root, "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "x", "--no-verify")
    r = run_cli("recall", "hi", "--as", "dana", env=ENV, cwd=team.root)
    assert r.returncode == 0, r.stderr
    assert not any(line.startswith("FAKE") for line in r.stdout.splitlines())
    assert "x\\nFAKE ok: all good.md: " in r.stdout
