"""What an open memory repo holds: its folder, configuration, git store, access rule and the
in-process caches (trust, index, recall, views), made on first use and dropped together.

The operations (ops/read.py, write.py, holds.py, review.py, lifecycle.py, views.py,
searching.py, consolidate.py) are functions of this state; :class:`mdmem.repo.MemoryRepo`
is this state plus one thin method per operation.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..config import CONFIG_NAME, Config, UserConfig, check_backend, check_fusion
from ..errors import BadInput, Conflict
from ..policy.access import Access
from ..storage.gitstore import GitStore
from ..storage.gitdir import cache_dir
from ..storage.locks import renew_after_fork
from ..storage.worktree import forget_read_notes

if TYPE_CHECKING:
    from ..model.kinds import Contracts
    from ..model.note import Note
    from ..policy.verify import Verifier
    from ..search.catch_up_aside import CatchUpAside
    from ..search.note_index import NoteIndex
    from ..search.recall import Recall
    from ..views.fresh import Views
    from ..views.render import MetaCache, RootEntries


class RepoState:
    """An open memory repo's state; the caches are disposable (``reset_caches``)."""

    root: Path
    config: Config
    user_config: UserConfig
    store: GitStore
    access: Access
    contracts: Contracts

    def __init__(self, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
                 user_config: UserConfig | None = None, repair: bool = True) -> None:
        root = Path(path).absolute()  # subprocesses (forget's rewrite, hooks) run elsewhere
        if not (root / CONFIG_NAME).exists():
            raise BadInput(f"{root / CONFIG_NAME}: missing; is this a memory repo? (mdmem init PATH makes one)")
        if not (root / ".git").exists():
            raise BadInput(f"{root}: not a git repository")
        self.root = root
        self.user_config = user_config or UserConfig()
        self._overrides = (embedder, fusion)
        self._trust: Verifier | None = None
        self.store = self._open_store(Config().identity)
        self._load_config()
        self.store.signing_key = self.user_config.signing_key
        if repair and self.store.pending_path.exists():
            # A write was cut short after its commit (a kill, a stale index.lock): bring the
            # work tree and git's index in line now. Busy? The writer holding it repairs.
            # (``repair=False``: a live process's helper, ops/index_catch_up.py, leaves it.)
            try:
                with self.store.locked(timeout=0.5):
                    pass
            except Conflict:
                pass
        self._index: NoteIndex | None = None
        self._keep_warm = False  # keep_warm: every index this state opens is kept warm
        self._catch_up_aside = False  # catch_up_aside: every index this state opens gets one
        self._recall: Recall | None = None
        self._meta_cache: MetaCache | None = None
        self._root_blobs: RootEntries | None = None

    def _load_config(self) -> None:
        """mdmem.toml as it takes effect: the trusted version (a change by a non-admin does not,
        policy/verify.py), with this process's embedder/fusion overrides."""
        root = self.root
        try:
            config, broken = Config.load(root), None
        except BadInput as exc:
            if not (root / CONFIG_NAME).is_file():
                raise
            config, broken = Config(), exc  # an untrusted change cannot break everyone's mdmem: see below
        raw = (root / CONFIG_NAME).read_bytes()
        stamp = self._config_stamp()
        self.config = config
        self.contracts = config.contracts
        trusted = self.trust.trusted_config(config, raw)
        if broken is not None and (trusted is config or raw != self.store.read_at(CONFIG_NAME, "HEAD")):
            raise broken  # the broken file is the trusted one, or the person's own uncommitted edit
        self.config = config = trusted
        self.store.identity = config.identity
        embedder, fusion = self._overrides
        if embedder is not None:
            config.embedder.backend = check_backend(embedder, where="embedder")
        if fusion is not None:
            config.fusion = check_fusion(fusion, where="fusion")
        self.access = Access.of(config)
        self.contracts = config.contracts
        self._loaded_stamp = stamp

    def _config_stamp(self) -> tuple[str | None, tuple[int, ...] | None]:
        """What changes when mdmem.toml may take effect differently: its committed blob and the
        work-tree file (~30 us)."""
        try:
            st = os.stat(self.root / CONFIG_NAME)
            on_disk: tuple[int, ...] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            on_disk = None
        try:
            committed = self.store.blob_id(CONFIG_NAME, "HEAD")
        except Exception:  # noqa: BLE001 -- a damaged HEAD: the operation itself reports it, by path
            committed = "unreadable"
        return committed, on_disk

    def memory_id(self) -> str:
        """This memory's id (storage/memory_id.py), kept in its git directory: what a token
        added for it names."""
        from ..storage.gitdir import common_git_dir
        from ..storage.memory_id import REPO_ID_FILE, read_or_make

        return read_or_make(common_git_dir(self.root) / REPO_ID_FILE)

    def check_user(self, user: str | None, *, given_by: str = "--as / MDMEM_USER") -> str:
        """``user`` as declared in mdmem.toml as it is now (follow_config first), else refused
        (naming ``given_by``, where the name came from)."""
        self.follow_config()
        return self.access.check_user(user, given_by=given_by)

    def follow_config(self) -> None:
        """Take up a change of mdmem.toml made since it was read -- an admin's commit removing
        someone from a team, a pull, a hand edit -- as a fresh process would: a repo kept open
        (the MCP server, the daemon, a program using the API) must not go on answering by the
        teams and roles it opened with. Called before every operation that names who acts;
        so is the check for another process's erasure (GitStore.follow_erasures: one stat)."""
        self.store.follow_erasures()
        if self._config_stamp() == self._loaded_stamp:
            return
        before = self.config
        self._trust = None  # its verdicts were made under the old admins
        self._load_config()
        self._recall = None
        self._root_blobs = None  # views follow config (kinds, views settings)
        if self._index is not None and self.config.embedder != before.embedder:
            self._index.close()
            self._index = None

    # --- the caches -------------------------------------------------------------------
    @property
    def trust(self) -> Verifier:
        """Who committed each note (:mod:`mdmem.policy.verify`)."""
        if self._trust is None:
            from ..policy.verify import Verifier
            self._trust = Verifier(self)  # type: ignore[no-untyped-call]  # policy/verify.py is not strict
            renew_after_fork(self._trust)  # its lock (policy/ does not import storage/)
        return self._trust

    @property
    def index(self) -> NoteIndex:
        """The disposable cache beside the notes (created on first use)."""
        if self._index is None:
            from ..search.note_index import NoteIndex
            self._index = NoteIndex(self)  # type: ignore[no-untyped-call]  # search/ is not strict
            if self._keep_warm:  # one made anew (a forget, a sync, another embedder): warmed when idle
                self._index.keep_warm(now=False)
            if self._catch_up_aside:
                self._index.aside = self._aside_for(self._index)
        return self._index

    def catch_up_aside(self) -> None:
        """This process will answer many calls while it writes (the HTTP server): its index's
        catch-up to disk runs in a process of its own (search/catch_up_aside.py), also for the
        indexes it opens anew later. Not with an embedder behind an HTTP API: the child would
        need the acting person's secrets."""
        self._catch_up_aside = True
        if self._index is not None:  # else the index property gives it one when it is made
            self._index.aside = self._aside_for(self._index)

    def _aside_for(self, index: NoteIndex) -> CatchUpAside | None:
        from ..search.catch_up_aside import CatchUpAside
        from ..search.embedders import is_local

        if index.embedder is not None and not is_local(index.embedder):
            return None
        return CatchUpAside(self.root, index.model_id, self.config.embedder.backend)

    def keep_warm(self, *, as_user: str | None = None) -> None:
        """This process will live (the MCP server, the daemon): its search caches are warmed now
        and kept warm, also in the indexes it opens anew later (search/warm.py). ``as_user``:
        who will ask (the MCP server's one user), so their BM25F weights are warmed too (else
        those of whoever asks last, once idle)."""
        self._keep_warm = True
        if as_user is not None:
            roots = tuple(sorted(self.access.readable_roots(self.check_user(as_user))))
            with self.index.mutex:  # not in the middle of another reader's recall
                self.index.reader_roots = roots
        self.index.keep_warm()

    def warm_writes(self) -> None:
        """This process will write for a while (the HTTP server): trust's verdicts on every note
        and each scope root's view entries are made now, not by the first write that needs them
        (a first write at 10,000 notes spent ~6 s on them; later ones move them forward)."""
        head = self.store.head()
        if head is None:
            return
        self.trust.flags(head)
        views = self.views
        for root in sorted(views.all_roots(head)):
            views.entries.state(root, head, {})

    @property
    def recaller(self) -> Recall:
        """The recall over :attr:`index` (made on first use, remade by :meth:`reset_recaller`).
        It asks this repo's ``get`` for exact lookups: the state is always the facade's."""
        if self._recall is None:
            from ..search.recall import Recall
            self._recall = Recall(self, self.index)
        return self._recall

    def reset_recaller(self) -> None:
        self._recall = None

    @property
    def views(self) -> Views:
        """Renders views from git trees; shares the per-root entries kept across writes. Notes
        whose latest commit no permitted writer made stay out of views (trust's flags)."""
        from ..views.fresh import Views
        from ..views.render import MetaCache, RootEntries

        if self._root_blobs is None:
            if self._meta_cache is None:
                self._meta_cache = MetaCache(cache_dir(self.root) / "viewmeta.sqlite")
            self._root_blobs = RootEntries(self.store, self._meta_cache)
        return Views(self.store, self._root_blobs, self.config, flags=lambda rev: set(self.trust.flags(rev)))

    def give_way(self) -> None:
        """A write is about to spend its CPU: recalls holding the search index in this process
        go first (search/note_index.NoteIndex.give_way, a few ms at most); never raises."""
        if self._index is not None:
            try:
                self._index.give_way()
            except Exception:  # noqa: BLE001 -- only an order of turns
                pass

    def writing(self, notes: list[Note]) -> None:
        """A write of ``notes`` has passed its checks: the search index starts
        embedding them for the recall that follows; never raises."""
        if self._index is not None:
            try:
                self._index.writing(notes)
            except Exception:  # noqa: BLE001 -- only a head start; the catch-up embeds itself
                pass

    def committing(self, changes: dict[str, bytes | None]) -> None:
        """A commit of ``changes`` is being made: the search index starts embedding its notes
        (beside the commit, on the other core) for the recall that follows; never raises."""
        if self._index is not None:
            try:
                self._index.committing(changes)
            except Exception:  # noqa: BLE001 -- only a head start; the catch-up embeds itself
                pass

    def committed(self, commit: str, parent: str | None, changes: dict[str, bytes | None], email: str) -> None:
        """Tell the caches about a commit just made (views' entries, trust, the search index:
        what the next catch-up would diff trees for); never raises."""
        if self._index is not None:
            self._index.committed(parent, commit, changes)
        if self._root_blobs is not None:
            try:
                self._root_blobs.committed(commit, parent, changes)
            except Exception:  # noqa: BLE001 -- committed already; a cold cache is only slower
                self._root_blobs = None
        try:
            self.trust.committed(commit, parent, changes, email)
        except Exception:  # noqa: BLE001 -- committed already; the verifier catches up from git
            self._trust = None

    def close(self, *, leave_housekeeping: bool = False) -> None:
        """Write what the caches owe and wait for the housekeeping this process started, so
        nothing of mdmem's writes under the repository once close returns; a one-shot CLI
        call says ``leave_housekeeping`` and lets it run on (as git's detached gc does)."""
        self.store.flush_index()  # git's index entries a deferring store still owes
        if not leave_housekeeping:
            self.store.wait_for_housekeeping()
        if self._trust is not None:
            self._trust.flush()
        if self._index is not None:
            self._index.close()
        if self._meta_cache is not None:
            self._meta_cache.close()
            self._meta_cache = None
            self._root_blobs = None  # it reads through the cache just closed

    def reset_caches(self) -> None:
        """After a history rewrite every in-process cache describes commits that are gone."""
        self._trust = None  # not kept at close: its state may name commits (and paths) erased
        forget_read_notes()
        # Not waited for here: housekeeping takes the repo lock a caller may still hold.
        self.close(leave_housekeeping=True)
        self._index = self._recall = self._meta_cache = self._root_blobs = None
        delay = self.store.index_delay  # the MCP server's deferral, kept across a forget or sync
        housekeepers = self.store.housekeepers
        self.store = self._open_store(self.config.identity)
        self.store.housekeepers = housekeepers
        self.store.signing_key = self.user_config.signing_key
        self.store.index_delay = delay

    def _open_store(self, identity: Callable[[str], tuple[str, str]]) -> GitStore:
        store = GitStore(self.root, identity)
        store.on_rewritten = self._history_rewritten
        return store

    def _history_rewritten(self) -> None:
        """Another process's erasure ended (the store saw its stamp move, maybe inside a write
        that waited for it): the views' kept entries and trust's verdicts name commits that are
        gone, so they are dropped and made again from git. The search index finds its recorded
        commit gone by itself (the store's repository was opened anew) and rebuilds."""
        self._trust = None
        self._root_blobs = None
        self._recall = None

    def reload(self) -> None:
        """Forget every in-process cache (history was rewritten under us)."""
        self.reset_caches()
