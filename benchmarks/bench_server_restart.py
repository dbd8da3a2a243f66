"""A running MCP server restarting in place after an erasure (mcp/reexec.py), as its client sees
it: `mdmem serve` on stdio (the relay between the client's pipes and the SDK) and `serve --http`,
each through the official MCP SDK client, one client calling `get` in a loop while `mdmem forget`
runs beside it.

Reports per transport: a call's latency before the erasure (p50/p95: on stdio it includes the
relay), the calls made across the erasure and the restart, how many failed (must be 0), the
longest call (the restart gap a client waits through) and the time from the end of `forget` to
the first answer of the fresh process.

Usage: bench_server_restart.py [--notes 1000] [--calls 200] [--json]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _common import bulk_notes, console, pct, table  # noqa: E402

SECRET_PATH = "team/payments/service/vault/fact/key.place.md"
GET = {"subject": "service:billing", "kind": "fact", "key": "deploy.window"}


def make_repo(root: Path, notes: int) -> None:
    from mdmem import MemoryRepo

    with MemoryRepo.init(root, teams={"payments": ["dana"]}, erasers=["dana"], as_user="dana") as repo:
        bulk_notes(repo, notes, owner="dana")
        repo.remember("Dana keeps the vault key under the plinth", as_user="dana", kind="fact",
                      subject="service:vault", key="key.place", scope="team", team="payments")
        repo.remember("Billing deploys any weekday before 3pm", as_user="dana", kind="fact",
                      subject="service:billing", key="deploy.window", scope="team", team="payments")


def reexecuted(pid: int) -> bool:
    try:
        return b"MDMEM_SERVE_HANDOVER=" in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def pid_serving(root: Path, http: bool) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and str(root).encode() in cmd and (b"--http" in cmd) == http:
                return int(proc.name)
    raise SystemExit(f"no server process for {root}")


def forget(root: Path) -> float:
    import subprocess

    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    done = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "forget", "--path", SECRET_PATH, "--repo",
                           str(root), "--as", "dana"], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"forget failed: {done.stderr}")
    return time.monotonic()


async def measure(client, root: Path, pid: int, calls: int) -> dict:
    before = []
    for _ in range(calls):
        t = time.monotonic()
        got = await client.call_tool("get", GET)
        before.append((time.monotonic() - t) * 1000)
        assert not got.is_error, got
    ended: list[float] = []
    eraser = threading.Thread(target=lambda: ended.append(forget(root)))
    eraser.start()
    across, failed, first_fresh = [], 0, None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        t = time.monotonic()
        try:
            got = await client.call_tool("get", GET)
            failed += got.is_error
        except Exception:  # noqa: BLE001 -- counted: must be none
            failed += 1
        now = time.monotonic()
        across.append((now - t) * 1000)
        if ended and reexecuted(pid) and first_fresh is None:
            first_fresh = now - ended[0]
        if first_fresh is not None and len(across) > 20:
            break
    eraser.join()
    return {"p50_ms": round(pct(before, 50), 2), "p95_ms": round(pct(before, 95), 2), "calls_across": len(across),
            "failed": failed, "longest_ms": round(max(across), 1),
            "forget_to_fresh_s": round(first_fresh, 2) if first_fresh is not None else None}


async def stdio(root: Path, calls: int) -> dict:
    from mcp import StdioServerParameters
    from mcp.client import Client

    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    server = StdioServerParameters(command=sys.executable, args=["-m", "mdmem.cli.main", "serve", "--repo", str(root),
                                                                 "--as", "dana", "--allow", "read"], env=env)
    async with Client(server, read_timeout_seconds=120, mode="legacy") as client:
        return await measure(client, root, pid_serving(root, False), calls)


async def http(root: Path, calls: int) -> dict:
    import httpx2
    from http_server import running
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from mdmem.auth.static_tokens import TokenFile

    tokens = TokenFile(root.parent / "tokens.json")
    token = tokens.add("dana", "bench", frozenset({"read"}))[1]
    with running(root, tokens.path) as server:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as web:
            async with Client(streamable_http_client(server.url, http_client=web), mode="legacy") as client:
                return await measure(client, root, pid_serving(root, True), calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, run in (("stdio", stdio), ("http", http)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "mem"
            make_repo(root, args.notes)
            if not args.json:
                console.print(f"{name}: {args.notes} notes, {args.calls} calls before the erasure...")
            r = asyncio.run(run(root, args.calls))
            rows.append([name, r["p50_ms"], r["p95_ms"], r["calls_across"], r["failed"], r["longest_ms"],
                         r["forget_to_fresh_s"]])
    table(f"server restart after an erasure ({args.notes} notes; load {os.getloadavg()[0]:.1f})",
          ["transport", "get p50 ms", "get p95 ms", "calls across", "failed", "longest call ms",
           "forget end -> fresh answer s"], rows, as_json=args.json)


if __name__ == "__main__":
    main()
