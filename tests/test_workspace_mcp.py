"""The MCP server over a workspace (`mdmem serve` run in it), driven by the SDK's own stdio client:
the tools span every mount, writes land in their root's repository, and nothing of a repository
the workspace's person may not read comes back."""
from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp import StdioServerParameters
from mcp.client import Client
from workspace_helpers import T0, git, team_of_three, workspace


def data(result):
    if result.structured_content is not None:
        out = result.structured_content
        return out.get("result", out) if isinstance(out, dict) else out
    return json.loads(result.content[0].text)


async def calls(ws_root, user, steps):
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    env.pop("MDMEM_REPO", None)
    server = StdioServerParameters(command=sys.executable, args=["-m", "mdmem.cli.main", "serve", "--as", user,
                                                                 "--allow", "read,write"], env=env, cwd=str(ws_root))
    out = []
    async with Client(server, read_timeout_seconds=60) as client:
        for name, args in steps:
            result = await client.call_tool(name, args)
            deadline = asyncio.get_running_loop().time() + 60
            while (name == "recall" and not result.is_error and data(result).get("index") == "building"
                   and asyncio.get_running_loop().time() < deadline):
                await asyncio.sleep(0.1)
                result = await client.call_tool(name, args)
            out.append(result)
    return out


def alice_beside_bobs_secret(tmp_path):
    """team_of_three's remotes with bob's team/search note pushed, and alice's workspace (payments,
    her private root) holding a note of hers and, open: the caller mounts or writes more."""
    remotes = team_of_three(tmp_path)
    bob = workspace(tmp_path, "bob", remotes, ["team/search", "private/bob"])
    bob.remember("Search reindexes nightly at 2am; bob's secret rota", as_user="bob", kind="fact",
                 subject="service:search", key="reindex", scope="team", team="search", now=T0)
    assert all(m.ok for m in bob.sync(as_user="bob", push=True).mounts)
    bob.close()
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.remember("I am interviewing at Acme", as_user="alice", kind="fact", subject="user:alice", key="job",
                   now=T0)
    return remotes, alice


def test_mcp_over_a_workspace_spans_mounts_and_routes_writes(tmp_path):
    remotes, alice = alice_beside_bobs_secret(tmp_path)
    # a clone alice's host should not have given her: its mdmem.toml does not declare her
    alice.add("team/search", str(remotes["team/search"]), as_user="alice")
    alice.close()
    before = git(alice.clone_path("private/alice"), "rev-parse", "HEAD").strip()
    results = asyncio.run(calls(alice.root, "alice", [
        ("remember", {"text": "Billing deploys on Tuesdays", "kind": "fact", "subject": "service:billing",
                      "key": "deploy.day", "scope": "team", "team": "payments"}),
        ("remember", {"text": "Watched billing deploys on Tuesday", "kind": "episode", "subject": "service:billing"}),
        ("recall", {"query": "deploys interviewing reindexes nightly"}),
        ("get", {"path": "private/alice/user/alice/fact/job.md"}),
        ("get", {"path": "team/search/service/search/fact/reindex.md"}),
        ("startup", {}),
        ("remember", {"text": "x", "kind": "fact", "subject": "service:infra", "key": "x", "scope": "team",
                      "team": "infra"}),
    ]))
    held, wrote, recalled, mine, theirs, startup, unmounted = results
    # an agent's team fact waits for review in the team's repository; its own episode is committed in
    # the person's private repository: one commit there
    assert data(held)["status"] == "held"
    assert f"review/{data(held)['review_id']}" in git(alice.clone_path("team/payments"), "branch", "--list")
    assert not wrote.is_error, wrote.content
    assert data(wrote)["status"] == "committed" and data(wrote)["path"].startswith("private/alice/")
    assert git(alice.clone_path("private/alice"), "rev-list", "--count", f"{before}..HEAD").strip() == "1"
    paths = {h["path"] for h in data(recalled)["hits"]}
    assert data(wrote)["path"] in paths
    assert "private/alice/user/alice/fact/job.md" in paths
    assert not any(p.startswith("team/search") for p in paths)
    assert "Acme" in json.dumps(data(mine))
    every = json.dumps([r.model_dump(mode="json") for r in (recalled, theirs, startup)])
    assert "secret rota" not in every and "2am" not in every
    assert theirs.is_error or "no such note" in json.dumps(theirs.model_dump(mode="json"))
    assert "team/infra is not mounted" in json.dumps(unmounted.model_dump(mode="json"))


def test_a_workspace_served_over_http_answers_its_persons_tokens_across_mounts(tmp_path):
    """`mdmem serve --http --repo WORKSPACE` (docs/server.md: "a workspace or a single
    repository"): alice's token (added with `mdmem token add` in her workspace) remembers into her
    private clone and recalls across her mounts, never the clone her host should not have given her;
    bob's token is refused (a workspace acts for one person); SIGTERM leaves every clone's index
    written and its tree clean."""
    import signal
    import subprocess

    import httpx2
    from http_server import running, session_calls

    from mdmem.auth.static_tokens import TokenFile

    remotes, alice = alice_beside_bobs_secret(tmp_path)
    alice.add("team/search", str(remotes["team/search"]), as_user="alice")  # not hers to read
    alice.close()
    tokens = tmp_path / "tokens.json"
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    added = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "token", "add", "--person", "alice", "--agent",
                            "helper", "--allow", "read,write", "--repo", str(alice.root), "--tokens", str(tokens)],
                           capture_output=True, text=True, env=env)
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    bobs = TokenFile(tokens).add("bob", "helper", frozenset({"read"}))[1]
    with running(alice.root, tokens) as server:
        wrote, recalled = asyncio.run(session_calls(server.url, secret, [
            ("remember", {"text": "Watched billing deploys on Tuesday", "kind": "episode",
                          "subject": "service:billing"}),
            ("recall", {"query": "billing deploys interviewing reindexes nightly"})]))
        assert not wrote.is_error and not recalled.is_error, (wrote.content, recalled.content)
        refused = httpx2.post(server.url, headers={"Authorization": f"Bearer {bobs}", "Content-Type": "application/json",
                                                   "Accept": "application/json, text/event-stream"},
                              content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
                              timeout=30)
        assert refused.status_code == 401, refused.text
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0, server.log()
    assert data(wrote)["status"] == "committed" and data(wrote)["path"].startswith("private/alice/"), data(wrote)
    answer = json.dumps(data(recalled))
    assert data(wrote)["path"] in answer and "Acme" in answer
    assert "secret rota" not in answer and "2am" not in answer
    clone = alice.clone_path("private/alice")
    assert git(clone, "status", "--porcelain").strip() == "", git(clone, "status", "--porcelain")


def test_a_workspace_server_restarts_after_an_erasure_in_a_mount_its_person_could_not_read(tmp_path):
    """A long-lived server over a workspace follows erasures in every clone, not only those its
    person could read when it started: a mount's mdmem.toml may make it readable later, and the
    server then serves it from memory. An erasure there restarts the server in place (same
    process), as one in any of the person's own mounts does."""
    import time

    from http_server import running
    from workspace_helpers import scope_remote

    from mdmem import MemoryRepo
    from mdmem.auth.static_tokens import TokenFile

    remotes = {"team/search": scope_remote(tmp_path, "team/search", members=["bob"], erasers=["bob"], founder="bob"),
               "private/alice": scope_remote(tmp_path, "private/alice")}
    bob = workspace(tmp_path, "bob", remotes, ["team/search"])
    bob.remember("Search reindexes nightly at 2am", as_user="bob", kind="fact", subject="service:search",
                 key="reindex", scope="team", team="search", now=T0, source="user")
    assert all(m.ok for m in bob.sync(as_user="bob", push=True).mounts)
    bob.close()
    alice = workspace(tmp_path, "alice", remotes, ["private/alice"])
    alice.add("team/search", str(remotes["team/search"]), as_user="alice")  # not hers to read (yet)
    alice.close()
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("alice", "helper", frozenset({"read"}))
    with running(alice.root, tokens.path) as server:
        pid = server.proc.pid
        # bob's erasure in that clone (its own mdmem.toml names him an eraser), as a replay of
        # one made upstream would end there (`--repo` inside a workspace names the workspace).
        clone = MemoryRepo.open(alice.clone_path("team/search"), embedder="none")
        try:
            clone.forget(as_user="bob", paths=["team/search/service/search/fact/reindex.md"], force=True)
        finally:
            clone.close()
        deadline = time.monotonic() + 30
        while "restarting in place" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "restarting in place" in server.log(), server.log()
        assert server.proc.poll() is None and server.proc.pid == pid
