"""Erased text leaves a server running over a workspace: an erasure made in a teammate's clone of
a mounted scope repository, brought in by the workspace's `sync --replay`, restarts the server
(it follows every mount), so no copy of the erased text stays in its memory."""
import asyncio
import os
import sys
import time

from mcp import StdioServerParameters
from mcp.client import Client
from test_erasure_processes import memory_holds, server_pids
from workspace_helpers import T0, team_of_three, workspace

from conftest import run_cli

SECRET = "Escalations after hours go to the quokkabanana plinth pager"


def test_a_workspace_server_holds_no_erased_text_once_its_sync_replays_an_erasure(tmp_path):
    remotes = team_of_three(tmp_path)
    carol = workspace(tmp_path, "carol", remotes, ["team/payments"])
    made = carol.remember(SECRET, as_user="carol", kind="fact", subject="service:billing", key="escalation",
                          scope="team", team="payments", now=T0)
    assert all(m.ok for m in carol.sync(as_user="carol", push=True).mounts)
    alice = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    alice.close()
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    env.pop("MDMEM_REPO", None)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mdmem.cli.main", "serve", "--repo",
                                                                 str(alice.root), "--as", "alice", "--allow", "read"],
                                   env=env, cwd=str(alice.root))

    async def session():
        async with Client(params, read_timeout_seconds=60) as client:
            for _ in range(240):
                first = await client.call_tool("recall", {"query": "who gets escalations after hours"})
                if "building" not in str(first.content):
                    break
                await asyncio.sleep(0.5)
            [pid] = server_pids(alice.root)
            assert memory_holds(pid, b"quokkabanana"), first
            carol.forget(as_user="carol", paths=[made.path], push=True, now=T0)
            replay = run_cli("sync", "--replay", "--as", "alice", cwd=alice.root, env={"MDMEM_EMBEDDER": "none"})
            assert replay.returncode == 0, replay.stdout + replay.stderr
            deadline = time.monotonic() + 10  # the server looks once a second
            while time.monotonic() < deadline:
                await client.call_tool("recall", {"query": "deploy window"})
                if not any(memory_holds(p, b"quokkabanana") for p in server_pids(alice.root)):
                    return False
                await asyncio.sleep(0.5)
            return True

    try:
        assert not asyncio.run(session())
    finally:
        carol.close()
