"""Writing through the gate: drafting a note from remember's arguments, the gate's checks
against the current state (under the lock), and the commit that carries the note with the
views it alters (compare-and-swap on the branch, retried)."""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


from ..errors import BadInput, BranchMoved, Conflict, MdmemError, NoteInvalid
from ..model import layout
from ..model.clock import SpanLike, TimeLike, add_span, parse_duration, parse_time, resolve_write_time
from ..model.kinds import SUMMARY_KEY, Contract
from ..model.note import FIELDS as NOTE_FIELDS, Note, check_source, lf_lines, new_id
from ..model.validate import check_unicode
from ..policy import gate
from ..policy.access import require_user
from ..policy.gate import AGENT, HUMAN, Provenance, check_key_reuse, judge_source
from ..results import BatchResult, ProgressCallback, WriteResult
from ..search.index_worker import IndexWorker, spare_core
from ..storage.trailers import Trailers
from ..storage.worktree import StoredNote, live_in_dir, validated
from . import holds, read, render
from .conversation import Turns
from .state import RepoState

# What one item of remember_many may hold: remember's arguments.
ITEM_FIELDS = {"text", "kind", "subject", "key", "scope", "team", "owner", "source", "ttl", "valid_from",
               "new_key", "expect_version", "derived_from", "context", "extra"}
EXTRA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
WRITE_RETRIES = 3
# An import of at least this many items (BM25 only) indexes in a second process while it
# writes (search/index_worker.py): starting it costs ~0.3 s of the other core.
INDEX_WORKER_MIN = 1000

LiveKeys = Callable[[str], set[str]]  # a kind folder -> the keys live in it
Sent = Callable[[dict[str, bytes], list[Note]], None]  # a batch's committed files (path -> bytes), its notes


@dataclass
class Pending:
    """A write the gate has accepted, ready to commit."""

    path: str
    note: Note
    op: str
    superseded: str | None
    extra_trailers: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    moved_from: str | None = None  # a move: the path the note leaves in the same commit


Draft = tuple[str, Note, Contract, Provenance]  # path, note, contract, the provenance verdict


def remember(repo: RepoState, text: str, *, as_user: str, kind: str, subject: str, key: str | None = None,
             scope: str | None = None, team: str | None = None, owner: str | None = None,
             source: str = "user", ttl: SpanLike = None, valid_from: TimeLike = None, new_key: bool = False,
             expect_version: str | None = None, derived_from: list[str] | None = None,
             context: str | None = None, now: TimeLike = None, channel: str = HUMAN,
             claimed_source: str | None = None, extra: Mapping[str, Any] | None = None) -> WriteResult:
    """Write one note through the gate: committed, held for review, or refused (raised).

    ``channel`` is who is at the other end: a person (CLI, API) or an agent (the MCP server,
    which passes ``source="agent:<name>"`` and the source the agent claimed, if any)."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    repo.give_way()
    path, note, contract, provenance = draft(
        repo, user, text, kind=kind, subject=subject, key=key, scope=scope, team=team, owner=owner, source=source,
        ttl=ttl, valid_from=valid_from, derived_from=derived_from, channel=channel,
        claimed_source=claimed_source, when=when, context=context, turns=Turns(repo), extra=extra)
    if not provenance.trusted:
        with repo.store.locked():
            pending = prepare(repo, user, path, note, contract, new_key=new_key,
                              expect_version=expect_version, now=when)
            return holds.hold(repo, user, path, pending.note, provenance.reason, when, channel=channel,
                              new_key=new_key, expect_version=expect_version, claimed_source=claimed_source)
    repo.writing([note])  # its embedding starts now, beside the lock, the gate and the commit
    trailers = (("Memory-Claimed-Source", claimed_source),) if claimed_source else ()

    def prepare_now() -> Pending:
        pending = prepare(repo, user, path, note, contract, new_key=new_key, expect_version=expect_version, now=when)
        pending.extra_trailers = trailers
        return pending

    return commit_pending(repo, user, when, prepare_now)


def draft(repo: RepoState, user: str, text: str, *, kind: str, subject: str, key: str | None, scope: str | None,
          team: str | None, owner: str | None, source: str, ttl: SpanLike, valid_from: TimeLike,
          derived_from: list[str] | None, when: _dt.datetime, channel: str = HUMAN,
          claimed_source: str | None = None, context: str | None = None,
          extra: Mapping[str, Any] | None = None, turns: Turns | None = None) -> Draft:
    """The note a write would store, its path, its contract and the provenance verdict;
    raises on bad input or a scope the user may not write (remember and remember_many).
    ``turns``: an episode without a context given follows the turn before it, if any
    (ops/conversation.py)."""
    scope = layout.default_scope(scope, team)
    contract = repo.contracts.resolve(kind)
    layout.check_subject(subject)
    check_source(source)
    if channel not in gate.CHANNELS:
        raise BadInput(f"channel: {channel!r}; use {HUMAN!r} or {AGENT!r}")
    if channel == AGENT and not gate.is_agent_source(source):
        raise BadInput(f"source: a write over the agent channel is recorded as agent:<name>, not {source!r}")
    gate.check_claimed_identity(source, user, channel)
    if claimed_source is not None:
        check_source(claimed_source)
    if not isinstance(text, str) or not text.strip():
        raise BadInput("text: a note needs text")
    check_unicode(text, "text")
    text = lf_lines(text)
    if isinstance(context, str):
        check_unicode(context, "context")
    if contract.keyed and not key and contract.name != "summary":
        raise BadInput(f"key: kind {contract.name} is keyed; pass a key (like deploy.window)")
    if contract.name == "summary":
        key = key or SUMMARY_KEY
    start = parse_time(valid_from, field="valid_from") if valid_from is not None else when
    ttl_delta = parse_duration(ttl) if ttl is not None else contract.default_ttl
    if ttl is not None and ttl_delta is not None and ttl_delta < _dt.timedelta(seconds=1):
        # A zero ttl once meant "never expires" (a falsy timedelta): an agent escaped its cap.
        raise BadInput(f"ttl: {ttl!r} is under a second; give a ttl of at least 1s, or none for the kind's "
                       "default")
    if channel == AGENT and ttl is not None:
        gate.check_agent_ttl(ttl_delta, contract, repo.config.trust.agent_max_ttl)
    root = read.root_for(user, scope, team, owner)
    path = read.path_for(root, contract, subject, key, start, text)
    if context is None and turns is not None and contract.name == "episode":
        repo.access.check_write(user, root)  # only a root the writer may write is read for the turn before
        context = turns.context_for(root, subject, user, start, text)
    note = Note(id=new_id(), kind=contract.name, subject=subject, key=key, scope=scope,
                team=team if scope == "team" else None, owner=user, source=source,
                valid_from=start, expires_at=add_span(start, ttl_delta) if ttl_delta is not None else None,
                derived_from=tuple(derived_from or ()), text=text.strip(), context=context,
                extra=check_extra(extra))
    size = len(note.dumps().encode())
    if size > repo.config.note_max_bytes:
        raise BadInput(f"text: the note would be {size} bytes; a note is at most "
                       f"{repo.config.note_max_bytes} bytes ([notes] max_bytes in mdmem.toml)")
    # Write permission is checked before provenance: a hold never bypasses scope.
    repo.access.check_write(user, root)
    trust = repo.config.trust
    return path, note, contract, judge_source(source, contract, trust.sources, trust.agent_kinds, root=root,
                                              agent_team_kinds=trust.agent_team_kinds)


# One accepted item of a batch: its line, its draft, new_key and expect_version.
BatchItem = tuple[Any, str, Note, Contract, Provenance, bool, "str | None"]


def remember_many(repo: RepoState, items: Iterable[Mapping[str, Any]], *, as_user: str, now: TimeLike = None,
                  new_key: bool = False, batch_size: int = 1000,
                  progress: ProgressCallback | None = None, index_worker: bool | None = None,
                  embed_ahead: bool | None = None) -> BatchResult:
    """Write many notes through the gate and make them searchable: each item is a dict of
    :func:`remember`'s arguments (``text``, ``kind``, ``subject``, ...; ``line`` names it in
    reports). One commit per batch with the views rendered once; held items go to review
    one by one, refused ones are reported with their line and reason, nothing else stops.
    A path written twice starts a new batch, so every version stays in history.
    ``progress(done, total, what)`` is called as batches commit and vectors are made.
    ``index_worker``: index the committed notes in a second process while writing (default:
    for INDEX_WORKER_MIN items or more when a core is idle; never with an embedder).
    ``embed_ahead``: with an embedder, embed each committed batch while writing the next
    (default: for INDEX_WORKER_MIN items or more when a core is idle)."""
    user = require_user(as_user)
    when = resolve_write_time(now)
    items = list(items)
    if index_worker is None:  # the embedder first: spare_core waits 100 ms
        index_worker = len(items) >= INDEX_WORKER_MIN and repo.index.embedder is None and spare_core()
    if embed_ahead is None:
        # Embedding while writing helps only with a core to spare: on a busy machine it made
        # the import slower (3k MiniLM, same code, load 3-4: 49.9-56.6 s on against 39.8-48.9 off).
        embed_ahead = len(items) >= INDEX_WORKER_MIN and repo.index.embedder is not None and spare_core()
    worker = (IndexWorker.start(repo.index.base, repo.contracts, repo.config.note_max_bytes)
              if index_worker and repo.index.embedder is None else None)

    def sent(files: dict[str, bytes], notes: list[Note]) -> None:
        # Each committed batch goes on being indexed while the next is written: its files to
        # the index worker (BM25 only), its texts to the embedder's thread (with an embedder).
        if worker is not None:
            worker.send(files)
        if embed_ahead:
            repo.index.embed_bulk(notes)

    try:
        return _remember_many(repo, user, when, items, new_key=new_key, batch_size=batch_size,
                              progress=progress, worker=worker, sent=sent)
    except BaseException:
        repo.index.drop_bulk()
        raise
    finally:
        if worker is not None:
            worker.discard()


def _remember_many(repo: RepoState, user: str, when: _dt.datetime, items: list[Mapping[str, Any]], *,
                   new_key: bool, batch_size: int, progress: ProgressCallback | None,
                   worker: IndexWorker | None, sent: Sent) -> BatchResult:
    result = BatchResult()
    batch: list[BatchItem] = []
    in_batch: set[str] = set()  # the batch's paths
    turns = Turns(repo)  # a conversation's turns follow one another (ops/conversation.py)
    for n, given in enumerate(items, 1):
        item = dict(given)
        line = item.pop("line", n)
        try:
            fields = {"new_key": new_key, **item}
            unknown = set(fields) - ITEM_FIELDS
            if unknown:
                raise BadInput(f"{', '.join(sorted(unknown))}: not a field of a note to remember "
                               f"(use {', '.join(sorted(ITEM_FIELDS))})")
            expect = fields.pop("expect_version", None)
            item_new_key = bool(fields.pop("new_key"))
            text = fields.pop("text", None)
            if "kind" not in fields or "subject" not in fields:
                raise BadInput("kind, subject: every item needs both")
            drafted = draft(repo, user, text, when=when, turns=turns, **{"key": None, "scope": "private", "team": None,
                                                            "owner": None, "source": "user", "ttl": None,
                                                            "valid_from": None, "derived_from": None, **fields})
        except MdmemError as exc:
            result.refused.append({"line": line, "reason": str(exc), "exit_code": exc.exit_code})
            continue
        if drafted[0] in in_batch:
            write_batch(repo, user, batch, when, result, sent=sent)  # the earlier version gets its own commit
            batch, in_batch = [], set()
        batch.append((line, *drafted, item_new_key, expect))
        in_batch.add(drafted[0])
        if len(batch) >= batch_size:
            write_batch(repo, user, batch, when, result, sent=sent)
            batch, in_batch = [], set()
            if progress:
                progress(n, len(items), "writing notes")
    write_batch(repo, user, batch, when, result, sent=sent)
    if progress:
        progress(len(items), len(items), "writing notes")
    prebuilt = worker.finish() if worker is not None else None
    report = repo.index.sync(progress=progress, prebuilt=prebuilt)
    result.index = {**report.to_dict(), "by_worker": report.joined}
    return result


def write_batch(repo: RepoState, user: str, batch: list[BatchItem], when: _dt.datetime, result: BatchResult, *,
                sent: Sent | None = None) -> None:
    """One commit for the batch's accepted items (under the lock, CAS retried); holds and
    refusals recorded in ``result``. ``sent`` is given the note files committed and their notes."""
    if not batch:
        return
    for attempt in range(WRITE_RETRIES):
        with repo.store.locked():
            live: dict[str, set[str]] = {}
            added: dict[str, set[str]] = {}  # keys this batch writes, per folder

            def live_keys(folder: str, live: dict[str, set[str]] = live,
                          added: dict[str, set[str]] = added) -> set[str]:  # this attempt's
                # A folder is read only when an item needs its live keys (a new key without
                # new_key): reading every folder the batch touched cost ~3 ms a note at 10k.
                if folder not in live:
                    live[folder] = {s.note.key for s in live_in_dir(repo.root, folder, repo.contracts, when,
                                                                    max_bytes=repo.config.note_max_bytes)
                                    if s.note.key is not None}  # a keyed note always has one
                return live[folder] | added.get(folder, set())

            head_blobs = repo.store.blob_ids([item[1] for item in batch])

            accepted: list[tuple[Any, Pending, Provenance]] = []
            held: list[tuple[Any, Pending, Provenance, bool, str | None]] = []
            refused: list[dict[str, Any]] = []
            for line, path, note, contract, provenance, item_new_key, expect in batch:
                try:
                    pending = prepare(repo, user, path, note, contract, new_key=item_new_key,
                                      expect_version=expect, now=when, live_keys=live_keys,
                                      head_blobs=head_blobs)
                except MdmemError as exc:
                    refused.append({"line": line, "path": path, "reason": str(exc), "exit_code": exc.exit_code})
                    continue
                if contract.keyed and pending.note.key:
                    added.setdefault(layout.kind_dir(layout.parse_path(path).root, note.subject, contract.name),
                                     set()).add(pending.note.key)
                if provenance.trusted:
                    accepted.append((line, pending, provenance))
                else:
                    held.append((line, pending, provenance, item_new_key, expect))
            commit = None
            if accepted:
                sources = sorted({p.note.source for _, p, _ in accepted})
                message = (f"import {len(accepted)} note(s)\n\n"
                           + Trailers("import", user, sources[0] if len(sources) == 1 else "mixed").render())
                files = {p.path: p.note.dumps().encode() for _, p, _ in accepted}
                try:
                    commit = commit_changes(repo, dict(files), message, actor=user, when=when)
                except BranchMoved:
                    if attempt == WRITE_RETRIES - 1:
                        raise
                    continue
            held_now = [(line, holds.hold(repo, user, p.path, p.note, prov.reason, when, channel=HUMAN,
                                          new_key=new, expect_version=exp, claimed_source=None))
                        for line, p, prov, new, exp in held]
        break
    after_write(repo)
    if commit:
        result.commits.append(commit)
        if sent is not None:
            sent(files, [p.note for _, p, _ in accepted])
    result.committed += [{"line": line, "path": p.path, "op": p.op, "commit": commit} for line, p, _ in accepted]
    result.held += [{"line": line, "path": r.path, "review_id": r.review_id, "reason": r.reason}
                    for line, r in held_now]
    result.refused += refused


def prepare(repo: RepoState, user: str, path: str, note: Note, contract: Contract, *, new_key: bool,
            expect_version: str | None, now: _dt.datetime, op: str | None = None,
            live_keys: LiveKeys | None = None, head_blobs: Mapping[str, str | None] | None = None) -> Pending:
    """The gate's checks against the current state; call under the lock. ``live_keys``
    (folder -> live keys) lets a batch read each folder once and count its own notes;
    ``head_blobs`` (path -> blob in HEAD) when the caller looked its paths up at once."""
    loc = layout.parse_path(path)
    repo.access.check_write(user, loc.root)
    current = read_for_write(repo, path)
    if head_blobs is not None:
        head_version = head_blobs[path]
    else:
        head_version = repo.store.blob_id(path) if repo.store.head() else None
    # The file already read gives its version; only one that differs from HEAD's is read again,
    # byte for byte (a note committed with CRLF is its blob, no edit).
    worktree = None if current is None else current.version if current.version == head_version \
        else repo.store.worktree_blob_id(path, expect=head_version)
    gate.check_clean(path, worktree, head_version)
    gate.check_append_only(path, contract, current is not None)
    gate.check_expected_version(path, expect_version, head_version)
    # Only a new key without new_key=True needs the folder's live keys.
    if contract.keyed and contract.name != "summary" and current is None and not new_key:
        folder = layout.kind_dir(loc.root, note.subject, contract.name)
        live = (list(live_keys(folder)) if live_keys is not None else
                [s.note.key for s in live_in_dir(repo.root, folder, repo.contracts, now,
                                                 max_bytes=repo.config.note_max_bytes) if s.note.key is not None])
        check_key_reuse(note.key or "", live, new_key=new_key,
                        what=f"{note.subject} {contract.name} in {loc.root}")
    if note.derived_from or contract.name == "summary":
        check_derivation(repo, loc.root, note)
    if current is not None:
        # The note keeps its id, and the fields editors added (tags, aliases...).
        note = note.evolve(id=current.note.id, extra={**current.note.extra, **note.extra})
    return Pending(path, note, op or ("supersede" if current is not None else "create"),
                   current.version if current is not None else None)


def read_for_write(repo: RepoState, path: str) -> StoredNote | None:
    try:
        return read.read(repo, path)
    except NoteInvalid as exc:
        raise Conflict(f"{exc}; fix the note by hand (mdmem check) before writing over it") from None


def check_derivation(repo: RepoState, root: str, note: Note) -> None:
    ids = set(note.derived_from)
    found: dict[str, str] = {}
    if ids:
        for stored in read.all_notes(repo):
            if stored.note.id in ids:
                found[stored.note.id] = stored.root
    gate.check_derivation(repo.access, root, ids, found)


def check_extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fields an editor or another tool added (tags, aliases, title...), kept with the note like
    hand-added ones: plain names that are not mdmem's own fields, text or lists of text."""
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise BadInput("extra: a mapping of editor fields (like tags, aliases)")
    out: dict[str, Any] = {}
    for name, value in extra.items():
        if not isinstance(name, str) or not EXTRA_NAME.fullmatch(name) or name in NOTE_FIELDS:
            raise BadInput(f"extra: {str(name)[:40]!r} is not a field a note can carry (a plain name, not one of "
                           f"mdmem's: {', '.join(NOTE_FIELDS)})")
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        items = value if isinstance(value, list) else [value]
        if len(items) > 100 or not all(isinstance(v, (str, int, float)) for v in items):
            raise BadInput(f"extra: {name}: text, a number, or a list of at most 100 of them")
        for v in items:
            if isinstance(v, str):
                check_unicode(v, f"extra.{name}")
        out[name] = value
    return out


def commit_pending(repo: RepoState, user: str, when: _dt.datetime, prepare_now: Callable[[], Pending], *,
                   op: str | None = None, evidence: tuple[str, ...] = ()) -> WriteResult:
    """Commit what ``prepare_now`` (run under the lock) accepts; a moved branch prepares again."""
    for attempt in range(WRITE_RETRIES):
        with repo.store.locked():
            pending = prepare_now()
            message = commit_message(pending, user, op or pending.op, evidence)
            data = pending.note.dumps().encode()
            # What mdmem commits must pass the checks its readers apply, or it could not
            # read (and so never undo) its own write. Kept as checked: the index's catch-up
            # reads this very file next.
            version = validated(pending.path, data, repo.contracts, max_bytes=repo.config.note_max_bytes).version
            if pending.superseded == version and pending.moved_from is None:
                # The same note again (an agent repeating itself within a second): no empty
                # commit; the answer names the commit that holds this version.
                held_by = repo.store.log(pending.path)
                return WriteResult("committed", pending.path, commit=held_by[0].commit if held_by else None,
                                   version=version, note_id=pending.note.id)
            changes: dict[str, bytes | None] = {pending.path: data}
            if pending.moved_from is not None:
                changes[pending.moved_from] = None  # one commit: git shows a rename, history follows it
            try:
                commit = commit_changes(repo, changes, message, actor=user, when=when)
            except BranchMoved:
                if attempt == WRITE_RETRIES - 1:
                    raise
                continue
            # Acknowledged: nothing from here may raise (the version is the blob we wrote).
            after_write(repo)
            return WriteResult("committed", pending.path, commit=commit, version=version,
                               superseded=pending.superseded, note_id=pending.note.id)
    raise AssertionError("unreachable")


def commit_message(pending: Pending, user: str, op: str, evidence: tuple[str, ...]) -> str:
    n = pending.note
    ident = f"{n.subject}/{n.key}" if n.key else f"{n.subject} {pending.path.rsplit('/', 1)[-1]}"
    trailers = Trailers(op, user, n.source, evidence or tuple(n.derived_from), pending.extra_trailers)
    return f"remember {n.kind} {ident}\n\n{trailers.render()}"


def after_write(repo: RepoState) -> None:
    repo.store.maybe_gc()  # never raises


def commit_changes(repo: RepoState, changes: dict[str, bytes | None], message: str, *, actor: str,
                   when: _dt.datetime, author: tuple[str, str] | None = None) -> str:
    """Commit note changes with the views they alter (call under the lock). The views are
    rendered on the tip read here and the commit is made only on that tip (BranchMoved
    otherwise: the writers' retry renders again): a person's `git commit` takes no mdmem lock,
    and a commit on a newer tip carried views without its notes, and told every cache (the
    views' kept state, the index's hints) a parent it did not have."""
    repo.committing(changes)  # their embedding, if any, runs beside the commit
    repo.give_way()
    parent = repo.store.head()
    altered = render.views_for(repo, changes, when, head=parent)
    email = (author or repo.config.identity(actor))[1]
    repo.give_way()
    commit = repo.store.commit({**changes, **altered}, message, actor=actor, when=when, author=author,
                               expect_tip=parent)
    repo.committed(commit, parent, changes, email)
    return commit
