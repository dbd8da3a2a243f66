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


class JwksSource:
    """The key set, by kid, from a file (read again when it changes) or a URL (cached)."""

    def __init__(self, where: str, *, clock: Callable[[], float] = time.monotonic,
                 fetch_timeout: float = 5.0):
        self.where = where
        self._clock = clock
        self._timeout = fetch_timeout
        self._keys: dict[str, Any] = {}
        self._stamp: Any = None
        self._fetched_at: float | None = None
        self._mutex = threading.Lock()
        parts = urlsplit(where)
        self.is_url = parts.scheme in ("http", "https")
        if self.is_url and parts.scheme == "http" and parts.hostname not in LOOPBACK:
            raise BadInput(f"--jwt-jwks: {where}: fetch a key set over https (plain http only on the loopback)")
        if not self.is_url and not Path(where).is_file():
            raise BadInput(f"--jwt-jwks: {where}: no such file; give the JWKS file or its https URL")

    def key(self, kid: str | None) -> Any:
        with self._mutex:
            if self.is_url:
                now = self._clock()
                stale = self._fetched_at is None or now - self._fetched_at > JWKS_TTL_SECONDS
                missing = kid not in self._keys and (
                    self._fetched_at is None or now - self._fetched_at > JWKS_REFETCH_SECONDS)
                if stale or missing:
                    self._keys = self._parse(self._fetch())
                    self._fetched_at = now
            else:
                try:
                    st = Path(self.where).stat()
                    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                    if stamp != self._stamp:
                        self._keys = self._parse(Path(self.where).read_bytes())
                        self._stamp = stamp
                except OSError as exc:
                    raise TokenRejected(f"JWKS {self.where}: {exc}") from None
            if kid is None and len(self._keys) == 1:
                return next(iter(self._keys.values()))
            if kid not in self._keys:
                raise TokenRejected(f"no key {kid!r} in the JWKS {self.where}")
            return self._keys[kid]

    def _fetch(self) -> bytes:
        try:
            with httpx.Client(timeout=self._timeout, follow_redirects=False) as client:
                response = client.get(self.where)
        except httpx.HTTPError as exc:
            raise TokenRejected(f"JWKS {self.where}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200 or len(response.content) > JWKS_MAX_BYTES:
            raise TokenRejected(f"JWKS {self.where}: HTTP {response.status_code}, {len(response.content)} bytes")
        return response.content

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            keys = jwt.PyJWKSet.from_dict(json.loads(raw)).keys
        except (ValueError, jwt.PyJWTError) as exc:
            raise TokenRejected(f"JWKS {self.where}: not a usable key set ({exc})") from None
        return {k.key_id: k for k in keys if k.public_key_use in (None, "sig")}


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
        key = self.source.key(header.get("kid"))
        if key.algorithm_name and key.algorithm_name != alg:
            raise TokenRejected(f"JWT algorithm {alg} does not match key {key.key_id}'s {key.algorithm_name}")
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
