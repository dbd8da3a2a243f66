"""Helpers for the HTTP server's tests and benchmark: start `mdmem serve --http` as a real
process on a loopback port, and call it through the MCP SDK's own Streamable HTTP client."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


class ServerProcess:
    def __init__(self, proc: subprocess.Popen, url: str, lines: list[str]):
        self.proc = proc
        self.url = url
        self.lines = lines  # what it wrote on stderr (drained by a thread)

    @property
    def base(self) -> str:
        return self.url.rsplit("/mcp", 1)[0]

    def log(self) -> str:
        return "".join(self.lines)

    def says(self, text: str, seconds: float = 10) -> bool:
        """Whether ``text`` reaches the server's log within ``seconds`` (a thread drains its
        stderr: a line written as a request is answered may be read a moment after)."""
        deadline = time.monotonic() + seconds
        while text not in self.log():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


def start_server(repo_root, tokens, *extra: str, env: dict | None = None, timeout: float = 60) -> ServerProcess:
    full_env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1", **(env or {})}
    full_env.pop("MDMEM_USER", None)
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--http", "127.0.0.1:0",
                             "--repo", str(repo_root), "--tokens", str(tokens), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=full_env)
    lines: list[str] = []
    got_url = threading.Event()
    url: list[str] = []

    def drain() -> None:
        for line in proc.stderr:
            lines.append(line)
            if not url and line.startswith("mdmem: serving "):
                url.append(line.split()[2])
                got_url.set()
        got_url.set()

    threading.Thread(target=drain, daemon=True).start()
    if not got_url.wait(timeout) or not url:
        proc.kill()
        raise AssertionError(f"the server did not start: {''.join(lines)}")
    server = ServerProcess(proc, url[0], lines)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the socket listens before uvicorn serves: wait for an answer
        try:
            if httpx2.get(server.base + "/healthz", timeout=2).status_code == 200:
                return server
        except httpx2.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the server never answered /healthz: {server.log()}")


@contextmanager
def running(repo_root, tokens, *extra: str, **kw):
    server = start_server(repo_root, tokens, *extra, **kw)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.terminate()
            try:
                server.proc.wait(30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()


def data(result):
    """A tool result's JSON answer (structured content or the text), or its error text."""
    if result.is_error:
        return result.content[0].text
    if result.structured_content is not None:
        out = result.structured_content
        return out.get("result", out) if isinstance(out, dict) else out
    text = result.content[0].text
    try:
        return json.loads(text)
    except ValueError:
        return text


async def session_calls(url: str, token: str, calls, *, list_tools: bool = False, mode: str = "auto"):
    """Call the tools in order through one SDK client carrying ``token``; the results (and the
    tool names offered first when ``list_tools``). ``mode="legacy"``: the initialize handshake of
    the 2025 protocol versions, as most agents speak today."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            out = []
            if list_tools:
                out.append(sorted(t.name for t in (await client.list_tools()).tools))
            for name, args in calls:
                out.append(await client.call_tool(name, args))
            return out


async def writers_cut_off(server: ServerProcess, token: str, sig: int, *, after: int, label: str,
                          acknowledged: list, failures: list | None = None, writers: int = 6) -> None:
    """``writers`` clients remembering episodes one after another through the SDK's client; once
    ``after`` writes are acknowledged the server gets ``sig``. Each acknowledged answer is
    appended to ``acknowledged``, the error that ended each writer (its type's name) to ``failures``."""
    import asyncio

    async def writer(i: int) -> None:
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    for j in range(200):
                        result = await client.call_tool("remember", {
                            "text": f"{label} note {i}-{j}", "kind": "episode", "subject": "task:load",
                            "key": f"{label.replace(' ', '-')}-{i}-{j}"})
                        if not result.is_error:
                            acknowledged.append(data(result))
        except Exception as exc:  # noqa: BLE001 -- the server going away ends the writer
            if failures is not None:
                failures.append(type(exc).__name__)

    tasks = [asyncio.create_task(writer(i)) for i in range(writers)]
    while len(acknowledged) < after:
        await asyncio.sleep(0.01)
    server.proc.send_signal(sig)
    await asyncio.gather(*tasks)


def malloc_tuned_in_a_fresh_process(**env: str) -> dict:
    """What mcp/heap.tune_malloc sets in a fresh process whose environment adds ``env`` to ours
    (without the operator's malloc settings); skips where the C library is not glibc."""
    import pytest

    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    if not libc.startswith("glibc"):
        pytest.skip("not glibc")
    base = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_",
                                                               "GLIBC_TUNABLES")}
    code = "import json, os; from mdmem.mcp.heap import tune_malloc; print(json.dumps(tune_malloc(os.environ)))"
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                     env={**base, **env}).stdout)
