"""The write gate: who may write where, what is held for review, and what is refused before
anything is written (identity, scopes, paraphrased keys, stale versions, hand edits)."""
import pytest
from conftest import T0, T1, snapshot, team_fact

from mdmem import BadInput, Conflict, Refused


def unchanged(repo, action, exc):
    before = snapshot(repo.root)
    with pytest.raises(exc) as err:
        action()
    assert snapshot(repo.root) == before
    return err.value


def test_writing_into_another_users_private_scope_is_refused(repo):
    err = unchanged(repo, lambda: repo.remember("x", as_user="bob", kind="fact", subject="user:alice",
                                               key="k", owner="alice"), Refused)
    assert "private/alice" in str(err)


def test_writing_to_a_team_you_are_not_in_is_refused(repo):
    err = unchanged(repo, lambda: repo.remember("x", as_user="carol", kind="fact", subject="service:billing",
                                               key="k", scope="team", team="payments"), Refused)
    assert "not a member of team payments" in str(err)


def test_a_paraphrase_under_a_new_key_is_refused_with_the_keys_listed(repo):
    team_fact(repo, "Billing events go through RabbitMQ", key="queue.broker")
    err = unchanged(repo, lambda: team_fact(repo, "Billing moved to Kafka", key="messaging", now=T1), Refused)
    assert err.existing_keys == ["queue.broker"]
    ok = team_fact(repo, "Refunds within 30 days", key="refund.window", new_key=True, now=T1)
    assert ok.status == "committed"


def test_a_private_note_never_supersedes_the_team_fact(repo):
    team = team_fact(repo, "Billing deploys any weekday before 3pm")
    mine = repo.remember("I deploy on Mondays", as_user="alice", kind="fact", subject="service:billing",
                         key="deploy.window", now=T1)
    assert mine.path.startswith("private/alice/") and mine.superseded is None
    assert repo.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window", now=T1).path == team.path


@pytest.mark.parametrize("kwargs,exc", [
    (dict(kind="gossip", subject="service:billing", key="k"), BadInput),
    (dict(kind="fact", subject="service:billing"), BadInput),
    (dict(kind="fact", subject="service:../../etc", key="k"), BadInput),
    (dict(kind="fact", subject="service:billing", key="a/b"), BadInput),
    (dict(kind="fact", subject="service:billing", key="k", source="rumour"), BadInput),
])
def test_bad_input_is_refused_before_anything_is_written(repo, kwargs, exc):
    unchanged(repo, lambda: repo.remember("x", as_user="bob", **kwargs), exc)


def test_missing_identity_is_an_error(repo):
    unchanged(repo, lambda: repo.remember("x", as_user=None, kind="fact", subject="service:billing", key="k"), BadInput)
    unchanged(repo, lambda: repo.get(as_user="", subject="service:billing", kind="fact", key="k"), BadInput)


def test_stale_expect_version_is_a_conflict(repo):
    first = team_fact(repo, "v1")
    team_fact(repo, "v2", now=T1)
    err = unchanged(repo, lambda: team_fact(repo, "v3", now=T1, expect_version=first.version), Conflict)
    assert first.version in str(err)


def test_matching_expect_version_supersedes(repo):
    first = team_fact(repo, "v1")
    assert team_fact(repo, "v2", now=T1, expect_version=first.version).superseded == first.version


def test_uncommitted_hand_edits_are_not_overwritten(repo):
    first = team_fact(repo, "v1")
    (repo.root / first.path).write_text((repo.root / first.path).read_text().replace("v1", "v1 edited"))
    unchanged(repo, lambda: team_fact(repo, "v2", now=T1), Conflict)


def test_a_broken_note_on_disk_is_not_written_over(repo):
    first = team_fact(repo, "v1")
    (repo.root / first.path).write_text("---\nkind: [\n---\nbroken\n")
    subprocess_commit(repo.root)
    err = unchanged(repo, lambda: team_fact(repo, "v2", now=T1), Conflict)
    assert "frontmatter" in str(err)


def subprocess_commit(root):
    import subprocess
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "hand edit", "--no-verify"], check=True)


@pytest.mark.parametrize("source,kind", [("tool:repo_read", "fact"), ("web:https://x.example", "fact"),
                                         ("agent", "fact"), ("agent", "profile"), ("agent", "procedure"),
                                         ("agent", "decision"), ("tool:incident_log", "episode")])
def test_untrusted_sources_are_held_by_default(repo, source, kind):
    head = repo.store.head()
    r = repo.remember("held text", as_user="bob", kind=kind, subject="service:billing", key="k",
                      scope="team", team="payments", source=source, now=T0)
    assert r.status == "held" and r.review_id
    assert repo.store.head() == head and not (repo.root / r.path).exists()
    assert [i.review_id for i in repo.review_list(as_user="dana")] == [r.review_id]


@pytest.mark.parametrize("kind", ["episode", "working"])
def test_the_agent_may_record_episodes_and_working_state(repo, kind):
    r = repo.remember("did a thing", as_user="ali", kind=kind, subject="task:x", key="k", source="agent", now=T0)
    assert r.status == "committed"


def test_a_team_digest_from_private_input_is_refused(repo):
    mine = repo.remember("secret plan", as_user="alice", kind="fact", subject="service:billing", key="plan", now=T0)
    err = unchanged(repo, lambda: repo.remember("digest", as_user="alice", kind="summary", subject="service:billing",
                                               scope="team", team="payments", source="system:consolidate", channel="system",
                                               derived_from=[mine.note_id]), Refused)
    assert "wider than its inputs" in str(err)
