"""The JWKS fetched from the identity provider's URL (a real HTTP server on loopback, a clock the
test moves): fetches are spaced whether they failed or not, a token whose key is cached never
waits for a fetch under way, cached keys serve through the provider's outage, and an RSA key
that declares no algorithm verifies every RS and PS algorithm."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from mdmem.auth.jwt_tokens import JWKS_REFETCH_SECONDS, JWKS_TTL_SECONDS, JwksSource, JwtSettings, JwtVerifier
from mdmem.auth.principal import TokenRejected

ISSUER = "https://idp.example"
AUDIENCE = "mdmem-team"


def rsa_key(kid: str, alg: str | None = "RS256"):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig"}
    if alg:
        public["alg"] = alg
    return key, public


def token(key, kid: str, alg: str = "RS256") -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "client_id": "bot", "scope": "mdmem:read",
                       "iat": now, "exp": now + 300}, key, algorithm=alg, headers={"kid": kid})


class Provider:
    """A JWKS endpoint whose answer the test sets: the key set, 503, or a hang."""

    def __init__(self, keys: list[dict]):
        self.keys, self.mode, self.fetches = keys, "ok", 0
        self.release = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                provider.fetches += 1
                if provider.mode == "hang":
                    provider.release.wait(10)
                if provider.mode in ("down", "gone"):
                    self.send_response(503 if provider.mode == "down" else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"keys": [] if provider.mode == "empty" else provider.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"

    def close(self):
        self.release.set()
        self.server.shutdown()


@pytest.fixture
def world():
    key, public = rsa_key("k1")
    provider = Provider([public])
    now = [1000.0]
    source = JwksSource(provider.url, clock=lambda: now[0], fetch_timeout=2.0)
    verifier = JwtVerifier(JwtSettings(jwks=provider.url, issuer=ISSUER, audience=AUDIENCE), source=source)
    yield key, provider, now, verifier
    provider.close()


def test_a_failing_provider_is_fetched_at_most_once_a_spacing_for_forged_kids(world):
    key, provider, now, verifier = world
    verifier.verify(token(key, "k1"))
    assert provider.fetches == 1
    now[0] += JWKS_REFETCH_SECONDS + 1
    provider.mode = "down"
    for i in range(20):
        with pytest.raises(TokenRejected):
            verifier.verify(token(key, f"made-up-{i}"))
    assert provider.fetches == 2  # one try for twenty forged kids, though it failed
    now[0] += JWKS_REFETCH_SECONDS + 1
    with pytest.raises(TokenRejected):
        verifier.verify(token(key, "made-up-again"))
    assert provider.fetches == 3


def test_cached_keys_serve_through_the_providers_outage(world):
    key, provider, now, verifier = world
    verifier.verify(token(key, "k1"))
    provider.mode = "down"
    now[0] += JWKS_TTL_SECONDS + 8  # the set is old: a refresh is tried, fails, the key serves
    assert verifier.verify(token(key, "k1")).person == "alice"
    assert provider.fetches == 2
    for _ in range(5):  # and the failed refresh is not tried again on every request
        assert verifier.verify(token(key, "k1")).person == "alice"
    assert provider.fetches == 2
    provider.mode = "ok"
    now[0] += JWKS_REFETCH_SECONDS + 1
    assert verifier.verify(token(key, "k1")).person == "alice"
    assert provider.fetches == 3


def test_a_token_with_a_cached_key_never_waits_for_a_hanging_fetch(world):
    key, provider, now, verifier = world
    verifier.verify(token(key, "k1"))
    now[0] += JWKS_REFETCH_SECONDS + 1
    provider.mode = "hang"
    forged = threading.Thread(target=lambda: pytest.raises(TokenRejected, verifier.verify, token(key, "new-kid")))
    forged.start()
    deadline = time.monotonic() + 5
    while provider.fetches < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert provider.fetches == 2  # the unknown kid's fetch is hanging now
    started = time.monotonic()
    assert verifier.verify(token(key, "k1")).person == "alice"
    assert time.monotonic() - started < 0.5
    provider.release.set()
    forged.join(10)


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"])
def test_an_rsa_key_declaring_no_algorithm_verifies_every_rsa_algorithm(alg, tmp_path):
    key, public = rsa_key("plain", alg=None)
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public]}))
    verifier = JwtVerifier(JwtSettings(jwks=str(path), issuer=ISSUER, audience=AUDIENCE))
    assert verifier.verify(token(key, "plain", alg)).person == "alice"
    declared_key, declared = rsa_key("pinned", alg="RS256")
    path.write_text(json.dumps({"keys": [declared]}))
    if alg != "RS256":  # a key that declares its algorithm takes no other
        with pytest.raises(TokenRejected, match="does not match"):
            verifier.verify(token(declared_key, "pinned", alg))


@pytest.mark.parametrize("answer", ["empty", "gone"])
def test_a_provider_that_withdraws_every_key_is_believed(world, answer):
    """An empty key set (or a key set URL answering 404) is the provider saying no key is good:
    not an outage, whose cached keys would have been accepted for ever."""
    key, provider, now, verifier = world
    verifier.verify(token(key, "k1"))
    provider.mode = answer
    now[0] += JWKS_TTL_SECONDS + 1
    with pytest.raises(TokenRejected, match="no key 'k1'"):
        verifier.verify(token(key, "k1"))
    now[0] += 7 * 24 * 3600
    with pytest.raises(TokenRejected):
        verifier.verify(token(key, "k1"))
