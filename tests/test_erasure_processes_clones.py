"""Erased text leaves running processes in every clone: an erasure that reaches a teammate's
clone by `sync --replay` ends there as forget's does, so a server running on that clone
re-executes and holds no copy of the erased text, and prove-gone there names it until then."""
import asyncio
import json
import time
from types import SimpleNamespace

from conftest import T0, TEAMS, git, run_cli, shared_remote
from test_erasure_processes import memory_holds, server_pids

from mdmem import MemoryRepo

SECRET = "Dana keeps the vault key under quokkabanana plinth"
NOTE = "team/payments/service/vault/fact/key.place.md"


def test_a_server_on_a_teammates_clone_holds_no_erased_text_once_sync_replays_the_erasure(tmp_path):
    from mcp.client import Client
    from test_mcp import data, params

    root = tmp_path / "m"
    with MemoryRepo.init(root, teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember(SECRET, as_user="dana", kind="fact", subject="service:vault", key="key.place", scope="team",
                      team="payments", now=T0)
        repo.remember("Billing deploys any weekday before 3pm", as_user="dana", kind="fact",
                      subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
    remote = shared_remote(root, tmp_path, "dana")
    clone = tmp_path / "bob"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert run_cli("sync", "--repo", str(clone), "--as", "bob").returncode == 0

    async def session():
        async with Client(params(SimpleNamespace(root=clone), "bob", "read"), read_timeout_seconds=60) as client:
            for _ in range(240):
                if data(await client.call_tool("recall", {"query": "where is the vault key"})).get("index") != "building":
                    break
                await asyncio.sleep(0.5)
            [pid] = server_pids(clone)
            assert memory_holds(pid, b"quokkabanana")
            erase = run_cli("forget", "--path", NOTE, "--push", "--repo", str(root), "--as", "dana")
            assert erase.returncode in (0, 11), erase.stderr
            replay = run_cli("sync", "--replay", "--repo", str(clone), "--as", "bob")
            assert replay.returncode == 0, replay.stderr
            assert "quokkabanana" not in git(clone, "log", "--all", "-p").stdout
            proof = json.loads(run_cli("prove-gone", "--needle", "quokkabanana", "--repo", str(clone), "--as", "bob",
                                       "--json").stdout)
            deadline = time.monotonic() + 10  # the server looks once a second
            while time.monotonic() < deadline:
                await client.call_tool("recall", {"query": "deploy window"})
                live = [p for p in server_pids(clone)]
                if not any(memory_holds(p, b"quokkabanana") for p in live):
                    return False, proof
                await asyncio.sleep(0.5)
            return True, proof

    holds, proof = asyncio.run(session())
    assert not holds or any("serve" in line for line in proof["cannot_reach"]), proof
    assert not holds
