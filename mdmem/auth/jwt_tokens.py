"""JWT access tokens issued by an organisation's identity provider (RFC 9068 shape), verified
against the provider's JWKS: a file, or an https URL fetched and cached.

Checked on every token: the signature with a key of the JWKS (by ``kid``) and an asymmetric
algorithm only (never ``none`` or an HMAC one: a public key used as an HMAC secret would let
anyone sign), ``aud`` naming this server, ``iss`` the configured issuer, ``exp`` present and
not passed, ``nbf``/``iat`` not in the future (a small leeway for clocks). The person is the
configured claim; the agent label is the client the token was issued to (``client_id``, else
``azp``); capabilities are the scopes ``<prefix>read``, ``<prefix>write``, ``<prefix>delete``."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from ..errors import BadInput
from ..model.layout import check_name
from .principal import CAPABILITIES, Principal, TokenRejected

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
JWKS_TTL_SECONDS = 300.0  # a URL's key set is fetched again after this long
# An unknown kid fetches the set again (the provider rotated its keys), at most this often:
# forged tokens naming made-up kids must not make the server fetch on every request.
JWKS_REFETCH_SECONDS = 30.0
JWKS_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class JwtSettings:
    jwks: str  # a file path or an https URL
    issuer: str
    audience: str
    person_claim: str = "sub"
    scope_prefix: str = "mdmem:"
    leeway_seconds: int = 30


class _Outage(TokenRejected):
    """The key set could not be had (the provider unreachable or failing): not what it says."""


class JwksSource:
    """The key set, by kid, from a file (read again when it changes) or a URL (cached)."""

    def __init__(self, where: str, *, clock: Callable[[], float] = time.monotonic,
                 fetch_timeout: float = 5.0):
        self.where = where
        self._clock = clock
        self._timeout = fetch_timeout
        self._keys: dict[str, Any] = {}
        self._stamp: Any = None
        self._fetched_at: float | None = None  # the last fetch that gave a key set
        self._tried_at: float | None = None  # the last fetch begun, whatever came of it
        self._mutex = threading.Lock()  # guards the fields above; never held through a fetch
        self._fetching = threading.Lock()  # one fetch at a time
        parts = urlsplit(where)
        self.is_url = parts.scheme in ("http", "https")
        if self.is_url and parts.scheme == "http" and parts.hostname not in LOOPBACK:
            raise BadInput(f"--jwt-jwks: {where}: fetch a key set over https (plain http only on the loopback)")
        if not self.is_url and not Path(where).is_file():
            raise BadInput(f"--jwt-jwks: {where}: no such file; give the JWKS file or its https URL")

    def key(self, kid: str | None) -> tuple[Any, str | None]:
        """The key named ``kid`` (the only one, when none is named) and the algorithm it
        declares, if it does."""
        keys = self._url_keys(kid) if self.is_url else self._file_keys()
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        if kid not in keys:
            raise TokenRejected(f"no key {kid!r} in the JWKS {self.where}")
        return keys[kid]

    def _file_keys(self) -> dict[str, Any]:
        with self._mutex:
            try:
                st = Path(self.where).stat()
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                if stamp != self._stamp:
                    self._keys = self._parse(Path(self.where).read_bytes())
                    self._stamp = stamp
            except OSError as exc:
                raise TokenRejected(f"JWKS {self.where}: {exc}") from None
            return self._keys

    def _url_keys(self, kid: str | None) -> dict[str, Any]:
        """The key set, fetched again when older than JWKS_TTL_SECONDS or lacking ``kid`` (the
        provider rotated its keys), but tried at most every JWKS_REFETCH_SECONDS, failed or not:
        forged tokens naming made-up kids against a failing provider fetched it on every request.
        A token whose key is here never waits for a fetch another request is making (one
        hanging fetch held every JWT user, 5 s each in turn), and keys go on serving while
        the provider fails (its outage refused every valid token once the set was 5 minutes old)."""
        now = self._clock()
        with self._mutex:
            keys, fetched, tried = self._keys, self._fetched_at, self._tried_at
        have = kid in keys or (kid is None and len(keys) == 1)
        due = fetched is None or now - fetched > JWKS_TTL_SECONDS or not have
        if not due or (tried is not None and now - tried <= JWKS_REFETCH_SECONDS):
            return keys
        if not self._fetching.acquire(blocking=not have):
            return keys  # another request is fetching: this token's key is here meanwhile
        try:
            with self._mutex:
                if self._tried_at != tried:  # fetched (or tried) while this one waited its turn
                    return self._keys
                self._tried_at = self._clock()
            try:
                fresh = self._parse(self._fetch())
            except _Outage:
                if have:
                    return keys  # the provider is down: what it said last still holds
                raise
            with self._mutex:
                self._keys, self._fetched_at = fresh, self._clock()
            return fresh
        finally:
            self._fetching.release()

    def _fetch(self) -> bytes:
        """The key set's bytes. Not reaching the provider, or its 5xx, is an outage (the keys
        it gave last stay); any other answer is what it says now: a 404 or 410 withdraws every
        key, as an empty set does (withdrawn keys were kept for ever as if it were down)."""
        try:
            with httpx.Client(timeout=self._timeout, follow_redirects=False) as client:
                response = client.get(self.where)
        except httpx.HTTPError as exc:
            raise _Outage(f"JWKS {self.where}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 500:
            raise _Outage(f"JWKS {self.where}: HTTP {response.status_code}")
        if response.status_code in (404, 410):
            return b'{"keys": []}'
        if response.status_code != 200 or len(response.content) > JWKS_MAX_BYTES:
            raise _Outage(f"JWKS {self.where}: HTTP {response.status_code}, {len(response.content)} bytes")
        return response.content

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw)
            if isinstance(data, dict) and data.get("keys") == []:
                return {}  # every key withdrawn (PyJWKSet refuses an empty set)
            keys = jwt.PyJWKSet.from_dict(data).keys
        except (ValueError, jwt.PyJWTError) as exc:
            raise TokenRejected(f"JWKS {self.where}: not a usable key set ({exc})") from None
        # The algorithm a key declares ("alg"), else None: PyJWK takes RS256 for an RSA key
        # that declares none, and PS256 or RS384 tokens signed with it were refused.
        declared = {k.get("kid"): k.get("alg") for k in json.loads(raw).get("keys", []) if isinstance(k, dict)}
        return {k.key_id: (k, declared.get(k.key_id)) for k in keys if k.public_key_use in (None, "sig")}


class JwtVerifier:
    def __init__(self, settings: JwtSettings, *, source: JwksSource | None = None):
        if not settings.issuer or not settings.audience:
            raise BadInput("--jwt-issuer and the audience (--jwt-audience, default the server's public URL) "
                           "are both needed to accept JWT access tokens")
        self.settings = settings
        self.source = source or JwksSource(settings.jwks)

    def verify(self, token: str) -> Principal:
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"not a JWT ({exc})") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise TokenRejected(f"JWT algorithm {alg!r} not accepted (only {', '.join(ALGORITHMS)})")
        key, declared = self.source.key(header.get("kid"))
        if declared and declared != alg:
            raise TokenRejected(f"JWT algorithm {alg} does not match key {key.key_id}'s {declared}")
        try:
            claims = jwt.decode(token, key.key, algorithms=[alg], audience=s.audience, issuer=s.issuer,
                                leeway=s.leeway_seconds,
                                options={"require": ["exp", "iss", "aud"], "verify_iat": True})
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"JWT rejected: {type(exc).__name__}: {exc}") from None
        iat = claims.get("iat")
        if isinstance(iat, (int, float)) and iat > time.time() + s.leeway_seconds:
            raise TokenRejected("JWT rejected: issued in the future (iat)")
        person = claims.get(s.person_claim)
        if not isinstance(person, str) or not person:
            raise TokenRejected(f"JWT has no {s.person_claim!r} claim naming the person")
        agent = claims.get("client_id") or claims.get("azp")
        if not isinstance(agent, str) or not agent:
            raise TokenRejected("JWT names no client (client_id or azp): the agent label of its writes")
        raw_scope = claims.get("scope", claims.get("scp", ""))
        scopes = raw_scope.split() if isinstance(raw_scope, str) else list(raw_scope or [])
        caps = frozenset(c for c in CAPABILITIES if f"{s.scope_prefix}{c}" in scopes)
        if not caps:
            raise TokenRejected(f"JWT grants none of the scopes {', '.join(s.scope_prefix + c for c in CAPABILITIES)}")
        try:
            check_name(person, s.person_claim)
            label = check_name(agent, "client_id")
        except BadInput as exc:
            raise TokenRejected(f"JWT: {exc}") from None
        # One id for every token the provider issues to this client for this person: the rate
        # limit must not start afresh with each short-lived token.
        token_id = f"jwt:{s.issuer}:{person}:{label}"
        return Principal(person, label, caps, token_id, expires_at=int(claims["exp"]))
