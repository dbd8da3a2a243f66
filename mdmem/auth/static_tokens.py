"""Static bearer tokens: a server-side JSON file that holds, per token, only a salted hash of
its secret with the person, agent label and capabilities it grants.

A token reads ``mdmem_<id>_<secret>``: the id finds its entry without trying every hash, the
secret is 32 random bytes. Because the secret is random (not a password a person chose), a
slow key-derivation function would add no strength against guessing, only CPU on every
request: the hash is HMAC-SHA256 keyed by the entry's own salt, compared in constant time.

Each token made by ``mdmem token add`` names the memory it was made for (its id,
storage/memory_id.py, and for people its path): one account's token file serves every memory that
account serves, and a token for bob in one memory was taken by a server over another that also
declares a bob. A token from before that (no memory named) is taken by any of them, as it was.

The file is read again whenever it changes (inode, size, mtime), so a revocation written by
``mdmem token revoke`` -- another process -- stops the token at the server's next request
without a restart. Writes replace the file atomically (a temporary file renamed over it) with
mode 0600, under a lock, so a reader never sees half a file and two CLI calls never lose one
another's change."""
from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput, NotFound
from ..model.clock import format_time, parse_time, resolve_now
from ..model.layout import check_name
from ..storage.locks import Lock
from .principal import CAPABILITIES, Principal, TokenRejected

PREFIX = "mdmem_"
FORMAT = 1


@dataclass(frozen=True)
class TokenEntry:
    id: str
    person: str
    agent: str
    capabilities: tuple[str, ...]
    created: str
    salt: str
    hash: str
    expires: str | None = None
    revoked: str | None = None
    memory: str | None = None  # where the memory it was made for was then (for people to read)
    memory_id: str | None = None  # that memory's id (what is checked); None: any (an older token)

    def public(self) -> dict[str, Any]:
        """What `mdmem token list` shows: everything but the salt and hash."""
        return {"id": self.id, "person": self.person, "agent": self.agent,
                "capabilities": list(self.capabilities), "created": self.created,
                "expires": self.expires, "revoked": self.revoked, "memory": self.memory,
                "memory_id": self.memory_id}

    def serves(self, memory_id: str | None) -> bool:
        """Whether a server over the memory ``memory_id`` takes this token (None: not said, any
        does; "": a server that cannot tell, which takes only tokens that name no memory)."""
        if memory_id == "":
            return self.memory_id is None
        return self.memory_id is None or memory_id is None or self.memory_id == memory_id


def memory_path(root: str | os.PathLike) -> str:
    """Where a token says its memory was (``root``, a repository's or a workspace's folder): its
    real path, the same whether reached through a link or a relative path."""
    return os.path.realpath(root)


def _digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode("utf-8"), hashlib.sha256).hexdigest()


def split_token(token: str) -> tuple[str, str] | None:
    """(id, whole token) of a static token's text, or None when it is not one."""
    if not token.startswith(PREFIX):
        return None
    rest = token[len(PREFIX):]
    token_id, sep, secret = rest.partition("_")
    if not sep or not token_id or not secret or len(token) > 200:
        return None
    return token_id, token


class TokenFile:
    """The token file at ``path`` (it may not exist yet: then no token verifies). ``memory_id``:
    the memory this process serves; a token made for another is refused."""

    def __init__(self, path: Path, *, memory_id: str | None = None, memory: str | None = None):
        self.path = Path(path)
        self.memory_id = memory_id
        self.memory = memory  # where it is (memory_path), for the log
        self._stamp: tuple[int, int, int] | None = None
        self._entries: dict[str, TokenEntry] = {}
        self._mutex = threading.Lock()

    # --- reading ---------------------------------------------------------------------
    def stamp(self) -> tuple[int, int, int] | None:
        """The file's (inode, size, mtime) now, None when absent: any write changes it (a write
        renames a new file over the old one), so what was verified against one stamp holds
        while the stamp does."""
        return self._current_stamp()

    def _current_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def entries(self) -> dict[str, TokenEntry]:
        """The file's entries as they are on disk now (re-read only when it changed)."""
        stamp = self._current_stamp()
        with self._mutex:
            if stamp != self._stamp:
                self._entries = self._load() if stamp is not None else {}
                self._stamp = stamp
            return self._entries

    def _load(self) -> dict[str, TokenEntry]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise BadInput(f"{self.path}: not a readable token file ({exc}); it is JSON written by "
                           "`mdmem token add`") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("tokens"), list):
            raise BadInput(f"{self.path}: not a token file of format {FORMAT} (a JSON object with \"format\": "
                           f"{FORMAT} and a \"tokens\" list)")
        out = {}
        for i, raw in enumerate(data["tokens"]):
            try:
                entry = TokenEntry(**{**raw, "capabilities": tuple(raw["capabilities"])})
            except (TypeError, KeyError) as exc:
                raise BadInput(f"{self.path}: tokens[{i}]: {exc}; each entry has id, person, agent, capabilities, "
                               "created, salt, hash (and expires, revoked, memory, memory_id)") from None
            out[entry.id] = entry
        return out

    def verify(self, token: str, *, now: _dt.datetime | None = None) -> Principal:
        """The principal ``token`` names, or TokenRejected saying why (for the server's log)."""
        parts = split_token(token)
        if parts is None:
            raise TokenRejected("not a static mdmem token")
        token_id, whole = parts
        entry = self.entries().get(token_id)
        if entry is None:
            raise TokenRejected(f"token {token_id[:16]}: no such token")
        if not hmac.compare_digest(_digest(entry.salt, whole), entry.hash):
            raise TokenRejected(f"token {token_id}: wrong secret")
        if entry.revoked:
            raise TokenRejected(f"token {token_id}: revoked at {entry.revoked}")
        if not entry.serves(self.memory_id):
            raise TokenRejected(f"token {token_id}: made for the memory {entry.memory_id} (then at {entry.memory}), "
                                f"not this one ({self.memory_id} at {self.memory})")
        when = resolve_now(now)
        expires_at = None
        if entry.expires:
            expiry = parse_time(entry.expires, field="expires")
            if expiry <= when:
                raise TokenRejected(f"token {token_id}: expired at {entry.expires}")
            expires_at = int(expiry.timestamp())
        return Principal(entry.person, entry.agent, frozenset(entry.capabilities), f"static:{token_id}",
                         expires_at=expires_at)

    # --- writing (mdmem token add / revoke) ----------------------------------------------
    def _write(self, real: Path, entries: dict[str, TokenEntry]) -> None:
        data = {"format": FORMAT, "tokens": [e.__dict__ for e in entries.values()]}
        tmp = real.with_name(f".{real.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, real)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(real.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)

    @contextmanager
    def _locked(self) -> Iterator[Path]:
        """The token file's lock held; yields the file to write. That is the file the path
        names through any links: ~/.config/mdmem is often a link into a dotfiles folder, and
        the lock's folder code (made for .git/mdmem-locks) replaced a link with an empty folder,
        every token and config.toml then gone; a linked file was replaced by a plain copy the
        server never read. The folder is made first: the default ~/.config/mdmem/ on a machine
        without ~/.config yet."""
        real = Path(os.path.realpath(self.path))
        lock = Lock(real.with_name(real.name + ".lock"), timeout=10)
        try:
            real.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock.acquire()
        except PermissionError as exc:
            raise BadInput(f"{real.parent}: this account may not write there ({exc.strerror}); give --tokens "
                           "a file in a folder it may write") from None
        try:
            yield real
        finally:
            lock.release()

    def add(self, person: str, agent: str, capabilities: frozenset[str], *, expires: str | None = None,
            memory_id: str | None = None, memory: str | None = None,
            now: _dt.datetime | None = None) -> tuple[TokenEntry, str]:
        """A new token: its entry and its secret (shown once; the file keeps only the hash).
        ``memory_id``: the one memory whose server takes it (None: any); ``memory``: its path."""
        check_name(person, "--person")
        check_name(agent, "--agent")
        unknown = set(capabilities) - set(CAPABILITIES)
        if unknown or not capabilities:
            raise BadInput(f"--allow: {sorted(capabilities)}; give some of {', '.join(CAPABILITIES)}")
        when = resolve_now(now)
        if expires is not None:
            expiry = parse_time(expires, field="--expires")
            if expiry <= when:
                raise BadInput(f"--expires: {expires} is not in the future")
            expires = format_time(expiry)
        with self._locked() as real:
            entries = dict(self._load())
            token_id = secrets.token_hex(6)
            while token_id in entries:
                token_id = secrets.token_hex(6)
            secret = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
            salt = secrets.token_hex(16)
            entry = TokenEntry(id=token_id, person=person, agent=agent,
                               capabilities=tuple(c for c in CAPABILITIES if c in capabilities),
                               created=format_time(when) or "", salt=salt, hash=_digest(salt, secret),
                               expires=expires, memory=memory, memory_id=memory_id)
            entries[token_id] = entry
            self._write(real, entries)
        return entry, secret

    def revoke(self, token_id: str, *, now: _dt.datetime | None = None) -> TokenEntry:
        """Mark a token revoked (kept, so the list shows who had it); the server refuses it
        from its next request on."""
        with self._locked() as real:
            entries = dict(self._load())
            entry = entries.get(token_id)
            if entry is None:
                known = ", ".join(sorted(entries)) or "none"
                raise NotFound(f"token {token_id}: no such token in {self.path} (ids: {known})")
            if not entry.revoked:
                entry = TokenEntry(**{**entry.__dict__, "revoked": format_time(resolve_now(now))})
                entries[token_id] = entry
                self._write(real, entries)
        return entry
