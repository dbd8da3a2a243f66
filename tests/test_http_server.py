"""`mdmem serve --http`: a real server process on a loopback port, called through the MCP SDK's
own Streamable HTTP client (and raw HTTP where the point is what a client that is not the SDK
sends): tokens, visibility per request, limits, slow clients, SIGTERM."""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx2
import jwt
import pytest
from conftest import PEOPLE, T0, TEAMS, lock_held_by_another_thread
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from http_server import data, malloc_tuned_in_a_fresh_process, running, session_calls, start_server, writers_cut_off

from mdmem import MemoryRepo
from mdmem.auth.static_tokens import TokenFile

ISSUER = "https://idp.example.test"
SECRET_TEXT = "Alice's locker combination is 7319-plum"


def rsa_jwk(kid: str):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return key, {**public, "kid": kid, "alg": "RS256", "use": "sig"}


def make_jwt(key, kid: str, audience: str, *, person="alice", client="idp-bot", scope="mdmem:read mdmem:write",
             exp_in=300, nbf_in=None, issuer=ISSUER, alg="RS256", extra=None, headers=None):
    now = int(time.time())
    claims = {"iss": issuer, "aud": audience, "sub": person, "client_id": client, "scope": scope,
              "iat": now, "exp": now + exp_in, **(extra or {})}
    if nbf_in is not None:
        claims["nbf"] = now + nbf_in
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, **(headers or {})})


def hand_signed_hs256(claims: dict, secret: bytes, *, kid: str) -> str:
    """A token signed the way an algorithm-confusion attack does (PyJWT refuses to make one)."""
    import base64
    import hashlib
    import hmac

    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    signing = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode()) + b"." + \
        b64(json.dumps(claims).encode())
    return (signing + b"." + b64(hmac.new(secret, signing, hashlib.sha256).digest())).decode()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One memory, tokens for several people, a JWKS file, one server over it all."""
    tmp = tmp_path_factory.mktemp("http")
    repo = MemoryRepo.init(tmp / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.remember(SECRET_TEXT, as_user="alice", kind="fact", subject="user:alice", key="locker", source="user")
    repo.remember("Payments deploy on weekdays before 3pm", as_user="alice", kind="fact", subject="service:web",
                  key="deploy.window", scope="team", team="payments", source="user")
    tokens = TokenFile(tmp / "tokens.json")
    t = {}
    for name, person, agent, caps in [("alice_rw", "alice", "alice-bot", {"read", "write"}),
                                      ("bob_rw", "bob", "bob-bot", {"read", "write"}),
                                      ("bob_ro", "bob", "bob-reader", {"read"}),
                                      ("carol_all", "carol", "carol-bot", {"read", "write", "delete"}),
                                      ("mallory", "mallory", "m-bot", {"read"})]:
        t[name] = tokens.add(person, agent, frozenset(caps))[1]
    t["expired"] = tokens.add("bob", "old-bot", frozenset({"read"}), expires="2026-01-01T00:00:00Z",
                              now=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc))[1]
    key, jwk = rsa_jwk("k1")
    (tmp / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    with running(repo.root, tokens.path, "--jwt-jwks", str(tmp / "jwks.json"), "--jwt-issuer", ISSUER) as server:
        yield {"repo": repo, "tokens": tokens, "t": t, "server": server, "key": key, "tmp": tmp}


def call(world, token, calls, **kw):
    return asyncio.run(session_calls(world["server"].url, token, calls, **kw))


def post(url, token=None, body=None, **kw):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               **({"Authorization": f"Bearer {token}"} if token else {})}
    body = body or {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return httpx2.post(url, headers=headers, content=json.dumps(body), timeout=30, **kw)


def assert_unauthorized(response, server):
    assert response.status_code == 401, response.text
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    metadata_url = server.base + "/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata_url}"' in challenge
    assert "alice" not in response.text and "locker" not in response.text


def test_requests_without_a_good_token_get_401_with_the_resource_metadata(world):
    server, t = world["server"], world["t"]
    bad = {
        "none": None,
        "garbage": "hello",
        "wrong secret": t["bob_rw"][:-4] + "AAAA",
        "unknown id": "mdmem_000000000000_" + t["bob_rw"].rsplit("_", 1)[1],
        "expired": t["expired"],
        "undeclared person": t["mallory"],
    }
    for why, token in bad.items():
        response = post(server.url, token)
        assert response.status_code == 401, why
        assert_unauthorized(response, server)
    metadata = httpx2.get(server.base + "/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["resource"] == server.url
    assert metadata["authorization_servers"] == [ISSUER]
    assert metadata["bearer_methods_supported"] == ["header"]
    # The SDK's own client is turned away too, before any tool runs.
    with pytest.raises(Exception):  # noqa: B017 -- whatever the SDK raises for a 401; the point is no session
        call(world, t["expired"], [("recall", {"query": "locker"})])
    # The log says why, for the operator (never the secret).
    assert server.says("expired") and server.says("no such token"), server.log()
    assert t["bob_rw"] not in server.log()


def test_the_health_endpoint_needs_no_token_and_says_nothing_about_memory(world):
    response = httpx2.get(world["server"].base + "/healthz")
    assert response.status_code == 200
    assert set(response.json()) == {"status", "ready"} and response.json()["status"] == "ok"
    # ready: the index caught up and its caches warm (a readiness probe holds traffic till then)
    deadline = time.monotonic() + 60
    while not response.json()["ready"] and time.monotonic() < deadline:
        time.sleep(0.1)
        response = httpx2.get(world["server"].base + "/healthz")
    assert response.json() == {"status": "ok", "ready": True}


def test_jwt_access_tokens_verified_against_the_jwks(world):
    server, key = world["server"], world["key"]
    good = make_jwt(key, "k1", server.url)
    out = call(world, good, [("get", {"subject": "user:alice", "kind": "fact", "key": "locker"})], list_tools=True)
    assert out[0] == ["get", "history", "keys", "recall", "remember", "startup"]  # mdmem:read + mdmem:write
    assert SECRET_TEXT in data(out[1])["text"]
    other_key, _ = rsa_jwk("k1")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    public_pem = key.public_key().public_bytes(encoding=serialization.Encoding.PEM,
                                               format=serialization.PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())
    refused = {
        "wrong audience": make_jwt(key, "k1", "https://another-server.example/mcp"),
        "expired": make_jwt(key, "k1", server.url, exp_in=-120),
        "not yet valid": make_jwt(key, "k1", server.url, nbf_in=600),
        "wrong issuer": make_jwt(key, "k1", server.url, issuer="https://evil.example"),
        "forged (another key, same kid)": make_jwt(other_key, "k1", server.url),
        "unknown kid": make_jwt(key, "k9", server.url),
        "ES256 with an unknown key": make_jwt(ec_key, "k1", server.url, alg="ES256"),
        "HS256 keyed with the public key": hand_signed_hs256(
            {"iss": ISSUER, "aud": server.url, "sub": "alice", "client_id": "x", "scope": "mdmem:read",
             "exp": now + 300}, public_pem, kid="k1"),
        "alg none": jwt.encode({"iss": ISSUER, "aud": server.url, "sub": "alice", "client_id": "x",
                                "scope": "mdmem:read", "exp": now + 300}, None, algorithm="none"),
        "no mdmem scope": make_jwt(key, "k1", server.url, scope="openid profile"),
        "undeclared person": make_jwt(key, "k1", server.url, person="mallory"),
        "a declared person in other case": make_jwt(key, "k1", server.url, person="Alice"),
        "a critical header it does not know": make_jwt(key, "k1", server.url, headers={"crit": ["x-pin"], "x-pin": 1}),
        "its own key set named in jku": make_jwt(other_key, "k1", server.url,
                                                 headers={"jku": "https://evil.example/jwks.json"}),
        "no client": make_jwt(key, "k1", server.url, client=""),
    }
    for why, token in refused.items():
        assert post(server.url, token).status_code == 401, why


def test_a_read_only_token_cannot_remember_or_forget(world):
    repo, t = world["repo"], world["t"]
    before = subprocess.run(["git", "-C", str(repo.root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout
    out = call(world, t["bob_ro"], [
        ("remember", {"text": "bob reads only", "kind": "working", "subject": "task:current", "key": "file"}),
        ("forget", {"subject": "user:bob"}),
        ("recall", {"query": "deploy weekdays"}),
    ], list_tools=True)
    tools, remember, forget, recall = out
    assert tools == ["get", "history", "keys", "recall", "startup"]
    assert remember.is_error and "refused: remember needs the write capability" in data(remember)
    assert forget.is_error and "forget needs the delete capability" in data(forget)
    assert not recall.is_error
    after = subprocess.run(["git", "-C", str(repo.root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert before == after


def test_a_client_on_the_handshake_protocol_acts_as_its_token_too(world):
    """Agents speaking the 2025 protocol (initialize, then calls) reach the same tools, as the
    same person, with the same capabilities, over the stateless transport."""
    t = world["t"]
    tools, got, wrote = call(world, t["bob_ro"], [
        ("get", {"subject": "service:web", "kind": "fact", "key": "deploy.window"}),
        ("remember", {"text": "x", "kind": "working", "subject": "task:current", "key": "file"})],
        list_tools=True, mode="legacy")
    assert tools == ["get", "history", "keys", "recall", "startup"]
    assert "weekdays before 3pm" in data(got)["text"]
    assert wrote.is_error and "needs the write capability" in data(wrote)
    mine = call(world, t["bob_rw"], [("get", {"subject": "user:alice", "kind": "fact", "key": "locker"})],
                mode="legacy")[0]
    assert mine.is_error and "no such note visible to bob" in data(mine)


def test_bobs_token_never_sees_alices_private_notes(world):
    t = world["t"]
    probes = [
        ("recall", {"query": "Alice locker combination 7319-plum", "k": 50}),
        ("recall", {"query": "locker combination", "include_history": True, "k": 50}),
        ("recall", {"query": "locker", "subject": "user:alice"}),
        ("get", {"subject": "user:alice", "kind": "fact", "key": "locker"}),
        ("get", {"path": "private/alice/user/alice/fact/locker.md"}),
        ("get", {"subject": "user:alice", "kind": "fact", "key": "no-such-key"}),
        ("keys", {"subject": "user:alice", "kind": "fact"}),
        ("history", {"subject": "user:alice", "kind": "fact", "key": "locker"}),
        ("startup", {}),
    ]
    out = call(world, t["bob_rw"], probes)
    texts = [json.dumps(data(r)) for r in out]
    for (name, _), text in zip(probes, texts):
        assert "7319" not in text and "plum" not in text and "private/alice" not in text.replace(
            "private/alice/user/alice/fact/locker.md: no such", ""), (name, text)
    assert data(out[0])["hits"] == [] and data(out[1])["hits"] == [] and data(out[2])["hits"] == []
    assert data(out[6]) == {"keys": []}
    # A note bob may not see and one that does not exist answer alike (no hint it is there).
    by_path, missing = data(out[3]), data(out[5])
    assert out[3].is_error and out[5].is_error
    assert by_path.replace("locker", "X") == missing.replace("no-such-key", "X")
    # A token that may forget plans only over what its person sees: the plan for alice's text
    # is the plan for a text nobody wrote, and naming her note answers as a note that never was.
    plans = call(world, t["carol_all"], [
        ("forget", {"texts": [SECRET_TEXT], "dry_run": True}),
        ("forget", {"texts": ["Nobody wrote this sentence anywhere at all"], "dry_run": True}),
        ("forget", {"paths": ["private/alice/user/alice/fact/locker.md"], "dry_run": True}),
        ("forget", {"paths": ["private/alice/user/alice/fact/never.md"], "dry_run": True}),
        ("forget", {"owner": "alice", "dry_run": True}),
    ])
    assert not plans[0].is_error and data(plans[0]) == data(plans[1])
    assert data(plans[2]).replace("locker", "X") == data(plans[3]).replace("never", "X")
    assert plans[4].is_error and all("7319" not in json.dumps(data(p)) for p in plans)
    # Alice's own token sees it: the probes were not simply wrong.
    mine = call(world, t["alice_rw"], [probes[0]])
    assert "7319-plum" in json.dumps(data(mine[0]))


def test_an_agent_label_or_user_in_the_arguments_changes_nothing(world):
    repo, t = world["repo"], world["t"]
    out = call(world, t["bob_rw"], [
        ("remember", {"text": "note as someone else", "kind": "working", "subject": "task:current",
                      "key": "who", "as_user": "alice"}),
        ("remember", {"text": "note with an agent", "kind": "working", "subject": "task:current",
                      "key": "who", "agent": "alice-bot"}),
        ("remember", {"text": "Bob's agent is editing the deploy script", "kind": "working",
                      "subject": "task:current", "key": "who", "source": "agent:alice-bot"}),
    ])
    assert out[0].is_error and "unknown argument(s) as_user" in data(out[0])
    assert out[1].is_error and "unknown argument(s) agent" in data(out[1])
    written = data(out[2])
    assert written["status"] == "committed", written
    assert written["path"].startswith("private/bob/")
    note = data(call(world, t["bob_rw"], [("get", {"path": written["path"]})])[0])["note"]
    assert note["owner"] == "bob" and note["source"] == "agent:bob-bot", note
    trailer = subprocess.run(["git", "-C", str(repo.root), "log", "-1", "--format=%B", written["commit"]],
                             capture_output=True, text=True).stdout
    # What the agent claimed is kept as its claim, for the reviewer; the source is the token's.
    assert "Memory-Actor: bob\nMemory-Source: agent:bob-bot\n" in trailer


def test_a_write_by_another_process_is_seen_by_the_next_call(world):
    repo, t = world["repo"], world["t"]
    subprocess.run([sys.executable, "-m", "mdmem.cli.main", "remember", "--repo", str(repo.root), "--as", "bob",
                    "--kind", "fact", "--subject", "service:web", "--key", "cache.ttl", "--scope", "team",
                    "--team", "payments", "--source", "user", "--new-key",
                    "The web cache keeps pages for 90 seconds"],
                   check=True, capture_output=True, env={**os.environ, "MDMEM_EMBEDDER": "none",
                                                          "MDMEM_NO_DAEMON": "1"})
    out = call(world, t["alice_rw"], [("get", {"subject": "service:web", "kind": "fact", "key": "cache.ttl"}),
                                      ("keys", {"subject": "service:web", "kind": "fact"})])
    assert "90 seconds" in data(out[0])["text"]
    assert "cache.ttl" in json.dumps(data(out[1]))
    # A person's hand edit on the server's clone (not committed) is found by the next recall.
    path = repo.root / data(out[0])["path"]
    committed = path.read_text()
    path.write_text(committed.replace("90 seconds", "45 seconds, says the ops runbook"))
    try:
        hits = data(call(world, t["alice_rw"], [("recall", {"query": "how long does the web cache keep pages"})])[0])
        assert any("ops runbook" in h["text"] for h in hits["hits"]), hits
    finally:
        path.write_text(committed)  # the other tests share this clone


def test_query_length_and_k_are_bounded(world):
    out = call(world, world["t"]["bob_rw"], [("recall", {"query": "deploy " * 1000}),
                                             ("recall", {"query": "deploy", "k": 10_000})])
    assert out[0].is_error and "query of 7000 characters" in data(out[0])
    assert out[1].is_error and "k=10000; give 1 to 50" in data(out[1])


def raw_request(port: int, head: str, body_chunks=(), *, read=True, timeout=30.0) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(head.encode())
        for chunk in body_chunks:
            try:
                sock.sendall(chunk)
            except OSError:  # the server answered and closed: read what it said
                break
        if not read:
            return b""
        answer = b""
        while b"\r\n\r\n" not in answer:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
        head_part, _, body = answer.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head_part)
        while length and len(body) < int(length.group(1)):  # the answer's body too, as declared
            got = sock.recv(65536)
            if not got:
                break
            body += got
            answer += got
        return answer
    finally:
        sock.close()


def test_a_huge_body_and_a_stalled_client_do_not_block_the_others(world, tmp_path):
    repo, t = world["repo"], world["t"]
    with running(repo.root, world["tokens"].path, "--body-timeout", "3") as server:
        port = int(server.base.rsplit(":", 1)[1])
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {t['bob_rw']}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                "MCP-Protocol-Version: 2026-07-28\r\n")
        answers: dict[str, bytes] = {}
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall((head + "Content-Length: 1000\r\n\r\n{\"jsonrpc\": \"2.0\", ").encode())  # then nothing

        def huge_declared():
            answers["declared"] = raw_request(port, head + "Content-Length: 100000000\r\n\r\n")

        def huge_streamed():
            chunk = b"x" * 65536
            chunks = (b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(1600))  # 100 MB, chunked
            answers["streamed"] = raw_request(port, head + "Transfer-Encoding: chunked\r\n\r\n", chunks)

        threads = [threading.Thread(target=f) for f in (huge_declared, huge_streamed)]
        for th in threads:
            th.start()
        t0 = time.monotonic()
        out = asyncio.run(session_calls(server.url, t["alice_rw"],
                                        [("recall", {"query": "deploy weekdays"})] * 5))
        served_in = time.monotonic() - t0
        assert all(not r.is_error for r in out)
        # The stalled client is still waiting: nobody answered it yet, and it held no one up.
        stalled.settimeout(0.2)
        with pytest.raises(socket.timeout):
            stalled.recv(1)
        for th in threads:
            th.join(60)
        assert answers["declared"].startswith(b"HTTP/1.1 413"), answers["declared"][:200]
        assert answers["streamed"].startswith(b"HTTP/1.1 413"), answers["streamed"][:200]
        # A chunked body declares no size: the answer says it went over the cap, and what that is.
        assert b"request body over " in answers["streamed"] and b"at most" in answers["streamed"], \
            answers["streamed"][-300:]
        assert b"request body of 100000000 bytes" in answers["declared"], answers["declared"][-300:]
        stalled.settimeout(10)
        late = stalled.recv(65536)
        stalled.close()
        assert late.startswith(b"HTTP/1.1 408"), late[:200]
        assert served_in < 30


def test_connections_that_never_finish_their_headers_are_closed_and_others_served_again(world):
    """More half-sent request heads than the server's connection limit (512): uvicorn kept them
    for ever and answered everyone else 503; now each is closed at the --body-timeout clock."""
    repo, t = world["repo"], world["t"]
    with running(repo.root, world["tokens"].path, "--body-timeout", "2") as server:
        port = int(server.base.rsplit(":", 1)[1])
        stalled = []
        try:
            for _ in range(520):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # and no more
                stalled.append(s)
            answered = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                answered = post(server.url, t["bob_rw"])
                if answered.status_code != 503:
                    break
                time.sleep(0.2)
            assert answered is not None and answered.status_code == 200, answered.status_code
            for s in stalled[:20]:  # the server hung up on them (they sent no more)
                s.settimeout(30)
                assert s.recv(1) == b""
        finally:
            for s in stalled:
                s.close()


def test_a_token_over_its_rate_gets_429_with_retry_after(world):
    repo, t = world["repo"], world["t"]
    with running(repo.root, world["tokens"].path, "--rate", "0.5", "--burst", "2") as server:
        codes = [post(server.url, t["bob_rw"]).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        limited = post(server.url, t["bob_rw"])
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["data"]["kind"] == "rate_limited"
        # Another token has its own allowance.
        assert post(server.url, t["alice_rw"]).status_code == 200


def test_a_refusal_reaches_the_sdk_client_with_its_reason(world):
    """The guard's refusals are JSON-RPC errors: the SDK's client raises them with their text
    (any other body at a 429 it reported as "Server returned an error response")."""
    from mcp.shared.exceptions import MCPError

    repo, t = world["repo"], world["t"]
    with running(repo.root, world["tokens"].path, "--rate", "0.2", "--burst", "1") as server:
        with pytest.raises(BaseException) as raised:  # the client's task group wraps it
            asyncio.run(session_calls(server.url, t["bob_rw"], [("recall", {"query": "deploy"})] * 3))
        errors, found = [raised.value], []
        while errors:
            e = errors.pop()
            errors += list(getattr(e, "exceptions", []))
            found += [str(e)] if isinstance(e, MCPError) else []
        assert any(f.startswith("rate_limited: this token sent more than 0.2 requests a second") for f in found), \
            raised.value


def test_a_revoked_token_stops_working_without_a_restart(world, tmp_path):
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    tokens = tmp_path / "tokens.json"
    repo = world["repo"]

    def mdmem(*args):
        return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], capture_output=True, text=True,
                              env=env, check=True).stdout

    secret = mdmem("token", "add", "--repo", str(repo.root), "--tokens", str(tokens), "--person", "dana",
                   "--agent", "dana-bot", "--allow", "read").strip()
    assert secret.startswith("mdmem_") and secret not in tokens.read_text()
    listed = json.loads(mdmem("token", "list", "--tokens", str(tokens), "--json"))["tokens"]
    assert [(e["person"], e["agent"], e["capabilities"]) for e in listed] == [("dana", "dana-bot", ["read"])]
    assert oct(tokens.stat().st_mode & 0o777) == "0o600"
    with running(repo.root, tokens) as server:
        assert post(server.url, secret).status_code == 200
        mdmem("token", "revoke", "--tokens", str(tokens), listed[0]["id"])
        response = post(server.url, secret)
        assert_unauthorized(response, server)
        assert server.says("revoked"), server.log()
    with pytest.raises(subprocess.CalledProcessError) as undeclared:
        mdmem("token", "add", "--repo", str(repo.root), "--tokens", str(tokens), "--person", "mallory",
              "--agent", "x")
    assert "mallory is not a user of this repo" in undeclared.value.stderr


def test_jwks_from_a_url_is_fetched_and_cached(world, tmp_path):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    key, jwk = rsa_jwk("url-key")
    fetches = []

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self):
            fetches.append(self.path)
            body = json.dumps({"keys": [jwk]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    idp = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=idp.serve_forever, daemon=True).start()
    try:
        jwks_url = f"http://127.0.0.1:{idp.server_address[1]}/jwks.json"
        with running(world["repo"].root, tmp_path / "none.json", "--jwt-jwks", jwks_url, "--jwt-issuer", ISSUER,
                     "--jwt-audience", "mdmem-team") as server:
            good = make_jwt(key, "url-key", "mdmem-team", person="carol", client="carol-ci",
                            scope="mdmem:read")
            for _ in range(3):
                assert post(server.url, good).status_code == 200
            assert post(server.url, make_jwt(key, "url-key", server.url)).status_code == 401  # not the audience
            assert len(fetches) == 1  # cached
            for i in range(5):  # made-up kids do not make the server fetch each time
                assert post(server.url, make_jwt(key, f"forged{i}", "mdmem-team")).status_code == 401
            assert len(fetches) == 1
    finally:
        idp.shutdown()


def test_sigterm_finishes_writes_in_flight_and_loses_none_acknowledged(world, tmp_path):
    repo, t = world["repo"], world["t"]
    server = start_server(repo.root, world["tokens"].path, "--rate", "0")
    acknowledged: list[dict] = []
    failures: list[str] = []
    asyncio.run(writers_cut_off(server, t["carol_all"], signal.SIGTERM, after=12, label="sigterm run",
                                acknowledged=acknowledged, failures=failures))
    assert server.proc.wait(60) == 0, server.log()
    assert acknowledged and all(a["status"] == "committed" for a in acknowledged)
    log = subprocess.run(["git", "-C", str(repo.root), "log", "--format=%H", "main"], capture_output=True,
                         text=True).stdout.split()
    tree = subprocess.run(["git", "-C", str(repo.root), "ls-tree", "-r", "--name-only", "main"],
                          capture_output=True, text=True).stdout.split()
    missing = [a["path"] for a in acknowledged if a["commit"] not in log or a["path"] not in tree]
    assert not missing, missing
    assert len(failures) == 6  # every writer was cut off by the stop, none ran out of writes
    # A clean stop: git's index and work tree agree with the branch (nothing left to repair).
    status = subprocess.run(["git", "-C", str(repo.root), "status", "--porcelain"], capture_output=True,
                            text=True).stdout
    assert status == ""


def test_reads_are_answered_while_writes_wait_for_the_write_lock(world):
    """Writes take turns on the repository's write lock; while a dozen wait there (held here,
    as another process's long write would), a recall is still answered."""
    repo, t = world["repo"], world["t"]

    async def remember(i: int):
        return (await session_calls(world["server"].url, t["alice_rw"], [("remember", {
            "text": f"queued write {i}", "kind": "episode", "subject": "task:queue", "key": f"q{i}"})]))[0]

    async def scenario(release):
        writes = [asyncio.create_task(remember(i)) for i in range(12)]
        await asyncio.sleep(2.0)  # they reach the server and wait for the lock
        recall = await asyncio.wait_for(session_calls(world["server"].url, t["bob_rw"],
                                                      [("recall", {"query": "deploy weekdays"})]), 40)
        waiting = sum(not w.done() for w in writes)
        release.set()
        return recall[0], waiting, await asyncio.gather(*writes)

    with lock_held_by_another_thread(repo, at_most=60) as release:
        recalled, waiting, written = asyncio.run(scenario(release))
    assert not recalled.is_error and data(recalled)["hits"]
    assert waiting == 12  # answered while every write still waited
    assert all(data(w)["status"] == "committed" for w in written), [data(w) for w in written]


@pytest.mark.parametrize("handed_over", [False, True], ids=["bound", "after-reexec"])
def test_answers_leave_without_waiting_for_the_clients_delayed_ack(handed_over):
    """Every connection the server accepts has Nagle off: with it on, an answer's body waited for
    the ACK of its headers, which a client may hold back 40 ms (recall p99 54 ms at the client
    against 21 ms inside the server). asyncio sets TCP_NODELAY only on a socket that says it is
    TCP, so the listening socket must, also the one a re-executed server is handed."""
    from mdmem.mcp.http import listen, listening_socket

    sock = listen("127.0.0.1", 0)
    if handed_over:
        fd = os.dup(sock.fileno())
        sock.close()
        sock = listening_socket(fd)
    seen: list[int] = []

    async def main() -> None:
        async def accepted(reader, writer) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0


def test_the_server_tunes_glibc_malloc_unless_the_environment_already_does():
    """serve --http lives for days: two arenas and large blocks mapped on their own kept its heap
    ~25 MB lower and growing about half as fast (mcp/heap.py). What the operator set in the
    environment stays as given (glibc reads it at start; a mallopt would override it)."""
    assert malloc_tuned_in_a_fresh_process() == {"MALLOC_ARENA_MAX": 2, "MALLOC_MMAP_THRESHOLD_": 131072}
    assert malloc_tuned_in_a_fresh_process(MALLOC_ARENA_MAX="8") == {"MALLOC_MMAP_THRESHOLD_": 131072}


def test_the_malloc_tuning_leaves_glibc_tunables_the_operator_set():
    """The same settings given the way glibc documents today (GLIBC_TUNABLES): the mallopt
    overrode the operator's arena_max=8 with 2 and the threshold with 128 KiB."""
    assert malloc_tuned_in_a_fresh_process(
        GLIBC_TUNABLES="glibc.malloc.arena_max=8:glibc.malloc.mmap_threshold=1048576") == {}


def test_the_address_said_at_start_serves_the_public_urls_path(world):
    """Behind a proxy at https://memory.example.com/team/mcp the endpoint is /team/mcp; the
    address the first line says it listens on must be that one (a proxy set up from /mcp got 404)."""
    repo, t = world["repo"], world["t"]
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--http", "127.0.0.1:0", "--repo",
                             str(repo.root), "--tokens", str(world["tokens"].path), "--public-url",
                             "https://memory.example.com/team/mcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stderr.readline()
        bound = first.split("listening on ", 1)[1].split(";", 1)[0]
        assert bound.startswith("http://127.0.0.1:") and bound.endswith("/team/mcp"), first
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline:
            try:
                answer = post(bound, t["bob_rw"])
                break
            except httpx2.HTTPError:
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200, answer
    finally:
        proc.terminate()
        proc.wait(30)
