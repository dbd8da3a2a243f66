"""Erased text leaves running processes: a running MCP server (stdio or HTTP) re-executes
itself in place once an erasure ends -- same pid, its client's session or listening socket going
on, calls in flight answered -- so no copy of the erased text stays in its memory; prove-gone
names the running mdmem processes it cannot vouch for, and not a server re-executed since."""
import asyncio
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import T0, TEAMS, run_cli

from mdmem import MemoryRepo

SECRET = "Dana keeps the vault key under quokkabanana plinth"


def server_pids(root: Path) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and str(root).encode() in cmd:
                out.append(int(proc.name))
    return out


def memory_holds(pid: int, needle: bytes) -> bool:
    """Every readable, writable mapping of the process (its heap, arenas, anonymous maps)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not m or not m.group(3).startswith("rw"):
                continue
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    found = True
            except (OSError, ValueError, OverflowError):
                continue
    return found


@pytest.fixture
def repo(tmp_path):
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as made:
        made.remember(SECRET, as_user="dana", kind="fact", subject="service:vault", key="key.place", scope="team",
                      team="payments", now=T0)
        made.remember("Billing deploys any weekday before 3pm", as_user="dana", kind="fact",
                      subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
        yield made


def held_index_files(pid: int, root: Path) -> list[str]:
    """Files under the repository's git folder the process still maps or keeps open, deleted
    ones included (a deleted search-index segment holds the erased words on disk and in memory
    for as long as any process keeps it)."""
    git = str(root / ".git")
    mapped = [line.split(None, 5)[-1].strip() for line in open(f"/proc/{pid}/maps") if git in line]
    opened = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if git in target:
            opened.append(target)
    return [f for f in mapped + opened if f.endswith("(deleted)")]


def test_a_running_mcp_server_lets_go_of_the_erased_index_after_an_erasure(repo):
    """The server had recalled the note: its searcher maps the index segment holding the note's
    words. The erasure deletes that segment; a server that keeps it mapped keeps the words on
    disk (the file's blocks are freed only when the last holder lets go) and in its memory."""
    from mcp.client import Client
    from test_mcp import data, params

    root = repo.root
    repo.close()

    async def session():
        async with Client(params(repo, "dana", "read"), read_timeout_seconds=60) as client:
            for _ in range(240):
                first = data(await client.call_tool("recall", {"query": "where is the vault key"}))
                if first.get("index") != "building":
                    break
                await asyncio.sleep(0.5)
            [pid] = server_pids(root)
            assert memory_holds(pid, b"quokkabanana")  # the scan sees what the server holds
            erase = run_cli("forget", "--path", "team/payments/service/vault/fact/key.place.md", "--repo", str(root),
                            "--as", "dana")
            assert erase.returncode == 0, erase.stderr
            deadline = time.monotonic() + 10  # no call needed: the server looks once a second
            while held_index_files(pid, root) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            held = held_index_files(pid, root)
            after = await client.call_tool("recall", {"query": "deploy window vault key"})
            return first, held, after

    first, held, after = asyncio.run(session())
    assert "quokkabanana" in str(first)
    assert held == []
    assert not after.is_error and "Billing deploys" in str(data(after)) and "quokkabanana" not in str(data(after))


def test_prove_gone_names_running_mdmem_processes_it_cannot_vouch_for(repo):
    import subprocess
    import sys

    root = repo.root
    repo.close()
    env = {**os.environ, "MDMEM_EMBEDDER": "none"}
    env.pop("MDMEM_USER", None)
    server = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--repo", str(root), "--as", "dana"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 20
        while not server_pids(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        out = run_cli("prove-gone", "--needle", "quokkabanana", "--repo", str(root), "--as", "dana", "--json")
        import json
        report = json.loads(out.stdout)
        assert any(f"pid {server.pid}" in line and "serve" in line for line in report["cannot_reach"]), \
            report["cannot_reach"]
    finally:
        server.kill()
        server.wait()


def http_pids(root: Path) -> list[int]:
    return [pid for pid in server_pids(root) if b"--http" in Path(f"/proc/{pid}/cmdline").read_bytes()]


@contextmanager
def http_server_that_recalled_the_key(repo):
    """An HTTP server on ``repo`` (closed here) whose index is built and that has answered a
    recall holding the vault key's text: (server, dana's read token, its pid)."""
    from http_server import data, running, session_calls

    from mdmem.auth.static_tokens import TokenFile

    root = repo.root
    repo.close()
    tokens = TokenFile(root.parent / "tokens.json")
    token = tokens.add("dana", "dana-bot", frozenset({"read"}))[1]
    with running(root, tokens.path) as server:
        for _ in range(240):
            [first] = asyncio.run(session_calls(server.url, token, [("recall", {"query": "where is the vault key"})]))
            if data(first).get("index") != "building":
                break
            time.sleep(0.5)
        assert "quokkabanana" in str(data(first))
        [pid] = http_pids(root)
        yield server, token, pid


def test_a_running_http_server_lets_go_of_the_erased_index_after_an_erasure(repo):
    """The same over HTTP: the mechanism is the server code both transports share."""
    from http_server import data, session_calls

    root = repo.root
    with http_server_that_recalled_the_key(repo) as (server, token, pid):
        erase = run_cli("forget", "--path", "team/payments/service/vault/fact/key.place.md", "--repo", str(root),
                        "--as", "dana")
        assert erase.returncode == 0, erase.stderr
        deadline = time.monotonic() + 10  # no call needed: the server looks once a second
        while held_index_files(pid, root) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert held_index_files(pid, root) == []
        [after] = asyncio.run(session_calls(server.url, token, [("recall", {"query": "deploy window vault key"})]))
        assert "Billing deploys" in str(data(after)) and "quokkabanana" not in str(data(after))


def test_prove_gone_run_from_the_repository_names_no_process_of_another_repository(repo, tmp_path):
    import json
    import subprocess
    import sys

    root = repo.root
    repo.close()
    other = tmp_path / "other"
    MemoryRepo.init(other, teams=TEAMS, erasers=["dana"], now=T0, as_user="dana").close()
    env = {**os.environ, "MDMEM_EMBEDDER": "none"}
    env.pop("MDMEM_USER", None)
    # Started from outside both repositories, naming the other one: nothing ties it to ``root``,
    # though its command line holds relative words ("serve", "--as") that resolve anywhere.
    server = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--repo", str(other), "--as", "dana"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                              cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while not server_pids(other) and time.monotonic() < deadline:
            time.sleep(0.1)
        out = run_cli("prove-gone", "--needle", "quokkabanana", "--as", "dana", "--json", cwd=str(root))
        report = json.loads(out.stdout)
        assert not any(f"pid {server.pid} " in line for line in report["cannot_reach"]), report["cannot_reach"]
    finally:
        server.kill()
        server.wait()


def test_a_running_mcp_server_holds_no_copy_of_erased_text_once_an_erasure_ends(repo):
    from mcp.client import Client
    from test_mcp import data, params

    root = repo.root
    repo.close()

    async def session():
        async with Client(params(repo, "dana", "read"), read_timeout_seconds=60) as client:
            for _ in range(240):
                if data(await client.call_tool("recall", {"query": "where is the vault key"})).get("index") != "building":
                    break
                await asyncio.sleep(0.5)
            [pid] = server_pids(root)
            assert memory_holds(pid, b"quokkabanana")
            erase = run_cli("forget", "--path", "team/payments/service/vault/fact/key.place.md", "--repo", str(root),
                            "--as", "dana")
            assert erase.returncode == 0, erase.stderr
            await client.call_tool("recall", {"query": "deploy window"})  # the server has seen the erasure
            live = [p for p in server_pids(root) if Path(f"/proc/{p}").exists()]
            return any(memory_holds(p, b"quokkabanana") for p in live)

    assert not asyncio.run(session())


def reexecuted(pid: int) -> bool:
    """The process replaced itself (mcp/reexec.py): the environment it was executed with
    carries what the old process handed over."""
    return b"MDMEM_SERVE_HANDOVER=" in Path(f"/proc/{pid}/environ").read_bytes()


def test_a_running_mcp_server_answers_every_call_of_its_session_across_its_restart(repo):
    """Calls sent all through an erasure and the restart after it (answered by the old process,
    read by it but not passed on, or still in the pipe) are each answered, without an error, by
    the same process id; the session needs no new handshake: the 2025 protocols' initialize
    (``legacy``, as most agents speak today) is replayed to the fresh process (the 2026 ones
    carry it in every request: the tests above, in the client's default mode, call across the
    restart too)."""
    from mcp.client import Client
    from test_mcp import data, params

    root = repo.root
    repo.close()
    get = {"subject": "service:billing", "kind": "fact", "key": "deploy.window"}

    async def session():
        async with Client(params(repo, "dana", "read"), read_timeout_seconds=60, mode="legacy") as client:
            [pid] = server_pids(root)
            assert not reexecuted(pid)
            erasing = asyncio.ensure_future(asyncio.to_thread(
                run_cli, "forget", "--path", "team/payments/service/vault/fact/key.place.md", "--repo", str(root),
                "--as", "dana"))
            answers, after = [], 0
            deadline = time.monotonic() + 60
            while after < 3 and time.monotonic() < deadline:  # a few rounds answered by the fresh process
                answers += await asyncio.gather(*[client.call_tool("get", get) for _ in range(4)])
                after += erasing.done() and reexecuted(pid)
            erase = await erasing
            later = await client.call_tool("recall", {"query": "deploy window"})
            proof = await asyncio.to_thread(run_cli, "prove-gone", "--needle", "quokkabanana", "--repo", str(root),
                                            "--as", "dana", "--json")
            return erase, reexecuted(pid), server_pids(root) == [pid], answers, later, pid, proof

    erase, replaced, same_pid, answers, later, pid, proof = asyncio.run(session())
    assert erase.returncode == 0, erase.stderr
    assert replaced and same_pid
    # Its memory image began after the erasure ended: prove-gone does not name it.
    import json
    report = json.loads(proof.stdout)
    assert report["verdict"] == "PASS" and not any(f"pid {pid} " in line for line in report["cannot_reach"]), report
    assert all(not a.is_error and "Billing deploys" in str(data(a)) for a in answers), answers
    assert not later.is_error and "quokkabanana" not in str(data(later))


def test_a_running_http_server_holds_no_copy_of_erased_text_once_an_erasure_ends(repo):
    """The same over HTTP: the server finishes the calls in flight, re-executes itself on the
    same listening socket, and clients calling meanwhile are answered (none refused)."""
    import threading

    from http_server import data, session_calls

    root = repo.root
    with http_server_that_recalled_the_key(repo) as (server, token, pid):
        assert memory_holds(pid, b"quokkabanana")
        failures: list[str] = []
        answered: list[object] = []
        done = threading.Event()

        def keep_calling() -> None:
            while not done.is_set():
                try:
                    [got] = asyncio.run(session_calls(server.url, token, [("get", {
                        "subject": "service:billing", "kind": "fact", "key": "deploy.window"})]))
                    answered.append(data(got))
                except Exception as exc:  # noqa: BLE001 -- every failure is the finding
                    failures.append(repr(exc))

        caller = threading.Thread(target=keep_calling)
        caller.start()
        try:
            erase = run_cli("forget", "--path", "team/payments/service/vault/fact/key.place.md", "--repo",
                            str(root), "--as", "dana")
            assert erase.returncode == 0, erase.stderr
            deadline = time.monotonic() + 30
            while not reexecuted(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert reexecuted(pid), server.log()
            count = len(answered)
            while len(answered) < count + 3 and time.monotonic() < deadline:  # answered by the fresh process
                time.sleep(0.1)
        finally:
            done.set()
            caller.join(60)
        assert failures == []
        assert answered and all("Billing deploys" in str(a) for a in answered), answered[-3:]
        assert http_pids(root) == [pid]
        assert not memory_holds(pid, b"quokkabanana")
        [after] = asyncio.run(session_calls(server.url, token, [("recall", {"query": "deploy window vault key"})]))
        assert "Billing deploys" in str(data(after)) and "quokkabanana" not in str(data(after))


def test_requests_a_restarting_stdio_server_read_but_did_not_pass_on_are_answered_by_the_fresh_process(repo):
    """Raw JSON-RPC on the server's pipes: the handshake, then an erasure's end, then three calls
    and half of a fourth in one write, the rest of the fourth later. Each is answered once, by
    id, by the same process id re-executed."""
    import json
    import subprocess
    import sys

    from mdmem.erasure.journal import Journal

    root = repo.root
    repo.close()
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    server = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--repo", str(root), "--as", "dana",
                               "--allow", "read"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)

    def send(data: bytes) -> None:
        server.stdin.write(data)
        server.stdin.flush()

    def answer() -> dict:
        line = server.stdout.readline()
        assert line, "the server closed its output"
        return json.loads(line)

    def call(n: int) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "get", "arguments": {"subject": "service:billing", "kind": "fact", "key": "deploy.window"}}}).encode()

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
                        ).encode() + b"\n")
        assert answer()["id"] == 0
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        assert not reexecuted(server.pid)
        Journal(root).finished()  # what the end of an erasure does: its done stamp moves
        fourth = call(4)
        send(call(1) + b"\n" + call(2) + b"\n" + call(3) + b"\n" + fourth[:20])
        send(fourth[20:] + b"\n")
        answers = [answer() for _ in range(4)]
        assert reexecuted(server.pid)
    finally:
        server.stdin.close()
        server.wait(60)
    assert sorted(a["id"] for a in answers) == [1, 2, 3, 4], answers
    assert all("Billing deploys" in json.dumps(a["result"]) and not a["result"].get("isError") for a in answers)
