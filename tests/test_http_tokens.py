"""The static token file and the per-token rate limit, as units (the server process's own
tests are in test_http_server.py)."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from mdmem.auth.principal import TokenRejected
from mdmem.auth.static_tokens import TokenFile
from mdmem.errors import BadInput, NotFound
from mdmem.mcp.http_guard import RateLimiter
from mdmem.storage.memory_id import read_or_make


def test_the_token_file_keeps_only_salted_hashes_and_verifies_the_secret(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    entry, secret = tokens.add("alice", "ci-bot", frozenset({"read", "write"}))
    other_entry, other = tokens.add("alice", "ci-bot", frozenset({"read", "write"}))
    raw = (tmp_path / "tokens.json").read_text()
    assert secret not in raw and secret.split("_", 2)[2] not in raw  # the random part (it may hold "_" itself)
    stored = json.loads(raw)["tokens"]
    assert stored[0]["salt"] != stored[1]["salt"] and stored[0]["hash"] != stored[1]["hash"]
    assert oct(os.stat(tmp_path / "tokens.json").st_mode & 0o777) == "0o600"
    principal = tokens.verify(secret)
    assert (principal.person, principal.agent, principal.capabilities) == ("alice", "ci-bot", {"read", "write"})
    assert principal.token_id == f"static:{entry.id}"
    with pytest.raises(TokenRejected, match="wrong secret"):
        tokens.verify(secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    with pytest.raises(TokenRejected, match="wrong secret"):  # one token's id with another's secret
        tokens.verify(f"mdmem_{entry.id}_" + other.rsplit("_", 1)[1])
    with pytest.raises(TokenRejected, match="not a static"):
        tokens.verify("Bearer-something")


def test_a_revocation_by_another_process_is_seen_at_the_next_verify(tmp_path):
    server_side = TokenFile(tmp_path / "tokens.json")
    cli_side = TokenFile(tmp_path / "tokens.json")
    entry, secret = cli_side.add("bob", "helper", frozenset({"read"}))
    assert server_side.verify(secret).person == "bob"
    cli_side.revoke(entry.id)
    with pytest.raises(TokenRejected, match="revoked"):
        server_side.verify(secret)
    with pytest.raises(NotFound, match="no such token"):
        cli_side.revoke("feedfeedfeed")


def test_expired_static_tokens_are_refused(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    past = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    _, secret = tokens.add("bob", "b", frozenset({"read"}), expires="2025-06-01T00:00:00Z", now=past)
    assert tokens.verify(secret, now=past).expires_at is not None
    with pytest.raises(TokenRejected, match="expired"):
        tokens.verify(secret, now=dt.datetime(2025, 7, 1, tzinfo=dt.timezone.utc))
    with pytest.raises(BadInput, match="--expires"):
        tokens.add("bob", "b", frozenset({"read"}), expires="2020-01-01T00:00:00Z")


def test_a_token_made_for_one_memory_is_refused_over_another(tmp_path):
    """One account's token file serves every memory it serves: a token names its own by id, and
    the server over another (which may declare a person of the same name) refuses it, saying
    which it was made for only in the log. A token that names none (made before tokens named
    theirs) is still taken by each."""
    maker = TokenFile(tmp_path / "tokens.json")
    _, for_a = maker.add("bob", "ci-bot", frozenset({"read"}), memory_id="a" * 32, memory="/srv/a")
    _, older = maker.add("bob", "old-bot", frozenset({"read"}))
    over_a = TokenFile(tmp_path / "tokens.json", memory_id="a" * 32, memory="/mnt/elsewhere")
    over_b = TokenFile(tmp_path / "tokens.json", memory_id="b" * 32, memory="/srv/a")
    assert over_a.verify(for_a).person == "bob"  # the same memory, wherever it is now
    with pytest.raises(TokenRejected, match=r"made for the memory a{32} \(then at /srv/a\), not this one \(b{32}"):
        over_b.verify(for_a)  # another memory, even at the first one's old place
    assert over_a.verify(older).agent == over_b.verify(older).agent == "old-bot"
    # A server that cannot tell its memory ("") takes only tokens that name none, not one whose
    # id was edited to nothing.
    _, emptied = maker.add("bob", "edited", frozenset({"read"}), memory_id="", memory="/srv/a")
    unsure = TokenFile(tmp_path / "tokens.json", memory_id="")
    with pytest.raises(TokenRejected, match="made for the memory"):
        unsure.verify(emptied)
    with pytest.raises(TokenRejected, match="made for the memory"):
        unsure.verify(for_a)
    assert unsure.verify(older).agent == "old-bot"


def test_a_memory_id_is_made_once_and_agreed_on_by_every_process(tmp_path):
    """storage/memory_id.py: the first to ask makes it, whole; everyone after (and any number
    racing) reads the same; a damaged file is named, not replaced."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "id"
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: read_or_make(path), range(32)))
    assert len(ids) == 1 and len(ids.pop()) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id"]  # no temporary left behind
    path.write_text("garbage\n")
    with pytest.raises(BadInput, match=f"{path}: not a memory id"):
        read_or_make(path)


def test_a_memory_id_is_read_only_from_a_plain_file(tmp_path):
    """A link (to another memory's id, which would take its tokens), a pipe (which blocked), a
    device that never ends or a folder in the id's place is named, not read."""
    other = tmp_path / "other-id"
    read_or_make(other)
    cases = {"link": lambda p: p.symlink_to(other), "pipe": lambda p: os.mkfifo(p),
             "device": lambda p: p.symlink_to("/dev/zero"), "folder": lambda p: p.mkdir()}
    for name, make in cases.items():
        path = tmp_path / name
        make(path)
        with pytest.raises(BadInput, match=f"{path}: (cannot read this memory's id|not a plain file)"):
            read_or_make(path)


def test_bad_token_file_arguments_are_named(tmp_path):
    tokens = TokenFile(tmp_path / "tokens.json")
    with pytest.raises(BadInput, match="--allow"):
        tokens.add("bob", "b", frozenset({"admin"}))
    with pytest.raises(BadInput, match="--agent"):
        tokens.add("bob", "bad label!", frozenset({"read"}))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BadInput, match="broken.json: not a readable token file"):
        TokenFile(tmp_path / "broken.json").entries()


def test_the_rate_limit_is_a_bucket_per_token():
    now = [0.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("a")
    assert wait == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # another token has its own allowance
    now[0] += 0.5
    assert limiter.take("a") == 0.0
    assert RateLimiter(0, 1).take("a") == 0.0  # 0: no limit


@pytest.mark.parametrize("args, says", [
    (["--http", "127.0.0.1:8765", "--as", "alice"], "over HTTP each request's token names the person"),
    (["--http", "127.0.0.1:8765", "--agent", "bot"], "over HTTP each request's token names the person"),
    (["--http", "localhost"], "--http: 'localhost'; give HOST:PORT"),
    (["--http", "127.0.0.1:99999"], "give HOST:PORT"),
    (["--http", "127.0.0.1:0", "--public-url", "memory.example.com/mcp"], "--public-url"),
    (["--http", "127.0.0.1:0", "--rate", "-1"], "--rate: -1.0; give a number of at least 0"),
    (["--http", "127.0.0.1:0", "--jwt-jwks", "keys.json"], "--jwt-jwks and --jwt-issuer go together"),
])
def test_serve_http_refuses_bad_arguments_naming_them(repo, tmp_path, capsys, args, says):
    from mdmem.cli.main import main

    code = main(["serve", "--repo", str(repo.root), "--tokens", str(tmp_path / "t.json"), *args],
                env={"MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1", "HOME": str(tmp_path)})
    assert code == 2
    assert says in capsys.readouterr().err


def test_a_flood_of_bad_tokens_does_not_flood_the_log(caplog):
    import logging

    from mdmem.mcp.http import REFUSALS_LOGGED, TokenVerifier

    verifier = TokenVerifier(None, resource="http://127.0.0.1:1/mcp")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="mdmem.server"):
        for i in range(REFUSALS_LOGGED + 50):
            verifier.refused(f"bad token {i}")
    assert len(caplog.records) == REFUSALS_LOGGED
    verifier._window[0] -= 61  # a minute later
    with caplog.at_level(logging.WARNING, logger="mdmem.server"):
        verifier.refused("one more")
    assert "50 more in the last minute" in caplog.records[-2].getMessage()
    assert caplog.records[-1].getMessage() == "token refused: one more"


def test_the_token_file_defaults_to_beside_the_users_config(repo, tmp_path, capsys):
    from mdmem.cli.main import main

    env = {"MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1", "HOME": str(tmp_path),
           "MDMEM_CONFIG": str(tmp_path / "conf" / "config.toml")}
    assert main(["token", "add", "--repo", str(repo.root), "--person", "bob", "--agent", "bob-bot"], env=env) == 0
    secret = capsys.readouterr().out.strip()
    tokens = TokenFile(tmp_path / "conf" / "server-tokens.json")
    assert tokens.verify(secret).capabilities == {"read"}  # the default: read only
    assert main(["token", "list", "--json"], env=env) == 0
    assert json.loads(capsys.readouterr().out)["tokens"][0]["person"] == "bob"


def test_a_verified_token_is_kept_until_the_token_file_changes_and_a_revocation_is_honoured_next(repo, tmp_path):
    import asyncio

    from mdmem.mcp.http import TokenVerifier

    server_side = TokenFile(tmp_path / "tokens.json")
    entry, secret = TokenFile(tmp_path / "tokens.json").add("bob", "helper", frozenset({"read"}))
    _, other = TokenFile(tmp_path / "tokens.json").add("carol", "helper", frozenset({"read"}))
    verifier = TokenVerifier(repo, tokens=server_side, resource="http://127.0.0.1:1/mcp")

    def verify(token):
        return asyncio.run(verifier.verify_token(token))

    first = verify(secret)
    assert first is not None and first.person == "bob"
    assert verify(secret) is first  # kept: no salted hash, no lookup of the person again
    assert verify(f"mdmem_{entry.id}_" + other.rsplit("_", 1)[1]) is None  # the id with another's secret
    TokenFile(tmp_path / "tokens.json").revoke(entry.id)  # another process: the file is rewritten
    assert verify(secret) is None  # the very next request
    assert verify(other).person == "carol"


def test_token_list_with_no_tokens_says_where_it_looked(tmp_path, capsys):
    """An empty list printed nothing at all: a mistyped --tokens or a server account's other
    config folder looked like "no tokens" and nothing else. It names the file (on stderr)."""
    from mdmem.cli.main import main

    env = {"MDMEM_NO_DAEMON": "1", "HOME": str(tmp_path)}
    assert main(["token", "list", "--tokens", str(tmp_path / "none.json")], env=env) == 0
    out = capsys.readouterr()
    assert out.out == "" and str(tmp_path / "none.json") in out.err
