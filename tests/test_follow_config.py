"""A repo kept open -- the MCP server, the daemon, a program on the API -- takes up a change of
mdmem.toml as a fresh process would: removing someone from a team ends their reading at once."""
import asyncio

from conftest import git, team_fact
from mcp.client import Client
from test_mcp import data, params

import pytest
from mdmem import BadInput, MemoryRepo


def admin_commits(root, old, new, *, email="mdmem@mdmem.invalid"):
    path = root / "mdmem.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    git(root, "-c", "user.name=admin", "-c", f"user.email={email}", "commit", "-qam", "teams", "--no-verify")


TEAM = 'payments = ["alice", "bob", "dana"]'


def test_a_kept_repo_follows_a_team_change_both_ways(repo):
    team_fact(repo, "Billing deploys after the bluebird review")
    assert repo.recall("bluebird review", as_user="dana")
    admin_commits(repo.root, TEAM, 'payments = ["alice", "bob"]\nops = ["dana"]')
    assert repo.recall("bluebird review", as_user="dana") == []  # dana is a user still, not of payments
    assert repo.recall("bluebird review", as_user="bob")
    admin_commits(repo.root, 'payments = ["alice", "bob"]', TEAM)
    assert repo.recall("bluebird review", as_user="dana")
    fresh = MemoryRepo.open(repo.root)
    assert [h.path for h in fresh.recall("bluebird review", as_user="dana")] == \
        [h.path for h in repo.recall("bluebird review", as_user="dana")]


def test_a_removed_user_is_refused_by_a_kept_repo(repo):
    team_fact(repo, "Billing deploys after the bluebird review")
    admin_commits(repo.root, TEAM, 'payments = ["alice", "bob"]')
    with pytest.raises(BadInput, match="dana is not a user"):
        repo.recall("bluebird", as_user="dana")


def test_a_change_by_a_non_admin_takes_effect_in_a_kept_repo_no_more_than_in_a_fresh_one(repo):
    team_fact(repo, "Billing deploys after the bluebird review")
    # bob adds carol to payments himself: flagged, not in effect (policy/verify.py)
    admin_commits(repo.root, TEAM, 'payments = ["alice", "bob", "dana", "carol"]', email="bob@mdmem.invalid")
    assert repo.recall("bluebird review", as_user="carol") == []
    assert MemoryRepo.open(repo.root).recall("bluebird review", as_user="carol") == []


def test_the_mcp_server_follows_a_team_change_without_a_restart(repo):
    team_fact(repo, "Billing deploys after the bluebird review")

    async def go():
        async with Client(params(repo, "dana", "read"), read_timeout_seconds=60) as client:
            before = data(await client.call_tool("recall", {"query": "bluebird review"}))
            admin_commits(repo.root, TEAM, 'payments = ["alice", "bob"]\nops = ["dana"]')
            after = data(await client.call_tool("recall", {"query": "bluebird review"}))
            return before, after

    before, after = asyncio.run(go())
    assert "bluebird" in str(before)
    assert "bluebird" not in str(after)
