"""MemoryRepo: the operations, wiring layout, access, the gate and git together."""
from __future__ import annotations

import datetime as _dt
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ulid import ULID

from .model import layout
from .policy.access import Access, not_visible, require_user
from .model.clock import add_span, format_time, parse_duration, parse_time, resolve_now
from .model.text import check_unicode
from .config import CONFIG_NAME, Config, UserConfig, check_backend, check_fusion, render_config
from .model.kinds import SUMMARY_KEY, Contract
from .errors import BadInput, Conflict, MdmemError, NotFound, NoteInvalid, Refused
from .policy import gate
from .policy.gate import AGENT, HUMAN, check_key_reuse, judge_source
from .errors import BranchMoved
from .storage.gitstore import GitStore, Trailers, parse_trailers
from .storage.queries import blob_hash
from .model.note import Note, check_source, parse_note
from .storage.worktree import StoredNote, live_in_dir, read_note, scan_notes
from .results import BatchResult, KeyInfo, ProgressCallback, ReviewItem, SweepResult, Version, WriteResult
from .template import read_template

REVIEW_PREFIX = "review/"
REVIEW_AUDIT_PATH = "audit/reviews.jsonl"
# What one item of remember_many may hold: remember's arguments.
_ITEM_FIELDS = {"text", "kind", "subject", "key", "scope", "team", "owner", "source", "ttl", "valid_from",
                "new_key", "expect_version", "derived_from", "context"}
_WRITE_RETRIES = 3


@dataclass
class _Pending:
    """A write the gate has accepted, ready to commit."""

    path: str
    note: Note
    op: str
    superseded: str | None
    extra_trailers: tuple[tuple[str, str], ...] = field(default_factory=tuple)


class MemoryRepo:
    """A memory repository: notes in git, kinds, scopes, the write gate and history."""

    def __init__(self, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
                 user_config: UserConfig | None = None, finish_erasure: bool = True):
        """Open the memory repo at ``path`` (same as :meth:`open`). ``embedder`` and ``fusion``
        override ``mdmem.toml`` ([embedder] backend, [recall] fusion) for this process; the
        library never reads them from the environment (the CLI does, MDMEM_EMBEDDER/MDMEM_FUSION).
        ``user_config`` is the acting person's own configuration (where note text may be sent,
        with which secret; the signing key): never taken from the repo.
        An erasure a crash interrupted is finished first, under the lock: no command sees a
        half-erased repository (``finish_erasure=False`` is for `forget --resume` itself)."""
        from .erasure.journal import pending

        root = Path(path)
        config = Config.load(root)
        if not (root / ".git").exists():
            raise BadInput(f"{root}: not a git repository")
        if embedder is not None:
            config.embedder.backend = check_backend(embedder, where="embedder")
        if fusion is not None:
            config.fusion = check_fusion(fusion, where="fusion")
        self.root = root
        self.config = config
        self.user_config = user_config or UserConfig()
        self.store = GitStore(root, config.identity)
        self.store.signing_key = self.user_config.signing_key
        if self.store.pending_path.exists():
            # A write was cut short after its commit (a kill, a stale index.lock): bring the
            # work tree and git's index in line now. Busy? The writer holding it repairs.
            try:
                with self.store.locked(timeout=0.5):
                    pass
            except Conflict:
                pass
        self.access = Access(config.teams, config.erasers)
        self.contracts = config.contracts
        self._trust = None
        self._index = None
        self._recall = None
        self._meta_cache = None
        self._root_blobs = None
        if finish_erasure and pending(self.root):
            self.finish_erasure()

    # --- opening --------------------------------------------------------------------
    @classmethod
    def init(cls, path, *, teams: dict[str, list[str]] | None = None, erasers: list[str] | None = None,
             as_user: str, now=None, embedder: str | None = None,
             fusion: str | None = None) -> "MemoryRepo":
        """A new memory repo in an empty folder; ``as_user`` (required) is who made it."""
        as_user = require_user(as_user)
        root = Path(path)
        if (root / CONFIG_NAME).exists():
            raise BadInput(f"{root}: already a memory repo ({CONFIG_NAME} exists); nothing changed")
        if (root / ".git").exists():
            raise BadInput(f"{root}: already a git repository; mdmem init makes a new one")
        if root.exists() and any(root.iterdir()):
            raise BadInput(f"{root}: folder is not empty; give mdmem init an empty or new folder")
        from . import hooks

        teams = teams or {}
        files = {
            CONFIG_NAME: render_config(teams, erasers).encode(),
            "README.md": read_template("README.md").encode(),
            "MEMORY.md": read_template("MEMORY.md").encode(),
            ".gitignore": read_template("gitignore").encode(),
            **hooks.committed_files(),
        }
        root.mkdir(parents=True, exist_ok=True)
        when = resolve_now(now)
        GitStore.init(root, files, actor=as_user, when=when, executable=hooks.EXECUTABLE,
                      message="mdmem init\n\n" + Trailers("init", as_user, "system:init").render())
        # The hooks travel with the repo (committed); this clone uses them from now on.
        hooks.configure(root, sys.executable)
        repo = cls.open(root, embedder=embedder, fusion=fusion)
        repo.render(as_user=as_user, now=when)
        return repo

    @classmethod
    def open(cls, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
             user_config: UserConfig | None = None, finish_erasure: bool = True) -> "MemoryRepo":
        """The memory repo at ``path``; ``with MemoryRepo.open(path) as repo:`` closes it."""
        return cls(path, embedder=embedder, fusion=fusion, user_config=user_config, finish_erasure=finish_erasure)

    def __enter__(self) -> "MemoryRepo":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def find(cls, start: str | Path | None = None, *, embedder: str | None = None,
             fusion: str | None = None, user_config: UserConfig | None = None,
             finish_erasure: bool = True) -> "MemoryRepo":
        """The memory repo at or above ``start`` (the current folder by default)."""
        here = Path(start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).exists():
                return cls.open(folder, embedder=embedder, fusion=fusion, user_config=user_config,
                                finish_erasure=finish_erasure)
        raise BadInput(f"{here}: not inside a memory repo (no {CONFIG_NAME} here or above); "
                       "pass --repo PATH or set MDMEM_REPO")

    # --- helpers --------------------------------------------------------------------
    def _root_for(self, user: str, scope: str, team: str | None, owner: str | None) -> str:
        if scope == "private":
            return layout.scope_root("private", owner=owner or user)
        return layout.scope_root(scope, team=team)

    def _path_for(self, root: str, contract: Contract, subject: str, key: str | None,
                  when: _dt.datetime, text: str) -> str:
        if contract.keyed:
            return layout.keyed_path(root, subject, contract.name, key)
        slug = layout.check_key(key) if key else f"{layout.slugify(text)}-{str(ULID())[-6:].lower()}"
        return layout.episode_path(root, subject, when, slug)

    def _read(self, path: str) -> StoredNote | None:
        return read_note(self.root, path, self.contracts, max_bytes=self.config.note_max_bytes)

    def _visible_stored(self, user: str, path: str) -> StoredNote:
        self.access.visible_root(user, path)  # the path is checked before any file is touched
        stored = self._read(path)
        if stored is None:
            raise not_visible(path, user)
        return stored

    # --- trust --------------------------------------------------------------------
    @property
    def trust(self):
        """Who committed each note (:mod:`mdmem.policy.verify`)."""
        if self._trust is None:
            from .policy.verify import Verifier
            self._trust = Verifier(self)
        return self._trust

    def verify(self) -> dict:
        """Every note whose latest commit was not made by a permitted writer of its root, or whose
        frontmatter disagrees with its path, with the reason (``mdmem verify``)."""
        return self.trust.report()

    def untrusted(self, path: str) -> str | None:
        """Why the committed note at ``path`` is not trusted, or None."""
        flag = self.trust.flags().get(path)
        return flag.detail if flag is not None else None

    # --- writing --------------------------------------------------------------------
    def remember(self, text: str, *, as_user: str, kind: str, subject: str, key: str | None = None,
                 scope: str | None = None, team: str | None = None, owner: str | None = None,
                 source: str = "user", ttl=None, valid_from=None, new_key: bool = False,
                 expect_version: str | None = None, derived_from: list[str] | None = None,
                 context: str | None = None, now=None, channel: str = HUMAN,
                 claimed_source: str | None = None) -> WriteResult:
        """Write one note through the gate: committed, held for review, or refused (raised).

        ``channel`` is who is at the other end: a person (CLI, API) or an agent (the MCP server,
        which passes ``source="agent:<name>"`` and the source the agent claimed, if any)."""
        user = require_user(as_user)
        when = resolve_now(now)
        path, note, contract, provenance = self._draft(
            user, text, kind=kind, subject=subject, key=key, scope=scope, team=team, owner=owner, source=source,
            ttl=ttl, valid_from=valid_from, derived_from=derived_from, channel=channel,
            claimed_source=claimed_source, when=when, context=context)
        if not provenance.trusted:
            with self.store.locked():
                pending = self._prepare(user, path, note, contract, new_key=new_key,
                                        expect_version=expect_version, now=when)
                return self._hold(user, path, pending.note, provenance.reason, when, channel=channel,
                                  new_key=new_key, expect_version=expect_version, claimed_source=claimed_source)
        extra = (("Memory-Claimed-Source", claimed_source),) if claimed_source else ()
        def prepare():
            pending = self._prepare(user, path, note, contract, new_key=new_key,
                                    expect_version=expect_version, now=when)
            pending.extra_trailers = extra
            return pending

        return self._commit_pending(user, when, prepare)

    def _draft(self, user: str, text: str, *, kind: str, subject: str, key: str | None, scope: str | None,
               team: str | None, owner: str | None, source: str, ttl, valid_from, derived_from, when: _dt.datetime,
               channel: str = HUMAN, claimed_source: str | None = None, context: str | None = None):
        """The note a write would store, its path, its contract and the provenance verdict;
        raises on bad input or a scope the user may not write (remember and remember_many)."""
        scope = layout.default_scope(scope, team)
        contract = self.contracts.resolve(kind)
        layout.check_subject(subject)
        check_source(source)
        if channel not in (HUMAN, AGENT):
            raise BadInput(f"channel: {channel!r}; use {HUMAN!r} or {AGENT!r}")
        if channel == AGENT and not gate.is_agent_source(source):
            raise BadInput(f"source: a write over the agent channel is recorded as agent:<name>, not {source!r}")
        if claimed_source is not None:
            check_source(claimed_source)
        if not isinstance(text, str) or not text.strip():
            raise BadInput("text: a note needs text")
        check_unicode(text, "text")
        if contract.keyed and not key and contract.name != "summary":
            raise BadInput(f"key: kind {contract.name} is keyed; pass a key (like deploy.window)")
        if contract.name == "summary":
            key = key or SUMMARY_KEY
        start = parse_time(valid_from, field="valid_from") if valid_from is not None else when
        ttl_delta = parse_duration(ttl) if ttl is not None else contract.default_ttl
        if channel == AGENT and ttl is not None:
            gate.check_agent_ttl(ttl_delta, contract, self.config.trust.agent_max_ttl)
        root = self._root_for(user, scope, team, owner)
        path = self._path_for(root, contract, subject, key, start, text)
        note = Note(id=str(ULID()), kind=contract.name, subject=subject, key=key, scope=scope,
                    team=team if scope == "team" else None, owner=user, source=source,
                    valid_from=start, expires_at=add_span(start, ttl_delta) if ttl_delta else None,
                    derived_from=tuple(derived_from or ()), text=text.strip(), context=context)
        size = len(note.dumps().encode())
        if size > self.config.note_max_bytes:
            raise BadInput(f"text: the note would be {size} bytes; a note is at most "
                           f"{self.config.note_max_bytes} bytes ([notes] max_bytes in mdmem.toml)")
        # Write permission is checked before provenance: a hold never bypasses scope.
        self.access.check_write(user, root)
        return path, note, contract, judge_source(source, contract, self.config.trust.sources,
                                                  self.config.trust.agent_kinds)

    def remember_many(self, items, *, as_user: str, now=None, new_key: bool = False, batch_size: int = 1000,
                      progress: ProgressCallback | None = None) -> BatchResult:
        """Write many notes through the gate and make them searchable: each item is a dict of
        :meth:`remember`'s arguments (``text``, ``kind``, ``subject``, ...; ``line`` names it in
        reports). One commit per batch with the views rendered once; held items go to review
        one by one, refused ones are reported with their line and reason, nothing else stops.
        A path written twice starts a new batch, so every version stays in history.
        ``progress(done, total, what)`` is called as batches commit and vectors are made."""
        user = require_user(as_user)
        when = resolve_now(now)
        items = list(items)
        result = BatchResult()
        batch: list[tuple] = []
        in_batch: set[str] = set()  # the batch's paths
        for n, item in enumerate(items, 1):
            item = dict(item)
            line = item.pop("line", n)
            try:
                fields = {"new_key": new_key, **item}
                unknown = set(fields) - _ITEM_FIELDS
                if unknown:
                    raise BadInput(f"{', '.join(sorted(unknown))}: not a field of a note to remember "
                                   f"(use {', '.join(sorted(_ITEM_FIELDS))})")
                expect = fields.pop("expect_version", None)
                item_new_key = bool(fields.pop("new_key"))
                text = fields.pop("text", None)
                if "kind" not in fields or "subject" not in fields:
                    raise BadInput("kind, subject: every item needs both")
                drafted = self._draft(user, text, when=when, **{"key": None, "scope": "private", "team": None,
                                                               "owner": None, "source": "user", "ttl": None,
                                                               "valid_from": None, "derived_from": None, **fields})
            except MdmemError as exc:
                result.refused.append({"line": line, "reason": str(exc), "exit_code": exc.exit_code})
                continue
            if drafted[0] in in_batch:
                self._write_batch(user, batch, when, result)  # the earlier version gets its own commit
                batch, in_batch = [], set()
            batch.append((line, *drafted, item_new_key, expect))
            in_batch.add(drafted[0])
            if len(batch) >= batch_size:
                self._write_batch(user, batch, when, result)
                batch, in_batch = [], set()
                if progress:
                    progress(n, len(items), "writing notes")
        self._write_batch(user, batch, when, result)
        if progress:
            progress(len(items), len(items), "writing notes")
        result.index = self.index.sync(progress=progress).to_dict()
        return result

    def _write_batch(self, user: str, batch: list[tuple], when: _dt.datetime, result: BatchResult) -> None:
        """One commit for the batch's accepted items (under the lock, CAS retried); holds and
        refusals recorded in ``result``."""
        if not batch:
            return
        for attempt in range(_WRITE_RETRIES):
            with self.store.locked():
                live: dict[str, set[str]] = {}

                def live_keys(folder: str, live: dict[str, set[str]] = live) -> set[str]:  # this attempt's
                    if folder not in live:
                        live[folder] = {s.note.key for s in live_in_dir(self.root, folder, self.contracts, when,
                                                                        max_bytes=self.config.note_max_bytes)}
                    return live[folder]

                accepted, held, refused = [], [], []
                for line, path, note, contract, provenance, item_new_key, expect in batch:
                    try:
                        pending = self._prepare(user, path, note, contract, new_key=item_new_key,
                                                expect_version=expect, now=when, live_keys=live_keys)
                    except MdmemError as exc:
                        refused.append({"line": line, "path": path, "reason": str(exc), "exit_code": exc.exit_code})
                        continue
                    if contract.keyed and pending.note.key:
                        live_keys(layout.kind_dir(layout.parse_path(path).root, note.subject,
                                                  contract.name)).add(pending.note.key)
                    if provenance.trusted:
                        accepted.append((line, pending, provenance))
                    else:
                        held.append((line, pending, provenance, item_new_key, expect))
                commit = None
                if accepted:
                    sources = sorted({p.note.source for _, p, _ in accepted})
                    message = (f"import {len(accepted)} note(s)\n\n"
                               + Trailers("import", user, sources[0] if len(sources) == 1 else "mixed").render())
                    try:
                        commit = self.commit_changes({p.path: p.note.dumps().encode() for _, p, _ in accepted},
                                                      message, actor=user, when=when)
                    except BranchMoved:
                        if attempt == _WRITE_RETRIES - 1:
                            raise
                        continue
                holds = [(line, self._hold(user, p.path, p.note, prov.reason, when, channel=HUMAN,
                                           new_key=new, expect_version=expect, claimed_source=None))
                         for line, p, prov, new, expect in held]
            break
        self._after_write()
        if commit:
            result.commits.append(commit)
        result.committed += [{"line": line, "path": p.path, "op": p.op, "commit": commit} for line, p, _ in accepted]
        result.held += [{"line": line, "path": r.path, "review_id": r.review_id, "reason": r.reason}
                        for line, r in holds]
        result.refused += refused

    def _prepare(self, user: str, path: str, note: Note, contract: Contract, *, new_key: bool,
                 expect_version: str | None, now: _dt.datetime, op: str | None = None,
                 live_keys=None) -> _Pending:
        """The gate's checks against the current state; call under the lock. ``live_keys``
        (folder -> live keys) lets a batch read each folder once and count its own notes."""
        loc = layout.parse_path(path)
        self.access.check_write(user, loc.root)
        current = self._read_for_write(path)
        head_version = self.store.blob_id(path) if self.store.head() else None
        gate.check_clean(path, current.version if current is not None else None, head_version)
        gate.check_append_only(path, contract, current is not None)
        gate.check_expected_version(path, expect_version, head_version)
        # Only a new key without new_key=True needs the folder's live keys.
        if contract.keyed and contract.name != "summary" and current is None and not new_key:
            folder = layout.kind_dir(loc.root, note.subject, contract.name)
            live = (list(live_keys(folder)) if live_keys is not None else
                    [s.note.key for s in live_in_dir(self.root, folder, self.contracts, now,
                                                     max_bytes=self.config.note_max_bytes)])
            check_key_reuse(note.key, live, new_key=new_key,
                            what=f"{note.subject} {contract.name} in {loc.root}")
        if note.derived_from or contract.name == "summary":
            self._check_derivation(loc.root, note)
        if current is not None:
            # The note keeps its id, and the fields editors added (tags, aliases...).
            note = note.evolve(id=current.note.id, extra={**current.note.extra, **note.extra})
        return _Pending(path, note, op or ("supersede" if current is not None else "create"),
                        current.version if current is not None else None)

    def _read_for_write(self, path: str) -> StoredNote | None:
        try:
            return self._read(path)
        except NoteInvalid as exc:
            raise Conflict(f"{exc}; fix the note by hand (mdmem check) before writing over it") from None

    def _check_derivation(self, root: str, note: Note) -> None:
        ids = set(note.derived_from)
        found: dict[str, str] = {}
        if ids:
            for stored in self._all_notes():
                if stored.note.id in ids:
                    found[stored.note.id] = stored.root
        gate.check_derivation(self.access, root, ids, found)

    def _all_notes(self) -> list[StoredNote]:
        return scan_notes(self.root, self.contracts, max_bytes=self.config.note_max_bytes)[0]

    def _commit_pending(self, user: str, when: _dt.datetime, prepare, *, op: str | None = None,
                        evidence: tuple[str, ...] = ()) -> WriteResult:
        for attempt in range(_WRITE_RETRIES):
            with self.store.locked():
                pending = prepare()
                message = self._message(pending, user, op or pending.op, evidence)
                data = pending.note.dumps().encode()
                try:
                    commit = self.commit_changes({pending.path: data}, message, actor=user, when=when)
                except BranchMoved:
                    if attempt == _WRITE_RETRIES - 1:
                        raise
                    continue
                # Acknowledged: nothing from here may raise (the version is the blob we wrote).
                self._after_write()
                version = blob_hash(data)
                return WriteResult("committed", pending.path, commit=commit, version=version,
                                   superseded=pending.superseded, note_id=pending.note.id)
        raise AssertionError("unreachable")

    def _message(self, pending: _Pending, user: str, op: str, evidence: tuple[str, ...]) -> str:
        n = pending.note
        ident = f"{n.subject}/{n.key}" if n.key else f"{n.subject} {pending.path.rsplit('/', 1)[-1]}"
        trailers = Trailers(op, user, n.source, evidence or tuple(n.derived_from), pending.extra_trailers)
        return f"remember {n.kind} {ident}\n\n{trailers.render()}"

    def _after_write(self) -> None:
        self.store.maybe_gc()  # never raises

    # --- MEMORY views ---------------------------------------------------------------
    @property
    def _meta(self):
        if self._meta_cache is None:
            from .views.render import MetaCache
            self._meta_cache = MetaCache(self.root / ".mdmem" / "viewmeta.sqlite")
        return self._meta_cache

    @property
    def views(self):
        """Renders views from git trees; shares the per-root entries kept across writes. Notes
        whose latest commit no permitted writer made stay out of views (trust's flags)."""
        from .views.fresh import Views
        from .views.render import RootEntries

        if self._root_blobs is None:
            self._root_blobs = RootEntries(self.store, self._meta)
        return Views(self.store, self._root_blobs, self.config, flags=lambda rev: set(self.trust.flags(rev)))

    def scope_view(self, root: str, now=None, *, overlay: dict[str, bytes | None] | None = None,
                   max_lines: int | None = None, max_bytes: int | None = None) -> str:
        """One scope root's MEMORY view at HEAD with ``overlay`` (path -> bytes, None deleted)
        applied as if committed: the committed view (a function of the notes) without ``now``,
        the entries live at ``now`` with it (startup)."""
        return self.views.scope_view(root, self.store.head(), overlay or {},
                                     now=resolve_now(now) if now is not None else None,
                                     max_lines=max_lines, max_bytes=max_bytes)

    def _views_for(self, changes: dict[str, bytes | None], when: _dt.datetime | None = None) -> dict[str, bytes | None]:
        """The scope views a change alters, regenerated to go into the same commit."""
        from .views.fresh import changed, touched_roots

        head = self.store.head()
        return changed(self.store, head, self.views.for_roots(touched_roots(changes), head, changes))

    def fresh_view_changes(self) -> dict[str, bytes | None]:
        """Every view (and the root guide) as a fresh render of HEAD would have it, where it differs."""
        from .views.fresh import changed

        head = self.store.head()
        return changed(self.store, head, self.views.expected(head))

    def stale_views(self) -> list[str]:
        """Views committed at HEAD that differ from a fresh render of HEAD (`mdmem check`)."""
        head = self.store.head()
        return self.views.stale(head) if head else []

    def commit_changes(self, changes: dict[str, bytes | None], message: str, *, actor: str,
                       when: _dt.datetime, author: tuple[str, str] | None = None) -> str:
        """Commit note changes with the views they alter (call under the lock)."""
        views = self._views_for(changes, when)
        parent = self.store.head()
        email = (author or self.config.identity(actor))[1]
        commit = self.store.commit({**changes, **views}, message, actor=actor, when=when, author=author)
        if self._root_blobs is not None:
            try:
                self._root_blobs.committed(commit)
            except Exception:  # noqa: BLE001 -- committed already; a cold cache is only slower
                self._root_blobs = None
        try:
            self.trust.committed(commit, parent, changes, email)
        except Exception:  # noqa: BLE001 -- committed already; the verifier catches up from git
            self._trust = None
        return commit

    def render(self, *, as_user: str, now=None) -> dict:
        """Regenerate the root MEMORY.md and every scope view in one commit."""
        user = require_user(as_user)
        when = resolve_now(now)
        with self.store.locked():
            changes = self.fresh_view_changes()
            if not changes:
                return {"commit": None, "views": []}
            message = "render MEMORY views\n\n" + Trailers("render", user, "system:render").render()
            commit = self.store.commit(changes, message, actor=user, when=when)
        return {"commit": commit, "views": sorted(changes)}

    def startup(self, *, as_user: str, now=None) -> str:
        """The view one user starts from: the root guide, their teams and their private scope,
        composed within the budget. Carries only what this user may see."""
        from .views.render import render_root

        user = require_user(as_user)
        when = resolve_now(now)
        guide = render_root(self.config)
        roots = self.access.readable_roots(user)
        lines_left = max(40, self.config.view_max_lines - guide.count("\n"))
        bytes_left = max(4000, self.config.view_max_bytes - len(guide.encode()))
        parts = [guide]
        for root in roots:
            parts.append(self.scope_view(root, when, max_lines=max(20, lines_left // len(roots)),
                                          max_bytes=max(2000, bytes_left // len(roots))))
        return f"# Startup view for {user}\n\n" + "\n".join(parts)

    # --- review hold ----------------------------------------------------------------
    def _hold(self, user: str, path: str, note: Note, reason: str, when: _dt.datetime, *, channel: str,
              new_key: bool, expect_version: str | None, claimed_source: str | None) -> WriteResult:
        review_id = str(ULID()).lower()[-10:]
        branch = f"refs/heads/{REVIEW_PREFIX}{review_id}"
        base = self.store.head()
        # Everything the write asked for is kept with it, so approving it replays the same write.
        extra = [("Memory-Hold-Reason", reason), ("Memory-Channel", channel)]
        if new_key:
            extra.append(("Memory-New-Key", "true"))
        if expect_version:
            extra.append(("Memory-Expect-Version", expect_version))
        if claimed_source:
            extra.append(("Memory-Claimed-Source", claimed_source))
        trailers = Trailers("hold", user, note.source, extra=tuple(extra))
        message = f"hold {note.kind} {note.subject}/{note.key or path.rsplit('/', 1)[-1]}\n\n{trailers.render()}"
        # The held commit sits on main's tip in a branch of its own, out of the work tree.
        self.store.create_branch(REVIEW_PREFIX + review_id, base)
        commit = self.store.commit({path: note.dumps().encode()}, message, actor=user, when=when,
                                   branch=branch, worktree=False)
        return WriteResult("held", path, commit=commit, review_id=review_id, reason=reason, note_id=note.id)

    def review_list(self, *, as_user: str) -> list[ReviewItem]:
        user = require_user(as_user)
        items = []
        for name in self.store.branches(REVIEW_PREFIX):
            item = self._review_item(name[len(REVIEW_PREFIX):])
            if item and self.access.may_read_root(user, layout.parse_path(item.path).root):
                items.append(item)
        return items

    def _review_item(self, review_id: str) -> ReviewItem | None:
        tip = self.store.branch_commit(REVIEW_PREFIX + review_id)
        if tip is None or parse_trailers(tip.message).get("op") != "hold" or not tip.notes:
            return None
        path, blob = next(iter(tip.notes.items()))
        note = parse_note(path, self.store.read_blob(blob))
        t = parse_trailers(tip.message)
        # The writer is who made the hold commit (its author identity), not what its trailer says.
        author = self.config.committer(tip.author_email) or ""
        actor = t.get("actor", "")
        writer = author if author == actor else (author or actor)
        channel = AGENT if t.get("channel") == AGENT and author == actor else HUMAN
        return ReviewItem(review_id, path, note, writer, t.get("hold-reason", ""), tip.commit, channel=channel,
                          new_key=t.get("new-key") == "true", expect_version=t.get("expect-version") or None,
                          claimed_source=t.get("claimed-source") or None)

    def _review_or_missing(self, user: str, review_id: str) -> ReviewItem:
        item = self._review_item(review_id)
        if item is None or not self.access.may_read_root(user, layout.parse_path(item.path).root):
            raise NotFound(f"review {review_id}: no held write with that id visible to {user}")
        return item

    def approve(self, review_id: str, *, as_user: str, new_key: bool = False, now=None) -> WriteResult:
        """A person approves a held write: it is committed to main through the gate's other checks,
        with the arguments it was held with (new_key, expect_version). Not the writer's own
        (unless ``[review] self_approve``); the MCP server offers no way to approve."""
        user = require_user(as_user)
        item = self._review_or_missing(user, review_id)
        root = layout.parse_path(item.path).root
        gate.check_approver(user, item.actor, item.channel, self_approve=self.config.self_approve, root=root,
                            readers=self.access.readers_of_root(root))
        contract = self.contracts.resolve(item.note.kind)
        when = resolve_now(now)

        def prepare():
            pending = self._prepare(user, item.path, item.note, contract, new_key=new_key or item.new_key,
                                    expect_version=item.expect_version, now=when)
            extra = [("Memory-Approved-By", user), ("Memory-Review", review_id)]
            if item.claimed_source:
                extra.append(("Memory-Claimed-Source", item.claimed_source))
            pending.extra_trailers = tuple(extra)
            return pending

        result = self._commit_pending(item.actor or user, when, prepare, op="approve",
                                      evidence=(item.commit,))
        self.store.delete_branch(REVIEW_PREFIX + review_id)
        return result

    def reject(self, review_id: str, *, as_user: str, now=None) -> ReviewItem:
        """Drop a held write. The audit log records who rejected which review and when (never
        the content), in the same kind of commit as every other change."""
        user = require_user(as_user)
        item = self._review_or_missing(user, review_id)
        root = layout.parse_path(item.path).root
        self.access.check_write(user, root)
        when = resolve_now(now)
        record = {"op": "reject", "review_id": review_id, "by": user, "at": format_time(when), "root": root,
                  "held_commit": item.commit}
        with self.store.locked():
            head = self.store.head()
            log = (self.store.read_at(REVIEW_AUDIT_PATH, head) if head else None) or b""
            line = (json.dumps(record, sort_keys=True) + "\n").encode()
            message = (f"reject review {review_id}\n\n"
                       + Trailers("reject", user, "user", (item.commit,), (("Memory-Review", review_id),)).render())
            self.store.commit({REVIEW_AUDIT_PATH: log + line}, message, actor=user, when=when)
            self.store.delete_branch(REVIEW_PREFIX + review_id)
        return item

    # --- the index and recall ---------------------------------------------------------
    @property
    def index(self):
        """The disposable cache beside the notes (created on first use)."""
        if self._index is None:
            from .search.note_index import NoteIndex
            self._index = NoteIndex(self)
        return self._index

    def reindex(self, *, rebuild: bool = False, progress: ProgressCallback | None = None):
        """Catch the index up with the notes (or rebuild it from them)."""
        if rebuild:
            return self.index.rebuild(progress=progress)
        return self.index.sync(worktree=True, progress=progress)

    def recall(self, query: str, *, as_user: str, k: int = 5, kinds: list[str] | None = None,
               subject: str | None = None, key: str | None = None, at=None, include_history: bool = False,
               now=None, tags: list[str] | None = None):
        """Live notes the user may see that answer ``query``, best first (see :mod:`mdmem.search.recall`).
        ``tags``: only notes whose frontmatter ``tags`` include every one of them."""
        from .search.recall import Recall

        if isinstance(query, str):
            check_unicode(query, "query")
        args = dict(as_user=as_user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                    include_history=include_history, now=now, tags=tags)
        if self._recall is None:
            self._recall = Recall(self, self.index)
        try:
            hits = self._recall(query, **args)
        except MdmemError:
            raise
        except Exception as exc:  # noqa: BLE001 -- an index file that cannot be read
            # The index is a cache: a damaged one (truncated table of contents, a missing
            # segment, garbage) is moved aside with one warning and rebuilt, then asked again.
            self.index.recover(exc)
            self._recall = Recall(self, self.index)
            hits = self._recall(query, **args)
        flags = self.trust.flags()
        return [replace(h, untrusted=flags[h.path].detail) if h.current and h.path in flags else h for h in hits]

    def reset_caches(self) -> None:
        """After a history rewrite every in-process cache describes commits that are gone."""
        self.close()
        self._index = self._recall = self._meta_cache = self._root_blobs = None
        self.store = GitStore(self.root, self.config.identity)
        self.store.signing_key = self.user_config.signing_key

    def reload(self) -> None:
        """Forget every in-process cache (history was rewritten under us)."""
        self.reset_caches()

    # --- erasure ----------------------------------------------------------------------
    def forget(self, *, as_user: str, subject: str | None = None, owner: str | None = None,
               paths: list[str] | None = None, texts: list[str] | None = None, dry_run: bool = False,
               push: bool = False, scrub: bool = True, force: bool = False, now=None) -> dict:
        """Erase notes from every version of history and every copy (see :mod:`mdmem.erasure.forget`).
        Returns the plan (dry run) or the receipt; never the erased text."""
        from .erasure.forget import forget

        user = require_user(as_user)
        when = resolve_now(now)
        with self.store.locked():
            return forget(self, as_user=user, when=when, subject=subject, owner=owner, paths=paths, texts=texts,
                          dry_run=dry_run, push=push, scrub=scrub, force=force)

    def finish_erasure(self) -> dict | None:
        """Finish an erasure a crash interrupted (its journal is in .git); None if there is none."""
        from .erasure.forget import finish
        from .erasure.journal import pending

        if not pending(self.root):
            return None
        with self.store.locked():
            return finish(self)

    def prove_gone(self, needles: list[str], *, as_user: str, subject: str | None = None,
                   owner: str | None = None, allow_paths: list[str] | None = None) -> dict:
        """Check every place mdmem controls for the needles; name what it cannot reach."""
        from .erasure.proof import prove_gone

        return prove_gone(self, needles, as_user=require_user(as_user), subject=subject, owner=owner,
                          allow_paths=allow_paths)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        if self._meta_cache is not None:
            self._meta_cache.close()
            self._meta_cache = None
            self._root_blobs = None  # it reads through the cache just closed

    # --- reading --------------------------------------------------------------------
    def _candidate_paths(self, user: str, subject: str, kind: str, key: str | None,
                         scope: str | None, team: str | None) -> list[str]:
        contract = self.contracts.resolve(kind)
        if scope:
            roots = [self._root_for(user, scope, team, None)]
        else:
            roots = self.access.readable_roots(user)
        return [layout.keyed_path(r, subject, contract.name, key or SUMMARY_KEY) for r in roots]

    def get(self, *, as_user: str, path: str | None = None, subject: str | None = None,
            kind: str | None = None, key: str | None = None, scope: str | None = None,
            team: str | None = None, now=None) -> StoredNote:
        """The live version of one note: by path, or by subject + kind + key (an exact lookup).

        Without a scope the user's private note wins over team notes of the same key.
        """
        user = require_user(as_user)
        when = resolve_now(now)
        if path:
            stored = self._visible_stored(user, path)
            if not stored.note.is_live(when):
                raise NotFound(f"{path}: not live at {format_time(when)} (ended or expired)")
            return self._marked(stored)
        if not (subject and kind):
            raise BadInput("get: pass a path, or subject and kind (and key for keyed kinds)")
        contract = self.contracts.resolve(kind)
        if contract.keyed and not key and contract.name != "summary":
            raise BadInput(f"key: kind {contract.name} is keyed; get needs the key")
        for candidate in self._candidate_paths(user, subject, kind, key, scope, team):
            if not self.access.may_read_root(user, layout.parse_path(candidate).root):
                continue
            stored = self._read(candidate)
            if stored is not None and stored.note.is_live(when):
                return self._marked(stored)
        raise not_visible(f"{subject} {contract.name} {key or ''}".strip(), user)

    def _marked(self, stored: StoredNote) -> StoredNote:
        reason = self.untrusted(stored.path)
        return replace(stored, untrusted=reason) if reason else stored

    def keys(self, *, as_user: str, subject: str, kind: str, scope: str | None = None,
             team: str | None = None, now=None) -> list[KeyInfo]:
        """Live keys for a subject and kind in every root the user may read."""
        user = require_user(as_user)
        contract = self.contracts.resolve(kind)
        when = resolve_now(now)
        roots = [self._root_for(user, scope, team, None)] if scope else self.access.readable_roots(user)
        out = []
        for root in roots:
            if not self.access.may_read_root(user, root):
                continue
            for stored in live_in_dir(self.root, layout.kind_dir(root, subject, contract.name), self.contracts, when,
                                      max_bytes=self.config.note_max_bytes):
                out.append(KeyInfo(key=stored.note.key or "", root=root, path=stored.path, version=stored.version,
                                   note_id=stored.note.id, first_line=stored.note.first_line()))
        return out

    def notes(self, *, as_user: str, now=None, include_ended: bool = False) -> list[StoredNote]:
        """Every note the user may see (live ones unless ``include_ended``)."""
        user = require_user(as_user)
        when = resolve_now(now)
        out = []
        for root in self.access.readable_roots(user):
            for stored in scan_notes(self.root, self.contracts, root, max_bytes=self.config.note_max_bytes)[0]:
                if include_ended or stored.note.is_live(when):
                    out.append(stored)
        return out

    def show(self, *, as_user: str, path: str) -> StoredNote:
        """One note by path whatever its validity (ended and expired notes too), if the user may
        see it; every frontmatter field, editors' ones included."""
        return self._visible_stored(require_user(as_user), path)

    def listing(self, *, as_user: str, subject: str | None = None, kind: str | None = None,
                root: str | None = None, include_ended: bool = False, now=None) -> list[StoredNote]:
        """The notes the user may see, by subject, kind and scope root (``mdmem ls``)."""
        user = require_user(as_user)
        if root is not None and not self.access.may_read_root(user, root.rstrip("/")):
            raise NotFound(f"--root {root}: no scope root visible to {user}; yours: "
                           f"{', '.join(self.access.readable_roots(user))}")
        kind_name = self.contracts.resolve(kind).name if kind else None
        if subject:
            layout.check_subject(subject)
        return [s for s in self.notes(as_user=user, now=now, include_ended=include_ended)
                if (root is None or s.root == root.rstrip("/")) and (kind_name is None or s.note.kind == kind_name)
                and (subject is None or s.note.subject == subject)]

    def check(self) -> tuple[list[StoredNote], list[NoteInvalid]]:
        return scan_notes(self.root, self.contracts, max_bytes=self.config.note_max_bytes)

    def history(self, *, as_user: str, path: str | None = None, subject: str | None = None,
                kind: str | None = None, key: str | None = None, scope: str | None = None,
                team: str | None = None, at=None) -> list[Version]:
        """Every version of one note from git, newest first; with ``at``, the one current then."""
        user = require_user(as_user)
        if not path:
            if not (subject and kind):
                raise BadInput("history: pass a path, or subject and kind and key")
            # Only roots the user may read are asked: git is not an oracle for the others.
            paths = [p for p in self._candidate_paths(user, subject, kind, key, scope, team)
                     if self.access.may_read_root(user, layout.parse_path(p).root)]
            path = next((p for p in paths if self.store.log(p)), None)
            if path is None:
                raise not_visible(f"{subject} {kind} {key or ''}".strip(), user)
        root = self.access.visible_root(user, path)
        writers = self.access.writers_of_root(root)
        versions = []
        for entry in self.store.log(path):
            note = None
            if entry.blob is not None:
                try:
                    note = parse_note(path, self.store.read_blob(entry.blob))
                except NoteInvalid:
                    note = None
                if note is not None and not self._version_visible(user, note):
                    break  # the walk stops at the first version the user may not see
            t = entry.trailers
            committer = self.config.committer(entry.email)
            untrusted = None if committer in writers else \
                f"committed by {committer or 'an unknown identity'}, who may not write {root}"
            versions.append(Version(entry.commit, entry.time, t.get("op", "edit"), t.get("actor", entry.author),
                                    t.get("source", "human"), entry.blob, note, untrusted, path=path))
        if not versions:
            raise not_visible(path, user)
        if at is not None:
            when = parse_time(at, field="at")
            for v in versions:
                if v.time <= when:
                    if v.note is None or not v.note.is_live(when):
                        raise NotFound(f"{path}: not live at {format_time(when)}")
                    return [v]
            raise NotFound(f"{path}: did not exist at {format_time(when)}")
        return versions

    def _version_visible(self, user: str, note: Note) -> bool:
        root = f"team/{note.team}" if note.scope == "team" else f"private/{note.owner}"
        return self.access.may_read_root(user, root)

    # --- lifecycle ------------------------------------------------------------------
    def retire(self, *, as_user: str, path: str, valid_until=None, expect_version: str | None = None,
               now=None) -> WriteResult:
        """Mark a note as no longer true from ``valid_until`` (default now)."""
        user = require_user(as_user)
        when = resolve_now(now)
        end = parse_time(valid_until, field="valid_until") if valid_until is not None else when

        def prepare():
            stored = self._visible_stored(user, path)
            self.access.check_write(user, stored.root)
            gate.check_expected_version(path, expect_version, stored.version)
            if stored.note.valid_until is not None and stored.note.valid_until <= end:
                raise BadInput(f"{path}: already ended at {format_time(stored.note.valid_until)}")
            return _Pending(path, stored.note.evolve(valid_until=end), "retire", stored.version)

        return self._commit_pending(user, when, prepare)

    def sweep(self, *, as_user: str, now=None) -> SweepResult:
        """Remove expired notes the user may write, in one commit."""
        user = require_user(as_user)
        when = resolve_now(now)
        with self.store.locked():
            expired = []
            for root in self.access.readable_roots(user):
                try:
                    self.access.check_write(user, root)
                except Refused:
                    continue
                expired += [s for s in scan_notes(self.root, self.contracts, root,
                                                  max_bytes=self.config.note_max_bytes)[0]
                            if s.note.expires_at is not None and s.note.expires_at <= when]
            if not expired:
                return SweepResult(removed=[], commit=None)
            message = (f"sweep {len(expired)} expired note(s)\n\n"
                       + Trailers("expire", user, "system:sweep",
                                  tuple(s.note.id for s in expired)).render())
            commit = self.commit_changes({s.path: None for s in expired}, message, actor=user, when=when)
            self._after_write()
        return SweepResult(removed=[s.path for s in expired], commit=commit)

    def consolidate(self, *, as_user: str, subject: str, scope: str | None = None, team: str | None = None,
                    now=None) -> WriteResult:
        """A deterministic digest of one scope's live notes about one subject."""
        from .ops.consolidate import build_digest

        scope = layout.default_scope(scope, team)
        user = require_user(as_user)
        when = resolve_now(now)
        root = self._root_for(user, scope, team, None)
        if not self.access.may_read_root(user, root):
            raise Refused(f"consolidate: {user} may not read {root}")
        inputs = [s for s in scan_notes(self.root, self.contracts, f"{root}/{layout.subject_dir(subject)}",
                                        max_bytes=self.config.note_max_bytes)[0]
                  if s.note.is_live(when) and s.note.kind != "summary" and s.note.subject == subject]
        if not inputs:
            raise NotFound(f"consolidate: no live notes about {subject} in {root}")
        text = build_digest(subject, root, inputs)
        return self.remember(text, as_user=user, kind="summary", subject=subject, scope=scope, team=team,
                             source="system:consolidate", derived_from=[s.note.id for s in inputs], now=when)
