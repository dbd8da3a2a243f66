"""`mdmem serve --http` against hostile clients (a real server process, the MCP SDK's client,
raw sockets where the point is a client that is not the SDK): event streams and half-sent
requests that would hold connections, one token's share of them, kill -9 under concurrent
writes, JSON bombs and batches, header and path tricks, an erasure and a config change while
it runs, and the README's token command on a machine without ~/.config."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx2
import pytest
from conftest import PEOPLE, T0, TEAMS
from http_server import data, running, session_calls, start_server, writers_cut_off

from mdmem import MemoryRepo
from mdmem.auth.static_tokens import TokenFile

SECRET_TEXT = "Alice's locker combination is 7319-plum"
ENV = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attacks")
    repo = MemoryRepo.init(tmp / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE, erasers=["dana"])
    repo.remember(SECRET_TEXT, as_user="alice", kind="fact", subject="user:alice", key="locker", source="user")
    repo.remember("Payments deploy on weekdays before 3pm", as_user="alice", kind="fact", subject="service:web",
                  key="deploy.window", scope="team", team="payments", source="user")
    repo.close()
    tokens = TokenFile(tmp / "tokens.json")
    t = {}
    for name, person, agent, caps in [("alice_rw", "alice", "alice-bot", {"read", "write"}),
                                      ("bob_rw", "bob", "bob-bot", {"read", "write"}),
                                      ("bob_ro", "bob", "bob-reader", {"read"}),
                                      ("carol_all", "carol", "carol-bot", {"read", "write", "delete"})]:
        t[name] = tokens.add(person, agent, frozenset(caps))[1]
    return {"repo": repo, "root": repo.root, "tokens": tokens, "t": t, "tmp": tmp}


def call(url, token, calls, **kw):
    return asyncio.run(session_calls(url, token, calls, **kw))


def headers(token=None):
    return {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
            "MCP-Protocol-Version": "2026-07-28", **({"Authorization": f"Bearer {token}"} if token else {})}


def port_of(server) -> int:
    return int(server.base.rsplit(":", 1)[1])


def raw_head(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send ``request`` on a fresh connection; the first bytes of the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(request)
        return sock.recv(200)
    finally:
        sock.close()


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout


# --- defects ------------------------------------------------------------------------------

def test_token_add_with_the_default_token_file_works_on_a_machine_without_a_config_folder(world, tmp_path):
    """README, "A team server over HTTP", literally: `mdmem token add --person bob --agent ci-bot
    --allow read,write --repo ~/memory` on a machine where ~/.config does not exist yet. It exited 5
    with "something keeps replacing this lock file or its folder": the lock beside the default
    token file is taken before its folder (~/.config/mdmem) is made."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**ENV, "HOME": str(home)}
    env.pop("MDMEM_CONFIG", None)
    env.pop("XDG_CONFIG_HOME", None)
    added = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "token", "add", "--person", "bob", "--agent",
                            "ci-bot", "--allow", "read,write", "--repo", str(world["root"])],
                           capture_output=True, text=True, env=env)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("mdmem_")
    assert (home / ".config" / "mdmem" / "server-tokens.json").exists()


def test_event_streams_held_open_by_one_token_do_not_lock_the_other_clients_out(world):
    """`GET /mcp` with a valid token opens an SSE stream that the server keeps open for ever (a
    ping every 15 s; no clock, no cap per token). One read-only token opening ~512 of them fills
    the connection limit and every other client is answered 503 for as long as it likes (with
    the default --rate 20 it takes the attacker ~25 s; --burst here only makes the test quick).
    The promise: one slow or stalled client never blocks the others."""
    t = world["t"]
    with running(world["root"], world["tokens"].path, "--burst", "1000", "--body-timeout", "2") as server:
        port = port_of(server)
        streams: list[socket.socket] = []
        try:
            deadline = time.monotonic() + 25
            while len(streams) < 515 and time.monotonic() < deadline:
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall((f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {t['bob_ro']}\r\n"
                           "Accept: text/event-stream\r\n\r\n").encode())
                s.settimeout(10)
                head = s.recv(20)
                if head.startswith(b"HTTP/1.1 200"):
                    streams.append(s)
                else:
                    s.close()
                    if len(streams) >= 500:
                        break  # the server is full
            time.sleep(3)  # past the --body-timeout clock: a stalled client would have been let go by now
            assert "recall" in call(server.url, t["alice_rw"], [], list_tools=True)[0], len(streams)
        finally:
            for s in streams:
                s.close()


def test_no_event_stream_is_opened_so_none_outlives_a_revocation(world, tmp_path):
    """A revocation is honoured at the token's next request; an SSE stream (`GET /mcp`) opened
    before it stayed open for ever (pings every 15 s), so the operator who revoked the token of
    a client filling the connection limit got nothing back until a restart. This stateless
    server sends no messages of its own: GET is answered 405 and the connection closed."""
    tokens = TokenFile(tmp_path / "tokens.json")
    entry, secret = tokens.add("bob", "streamer", frozenset({"read"}))
    with running(world["root"], tokens.path) as server:
        port = port_of(server)
        stream = socket.create_connection(("127.0.0.1", port))
        try:
            stream.sendall((f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {secret}\r\n"
                            "Accept: text/event-stream\r\n\r\n").encode())
            stream.settimeout(10)
            answer = b""
            while chunk := stream.recv(4096):  # to the end: the server closes the connection
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 405"), answer[:100]
            assert b"allow: POST" in answer.lower().replace(b"allow: post", b"allow: POST")
            TokenFile(tmp_path / "tokens.json").revoke(entry.id)
            assert httpx2.post(server.url, headers=headers(secret), content=json.dumps(LIST)).status_code == 401
        finally:
            stream.close()


def test_one_tokens_requests_in_flight_are_capped_and_the_others_served(world):
    """Each request holds a connection while its body arrives (up to --body-timeout) and while
    its answer is read: a token sending many half bodies at once could hold hundreds of the
    server's connections within its rate. Past --in-flight the token is answered 429 at once,
    and another token is served meanwhile."""
    t = world["t"]
    with running(world["root"], world["tokens"].path, "--burst", "1000", "--in-flight", "4",
                 "--body-timeout", "30") as server:
        port = port_of(server)
        held: list[socket.socket] = []
        try:
            for _ in range(4):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {t['bob_ro']}\r\n"
                           "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                           "Content-Length: 100\r\n\r\n{\"jsonrpc\"").encode())  # and no more of the body
                held.append(s)
            time.sleep(1)  # the four are being read
            refused = httpx2.post(server.url, headers=headers(t["bob_ro"]), content=json.dumps(LIST), timeout=10)
            assert refused.status_code == 429 and refused.json()["error"]["data"]["kind"] == "too_many_in_flight", refused.text
            assert "recall" in call(server.url, t["alice_rw"], [], list_tools=True)[0]
        finally:
            for s in held:
                s.close()
        time.sleep(1)  # the held requests end as their clients go: the token is served again
        assert "recall" in call(server.url, t["bob_ro"], [], list_tools=True)[0]


# --- attacks the server withstood ---------------------------------------------------------

def test_kill_9_under_concurrent_writes_loses_no_acknowledged_write_and_a_restart_picks_up(world, tmp_path):
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.close()
    token = world["t"]["carol_all"]
    server = start_server(repo.root, world["tokens"].path, "--rate", "0")
    acknowledged: list[dict] = []

    try:
        asyncio.run(writers_cut_off(server, token, signal.SIGKILL, after=15, label="kill nine",
                                    acknowledged=acknowledged))
    finally:
        server.proc.kill()
        server.proc.wait()
    log = git(repo.root, "log", "--format=%H", "main").split()
    tree = git(repo.root, "ls-tree", "-r", "--name-only", "main").split()
    assert [a["path"] for a in acknowledged if a["commit"] not in log or a["path"] not in tree] == []
    with running(repo.root, world["tokens"].path, "--rate", "0") as again:
        got = call(again.url, token, [("get", {"path": a["path"]}) for a in acknowledged]
                   + [("remember", {"text": "after the restart", "kind": "episode", "subject": "task:load",
                                    "key": "after"})])
        assert not any(g.is_error for g in got)
        assert data(got[-1])["status"] == "committed"
    assert git(repo.root, "status", "--porcelain") == ""


def test_json_bombs_and_batches_are_refused_and_the_server_stays_up(world):
    t = world["t"]
    with running(world["root"], world["tokens"].path, "--rate", "0") as server:
        for body in ["[" * 200_000, '{"a":' * 100_000 + "1" + "}" * 100_000]:
            answer = httpx2.post(server.url, headers=headers(t["bob_ro"]), content=body, timeout=20)
            assert answer.status_code == 400 and "Parse error" in answer.text
        batch = [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
                  "params": {"name": "recall", "arguments": {"query": "deploy"}}} for i in range(50)]
        answer = httpx2.post(server.url, headers=headers(t["bob_ro"]), content=json.dumps(batch), timeout=20)
        assert answer.status_code == 400  # no 50 calls for one request's rate
        assert httpx2.get(server.base + "/healthz").status_code == 200
        assert server.proc.poll() is None


def test_authorization_header_tricks_and_tokens_in_the_query_are_refused(world):
    t = world["t"]
    with running(world["root"], world["tokens"].path, "--rate", "0") as server:
        port = port_of(server)
        body = json.dumps(LIST)

        def request(auth_lines: str, target: str = "/mcp", host: str | None = None, extra: str = "") -> bytes:
            return raw_head(port, (f"POST {target} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
                                   "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                                   f"Content-Length: {len(body)}\r\n{auth_lines}{extra}\r\n{body}").encode("latin-1"))

        good = t["bob_ro"]
        assert request(f"Authorization: Bearer {good}\r\n").startswith(b"HTTP/1.1 200")
        refused = {
            "a bad token first, a good one second": f"Authorization: Bearer nope\r\nAuthorization: Bearer {good}\r\n",
            "Basic scheme": f"Authorization: Basic {good}\r\n",
            "unicode in the secret": f"Authorization: Bearer {good[:-2]}\u00e9\u00e9\r\n",
            "truncated": f"Authorization: Bearer {good[:30]}\r\n",
            "huge static-looking": f"Authorization: Bearer mdmem_{'a' * 12}_{'b' * 15000}\r\n",
            "huge": f"Authorization: Bearer {'a' * 60000}\r\n",
            "no token": "",
        }
        for why, auth in refused.items():
            answer = request(auth)
            assert answer[:12] in (b"HTTP/1.1 401", b"HTTP/1.1 431", b"HTTP/1.1 400"), (why, answer)
        assert request("", target=f"/mcp?access_token={good}").startswith(b"HTTP/1.1 401")
        # DNS rebinding: a page elsewhere cannot use a browser's reach of the loopback.
        assert request(f"Authorization: Bearer {good}\r\n", host="evil.example").startswith(b"HTTP/1.1 421")
        assert request(f"Authorization: Bearer {good}\r\n",
                       extra="Origin: http://evil.example\r\n").startswith(b"HTTP/1.1 403")
        assert httpx2.get(server.base + "/healthz").status_code == 200
        assert good not in server.log()


def test_tool_arguments_cannot_reach_another_persons_notes_by_path_tricks(world):
    t = world["t"]
    with running(world["root"], world["tokens"].path, "--rate", "0") as server:
        out = call(server.url, t["bob_rw"], [
            ("get", {"path": "team/payments/../../private/alice/user/alice/fact/locker.md"}),
            ("get", {"path": "/etc/passwd"}),
            ("history", {"path": "private/alice/user/alice/fact/locker.md"}),
            ("recall", {"query": "locker combination", "subject": "user:alice", "kinds": ["fact"],
                        "key": "locker"}),
            ("remember", {"text": SECRET_TEXT, "kind": "fact", "subject": "user:alice", "key": "locker"}),
            ("remember", {"text": "x", "kind": "fact", "subject": "user:alice", "key": "k", "scope": "team",
                          "team": "search"}),
        ])
        for result in out:
            assert "7319" not in json.dumps(data(result))
        assert out[0].is_error and out[1].is_error and out[2].is_error
        assert data(out[3])["hits"] == []
        # bob's copy goes to bob's own memory; a team he is not in refuses him.
        assert data(out[4])["path"].startswith("private/bob/")
        assert data(out[5])["status"] == "refused" and "not a member of team search" in data(out[5])["reason"]


def test_a_text_erasure_while_the_server_runs_leaves_no_hit_for_the_erased_words(world, tmp_path):
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE,
                           erasers=["dana"])
    repo.remember("The payments vault door code is 5521-quokka, ask dana", as_user="dana", kind="fact",
                  subject="service:vault", key="door", scope="team", team="payments", source="user")
    repo.close()
    t = world["t"]
    with running(repo.root, world["tokens"].path, "--rate", "0") as server:
        probes = [("recall", {"query": "quokka 5521", "k": 50}),
                  ("recall", {"query": "quokka 5521", "include_history": True, "k": 50}),
                  ("history", {"subject": "service:vault", "kind": "fact", "key": "door"})]
        before = call(server.url, t["bob_rw"], probes)
        assert data(before[0])["hits"]
        erased = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "forget", "--repo", str(repo.root), "--as",
                                 "dana", "--text", "vault door code is 5521-quokka", "--force"],
                                capture_output=True, text=True, env=ENV)
        assert erased.returncode == 0, erased.stderr
        after = call(server.url, t["bob_rw"], probes)
        assert data(after[0])["hits"] == [] and data(after[1])["hits"] == []
        assert all("quokka" not in json.dumps(data(r)) for r in after)


def test_a_person_taken_out_of_mdmem_toml_is_refused_at_the_next_call_without_the_names_declared(world, tmp_path):
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.remember("Payments deploy on weekdays before 3pm", as_user="alice", kind="fact", subject="service:web",
                  key="deploy.window", scope="team", team="payments", source="user")
    repo.close()
    t = world["t"]
    with running(repo.root, world["tokens"].path, "--rate", "0") as server:
        probe = [("get", {"subject": "service:web", "kind": "fact", "key": "deploy.window"})]
        assert not call(server.url, t["bob_rw"], probe)[0].is_error
        toml = repo.root / "mdmem.toml"
        toml.write_text(toml.read_text().replace('payments = ["alice", "bob", "dana"]', 'payments = ["alice", "dana"]'))
        subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=mdmem", "-c", "user.email=mdmem@mdmem.invalid",
                        "commit", "-qam", "bob leaves payments"], check=True, capture_output=True)
        got = call(server.url, t["bob_rw"], probe)[0]
        assert got.is_error and "weekdays" not in data(got)
        # Refused without the names mdmem.toml declares: he has lost access, not mistyped --as.
        said = got.content[0].text
        assert "not declared" in said and not any(name in said for name in ("alice", "dana", "carol", "ali,"))
