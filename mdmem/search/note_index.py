"""NoteIndex: keeps the full-text index, the vectors and the embedding cache following the
notes, incrementally: from the commit it last reflected to HEAD, then the work tree.

Deleting ``.git/mdmem/`` loses nothing: the next call rebuilds from the notes.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterable, Set as AbstractSet
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .. import cache as cachefiles
from ..errors import NoteInvalid
from ..model.layout import is_note_path
from ..model.note import Note
from ..model.validate import validate_note
from ..results import ProgressCallback
from ..storage.locks import Lock, renew_after_fork
from ..storage.queries import blob_hash
from ..storage.tree_watch import TreeWatch
from ..storage.worktree import StoredNote, iter_note_paths, read_note, validated
from . import bm25, fulltext, postings
from .doctable import VECTOR_FIELD, DocTable, prepare_vectors
from .bulkwriter import BulkWriter
from .embed_ahead import EmbedAhead, note_texts
from .embedders import Embedder, is_local, make_embedder
from .embedding_cache import EmbeddingCache, cache_key
from ..storage.gitdir import cache_dir, cache_locks_dir, clear_cache_path
from .index_worker import Prebuilt
from .recent import Analysed, RecentNotes
from .warm import Warmer

SCHEMA_VERSION = 12  # 10: context; 11: tags; 12: B 0.3, a context's mean vector
# Notes a process keeps in memory (search/recent.py) before a catch-up writes them to disk.
# A write on disk cost ~80 ms at 10k notes (Whoosh writer, commit, merges, every segment
# reader reopened); into a Whoosh RAM segment ~28 ms; as plain postings ~0.6 ms (load ~14).
RECENT_MAX = 200
# Held this many, a server starts the disk catch-up in a process of its own (``aside``): it ends
# long before the segment is full, and no recall waits for it under the mutex.
ASIDE_AT = RECENT_MAX // 2
GIVE_WAY_SECONDS = 0.03  # a write waits at most this, at each of its steps, for the recalls holding the index
SETTLE_SECONDS = 2.0  # a recall waits at most this for committed notes' vectors before the mutex
MAX_ANALYSED_AHEAD = 8  # notes of one commit analysed by its writer (a bulk batch's catch-up does its own)
WRITTEN_MAX = 64  # a larger commit (a bulk batch) is not hashed here: its catch-up reads git
# A catch-up compares at most this many of the commits' files with HEAD (see _changes): a bulk
# import's catch-up would read each file twice.
RECHECK_COMMITTED_MAX = 200
WORKTREE_CHECK_SECONDS = 1.0


@dataclass
class SyncReport:
    indexed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)
    rebuilt: bool = False
    embedded: int = 0
    cached: int = 0
    joined: int = 0  # notes indexed by a bulk import's worker (search/index_worker.py), not read again

    def to_dict(self) -> dict:
        return {"indexed": len(self.indexed), "removed": len(self.removed), "broken": self.broken,
                "rebuilt": self.rebuilt, "embedded": self.embedded, "from_cache": self.cached}


class NoteIndex:
    """The index of one memory repo's notes. ``repo`` needs only a narrow part of the repo:
    ``store`` (head, note_changes, blob_id(s), read_blob, has_object, dirty_note_paths),
    ``trust.flags``, ``contracts``, ``config``, ``user_config`` and ``root``; ``base`` is the
    cache folder (default: the repo's, in its git directory). A subclass whose notes live
    in several work trees says where each is (:meth:`worktree_of`, :meth:`note_paths`,
    :meth:`start_watch`): a workspace's index over its mounts (workspace/index.py)."""

    def __init__(self, repo, base=None):
        self.repo = repo
        self.base = base if base is not None else cache_dir(repo.root)
        self.state_path = self.base / "state.json"
        self._embedder: Embedder | None | bool = False  # False: not yet made
        self._ix = None
        self._searcher = None  # the index on disk
        # Big segments' long posting lists, decoded once into files beside them (postings.py).
        self._long = postings.Attacher(self.base / "fulltext", fulltext.FIELD_BOOSTS, self.lock)
        self._recent: RecentNotes | None = None  # changes since the index on disk, in memory
        self._analysed = Analysed(2 * RECENT_MAX)  # what the in-memory segments analysed, for the next
        self._combined = None  # the searcher over both
        self._table: DocTable | None = None
        self._state_seen: dict | None = None  # the state.json our searcher reflects
        self._cache: EmbeddingCache | None = None
        self._ahead = EmbedAhead()  # this process's writes, embedded after they commit
        self._last_worktree_check = 0.0
        self._worktree_interval = 0.0
        self.worktree_check_seconds = WORKTREE_CHECK_SECONDS
        # Hand edits are found from the kernel's events (storage.tree_watch); False walks
        # the tree instead (for measuring the difference).
        self.watch_tree = True
        self._watch: TreeWatch | None = None
        self._watch_tried = False
        self._walked = False  # the first call's walk, made without a watch
        # A catch-up that was to walk the tree failed (an embedding service not up yet, the
        # index lock held): the next one walks instead, or an edit made before the watch
        # started (it has no event) would stay unseen until the file is written again.
        self._walk_owed = False
        self._touched: set[str] = set()  # note files the watch saw written, not yet applied
        # parent commit -> (commit, note paths it changed), told by this process's writes: a
        # catch-up along them needs no tree diff (~3 ms at 10k notes, 11 ms under load).
        self._hints: dict[str, tuple[str, frozenset[str]]] = {}
        # Guards the hints, not the mutex: a write tells its commit at once, never waiting
        # behind a recall holding the mutex.
        self._told_lock = threading.Lock()
        self._awaited: set[str] = set()  # cache keys of committed notes' texts embedded ahead (settle_vectors)
        # (commit, path -> blob id or None) of this process's last small commit: the files it
        # wrote are the watch's next events, checked against HEAD's version (a tree lookup
        # through the subject's big folder, ~0.5-0.9 ms a path at 10k notes, twice a write).
        self._written: tuple[str, dict[str, str | None]] | None = None
        self.tree_walks = 0  # whole work-tree walks made by this process (measured by tests)
        # One thread at a time in this process (the MCP server's watcher and its tool calls
        # share one index); other processes are kept out by the index file lock.
        self.mutex = threading.RLock()
        self.wanting = 0  # calls waiting for the mutex (held()): a warming pass gives way to them
        self._wanting_lock = threading.Lock()
        self._holder: int | None = None  # the thread holding the mutex through held() (give_way)
        self._quiet = threading.Condition()
        self._warmer: Warmer | None = None  # keep_warm: a long-lived process's caches (search/warm.py)
        self.last_used = time.monotonic()  # the last catch-up asked for (a warm waits for quiet)
        self.reader_roots: tuple[str, ...] | None = None  # the roots the last recall could read (warm.py)
        # A long-lived server's disk catch-up in a process of its own (search/catch_up_aside.py:
        # start() and wait()), begun at ASIDE_AT notes held in memory. Without it the recall
        # that found the segment full wrote it to disk under the mutex: 150-220 ms at 10k notes,
        # with every recall queued behind it.
        self.aside = None
        renew_after_fork(self)
        # Progress for work the caller did not ask for: the first recall on a fresh clone
        # builds the whole index (11.5 s at 1,980 notes, silent before). The CLI sets it.
        self.progress: ProgressCallback | None = None

    def renew_after_fork(self) -> None:
        """A forked child's mutex anew (storage.locks.renew_after_fork); the parent's warming
        thread is not the child's."""
        self.mutex = threading.RLock()
        self.wanting, self._wanting_lock = 0, threading.Lock()
        self._holder, self._quiet = None, threading.Condition()
        self._told_lock = threading.Lock()
        self._warmer = None

    @contextmanager
    def held(self):
        """The mutex, for a call (a recall, a catch-up): said before it is waited for, so a
        warming pass lets go and waits (Python's locks favour the thread that just let go: a
        recall waited out most of a pass, 80-333 ms)."""
        with self._wanting_lock:
            self.wanting += 1
        try:
            self.mutex.acquire()
        finally:
            with self._wanting_lock:
                self.wanting -= 1
        me = threading.get_ident()
        outermost = self._holder != me  # the mutex is ours: only this thread sets it to us
        try:
            if outermost:
                with self._quiet:
                    self._holder = me
            yield
        finally:
            if outermost:
                with self._quiet:
                    self._holder = None
                    self._quiet.notify_all()
            self.mutex.release()

    def give_way(self, at_most: float = GIVE_WAY_SECONDS) -> None:
        """For a write about to spend its CPU (a draft, the views, the commit): wait while a
        call of another thread holds the index (a recall), at most ``at_most`` seconds. A write
        beside a recall took most of the recall's turn: Python threads share one GIL, pygit2
        keeps it through libgit2's file calls, and in the holds of 40 ms and more the writes
        used 16-47 ms of CPU against the recall's 5-14. Recalls first, writes a few ms later:
        the write goal (remember p99 <= 150 ms) has the room, the recall goal (50) had none."""
        if self._holder is None:
            return
        me, deadline = threading.get_ident(), time.monotonic() + at_most
        with self._quiet:
            while self._holder not in (None, me):
                left = deadline - time.monotonic()
                if left <= 0 or not self._quiet.wait(left):
                    return

    def keep_warm(self, *, now: bool = True) -> None:
        """Warm this process's search caches (``now``: in this thread, before returning), and keep
        them warm when idle on a thread of its own (see search/warm.py): for a process that lives
        (the MCP server, the daemon), not a one-shot call."""
        if self._warmer is None:
            self._warmer = Warmer(self)
        if now:
            self._warmer.warm_now()
        self._warmer.start()

    def follow_tree(self) -> None:
        """For a process that lives (a server): its next catch-up starts the watch and walks the
        work tree once, and no call after it walks again. A one-shot call's first catch-up walks
        without a watch and only a second one starts it, so a server's first two client calls
        each walked (75-600 ms at 10k notes under load, every other recall queued behind)."""
        self._walked = True

    @property
    def warm_passes(self) -> int:
        """Whole warming passes made (keep_warm's, then the idle ones); 0 if never asked."""
        return self._warmer.passes if self._warmer is not None else 0

    def open_searcher(self):
        """The searcher recall would use now if it is open already, else None (opens nothing)."""
        return self._combined if self._recent is not None else self._searcher

    # --- parts ----------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder | None:
        if self._embedder is False:
            with self.mutex:  # made once: a recall asks for it before it holds the index
                if self._embedder is False:
                    # Kind and model from the repo; where text goes and with which secret, from the user.
                    self._embedder = make_embedder(self.repo.user_config.embedder(self.repo.config.embedder),
                                                   cache_dir=self.base / "models")
        return self._embedder

    @property
    def model_id(self) -> str:
        return self.embedder.model_id if self.embedder is not None else "none"

    @property
    def cache(self) -> EmbeddingCache:
        if self._cache is None:
            self._cache = EmbeddingCache(self.base / "embeddings.sqlite")
        return self._cache

    def lock(self) -> Lock:
        """The index's cross-process lock (LockTimeout after two minutes)."""
        return folder_index_lock(self.base)

    # --- where the notes are ----------------------------------------------------------
    def worktree_of(self, path: str) -> Path:
        """The work tree the note file at ``path`` (a repository path) is read from."""
        return self.repo.root

    def note_paths(self) -> list[str]:
        """Every note file in the work tree (a rebuild reads them all)."""
        return iter_note_paths(self.repo.root)

    def start_watch(self):
        """The kernel's events for the work tree's note folders (None: walk instead)."""
        return TreeWatch.start(self.repo.root)

    def _load_state(self) -> dict:
        return cachefiles.read_state(self.state_path, _valid_state)

    def _save_state(self, state: dict) -> None:
        cachefiles.write_state(self.state_path, state)
        self._state_seen = state

    def close(self) -> None:
        if self.aside is not None and not self.repo.store.holds_lock():
            # Nothing this process started goes on writing the index after it; not under the
            # repo's locks (a forget closes under the erasure gate, which the child waits for).
            self.aside.wait()
        if self._warmer is not None:
            self._warmer.stop()
            self._warmer = None
        self._ahead.close()
        if self._watch is not None:
            self._watch.close()
        self._watch, self._watch_tried, self._walked = None, False, False
        self._close_index()

    def _close_index(self) -> None:
        self._drop_recent()
        # Both hold notes' text: what the segments analysed, and the table made over the
        # searcher of the last segment (its reader keeps every note it held).
        self._analysed.clear()
        self._table = None
        if self._searcher is not None:
            self._searcher.close()
        self._searcher = None
        if self._cache is not None:
            self._cache.close()
        self._cache = None
        self._ix = None
        self._long.close()

    # --- catching up ------------------------------------------------------------------
    def sync(self, *, worktree: bool | None = None, progress: ProgressCallback | None = None,
             prebuilt: Prebuilt | None = None) -> SyncReport:
        """Catch up with HEAD (diff from the recorded commit) and with the work tree.
        ``prebuilt``: a segment a bulk import's worker built (search/index_worker.py), joined
        instead of reading and indexing its notes again when it holds exactly the versions
        HEAD and the work tree hold for its paths; else ignored."""
        with self.held():
            self.last_used = time.monotonic()
            return self._sync(worktree=worktree, progress=progress, prebuilt=prebuilt)

    def _sync(self, *, worktree: bool | None, progress: ProgressCallback | None,
              prebuilt: Prebuilt | None = None) -> SyncReport:
        state = self._load_state()
        if state != self._state_seen and not _marked_pending(state, self._state_seen):
            # Another process moved the index on (its writes, its catch-up): a searcher opened
            # before that still shows the old notes.
            self._refresh()
            self._drop_recent()
            self._state_seen = state
        # What this process's searcher reflects: the index on disk, plus the notes in memory.
        seen = self._recent.state if self._recent is not None else state
        head = self.repo.store.head()
        scan, touched = self._tree_check(worktree)
        scan = scan or (worktree is None and self._walk_owed)
        if (not scan and not touched and seen.get("commit") == head
                and not self._needs_rebuild(state, cheap=True)):
            return SyncReport()
        if not scan and self._ix is not None and seen.get("commit") \
                and not self._needs_rebuild(state, cheap=True) \
                and (seen["commit"] == head or self.repo.store.has_object(seen["commit"])):
            # (A recorded commit that is gone -- history rewritten, a workspace's mount removed
            # -- cannot be diffed from: the catch-up below rebuilds.)
            # A few notes changed (a write, a hand edit): into the in-memory segment, no lock,
            # nothing on disk. Many, or a walk: the catch-up below writes to disk.
            changed, fresh, dirty = self._changes(seen, head, scan=False)
            held = len(self._recent.paths) if self._recent is not None else 0
            if len(changed) + held <= RECENT_MAX:
                report = self._apply_recent(sorted(changed), seen.get("broken", {}))
                assert self._recent is not None
                self._recent.state = {**seen, "commit": head, "dirty": dirty, "broken": report.broken}
                self._touched.clear()
                if seen.get("commit") != head:
                    # Verify who made the commits caught up with; at HEAD, never behind what a
                    # write told the verifier (a head behind its cache is judged from scratch).
                    self.repo.trust.flags()
                # Counted without the work-tree files held (hand edits): the child sees only
                # HEAD, so with them counted every write started another child that moved nothing.
                if (self.aside is not None and len(self._recent.paths) >= ASIDE_AT
                        and len(self._recent.paths - dirty.keys()) >= ASIDE_AT):
                    self.aside.start()
                return report
        self._drop_recent()
        self._walk_owed = self._walk_owed or scan
        report = self._sync_on_disk(scan=scan, progress=progress, prebuilt=prebuilt, may_rebuild=True)
        assert report is not None
        if scan:
            self._walk_owed = False
        return report

    def catch_up_on_disk(self, model_id: str) -> SyncReport | None:
        """The catch-up of the index on disk to HEAD, as :meth:`sync` makes it once this
        process's in-memory segment is full, for a process of its own (ops/index_catch_up.py)
        while the server goes on answering. None, with nothing done, when it would be a rebuild
        or the index is another model's than ``model_id`` (the server's, which would then
        rebuild it back)."""
        if model_id != self.model_id:
            return None
        with self.held():
            return self._sync_on_disk(scan=False, progress=None, prebuilt=None, may_rebuild=False)

    def _sync_on_disk(self, *, scan: bool, progress: ProgressCallback | None, prebuilt: Prebuilt | None,
                      may_rebuild: bool) -> SyncReport | None:
        with self.lock():
            # Decided again under the lock: another process may have just rebuilt, and a
            # second rebuild would pull the index away from under it.
            self._recover_folders()
            state = self._load_state()
            if self._needs_rebuild(state) or (state.get("commit") and not self.repo.store.has_object(state["commit"])):
                if not may_rebuild:
                    return None
                self._touched.clear()
                return self._rebuild(progress=progress or self.progress, prebuilt=prebuilt)
            # HEAD again, under the lock: another process may have caught the index up past the
            # HEAD read above while this one waited. Saving that older commit moved state.json
            # back, and the next catch-up added notes already indexed without removing their
            # old versions (superseded text found by every process).
            head = self.repo.store.head()
            changed, fresh, dirty = self._changes(state, head, scan=scan)
            if state.get("pending"):
                # A catch-up was killed around its index commit: the notes "new in HEAD" may be
                # in the index already, so each replaces what is there (no add without delete).
                fresh, prebuilt = set(), None
            elif changed:
                # Said before the index commit: a kill between it and the save below left notes
                # in the index that state.json said were not, and the next catch-up added the
                # "fresh" ones again beside them (duplicates, a superseded version kept).
                # The save below drops the mark.
                cachefiles.write_state(self.state_path, {**state, "pending": head})
            report = self._apply(sorted(changed), state.get("broken", {}), progress=progress or self.progress,
                                 fresh=fresh, prebuilt=self._usable(prebuilt, set(changed), dirty))
            self._save_state({"schema": SCHEMA_VERSION, "model": self.model_id, "commit": head,
                              "dirty": dirty, "broken": report.broken})
            self._touched.clear()
            if state.get("commit") != head:
                self.repo.trust.flags()  # who made the commits caught up with (at HEAD: see _sync)
            return report

    def _changes(self, state: dict, head: str | None, *, scan: bool) -> tuple[set[str], set[str], dict[str, str]]:
        """From what ``state`` reflects to HEAD and the work tree: (note paths to index again,
        those among them new in HEAD and never indexed, the work-tree files that differ from
        HEAD after it)."""
        changed: set[str] = set()
        moved = state.get("commit") != head
        fresh: set[str] = set()
        committed: set[str] = set()
        dirty = dict(state.get("dirty", {}))
        if moved:
            committed, added = self._committed_changes(state.get("commit"), head)
            changed |= committed
            # New in HEAD and never seen in the work tree: not in the index, so added
            # without the delete-by-path an update costs (a lookup in every segment).
            fresh = added - set(dirty) - set(state.get("broken", {}))
        if scan:
            current_dirty = self._scan_worktree()
            # Only files whose state differs from what the index took: one still holding the
            # version indexed needs nothing (else every process's first walk re-indexed every
            # note a person left edited, on disk, each start).
            changed |= {p for p in set(dirty) | set(current_dirty) if dirty.get(p) != current_dirty.get(p)}
            dirty = current_dirty
            fresh -= set(dirty)
        else:
            # Only the files the kernel saw written (and, after a commit, the ones that
            # were dirty, which may now match HEAD): no walk over the work tree. And the
            # commit's own files, when few: a commit moves the branch before it writes the work
            # tree, and a catch-up in between read the old file as HEAD's, for good (the file's
            # event then found it "equal to HEAD", as recorded). Compared here,
            # such a file is recorded as differing, and its event indexes it again.
            recheck = set(self._touched) | (set(dirty) if moved else set())
            if len(committed) <= RECHECK_COMMITTED_MAX:
                recheck |= committed
            for path in recheck:
                now_state = self._tree_state(path)
                if now_state != dirty.get(path):
                    changed.add(path)
                if now_state is None:
                    dirty.pop(path, None)
                else:
                    dirty[path] = now_state
        changed |= set(state.get("broken", {}))
        return changed, fresh, dirty

    @property
    def watching(self) -> bool:
        """Whether hand edits are found from the kernel's events (else by walking the tree)."""
        return self._watch is not None

    def _tree_check(self, worktree: bool | None) -> tuple[bool, bool]:
        """(walk the whole work tree?, did the watch see note files written?).

        The first call in a process walks the tree (edits made while no process watched).
        The second starts the watch and walks once more (a one-call process, like the CLI,
        never pays for watching ~a folder per subject); after that the kernel's events name
        the files written, and the tree is walked again only when they cannot (overflow, a
        folder moved away). Without inotify, the walk is spaced by 20 times its cost, at
        least ``worktree_check_seconds``."""
        if worktree is not None:
            return worktree, False
        if self._watch is None and not self._watch_tried:
            if not self._walked:
                self._walked = True
                return True, False
            self._watch_tried = True
            # Started before the walk, so nothing written in between is missed.
            self._watch = self.start_watch() if self.watch_tree else None
            return True, False
        if self._watch is not None:
            events = self._watch.changes()
            if events is None:
                return True, False
            self._touched |= {p for p in events if is_note_path(p)}
            return False, bool(self._touched)
        if not self.worktree_check_seconds:
            return True, False
        interval = max(self.worktree_check_seconds, self._worktree_interval)
        return time.monotonic() - self._last_worktree_check >= interval, False

    def _scan_worktree(self) -> dict[str, str]:
        self._last_worktree_check = started = time.monotonic()
        dirty = self._worktree_dirty()
        # The walk stats every file (~40 ms at 10k notes, ~300 ms at 100k): without events,
        # keep it to about 5% of the time by spacing walks by 20 times their cost.
        self._worktree_interval = max(self.worktree_check_seconds, 20 * (time.monotonic() - started))
        return dirty

    def _tree_state(self, path: str) -> str | None:
        """None if the work-tree file equals HEAD's; else its blob id, or "deleted"."""
        full = self.worktree_of(path) / path
        committed = self.committed_blob(path)
        if full.is_symlink():
            return f"symlink:{os.readlink(full)}"  # never a valid note; read_note says why
        try:
            current = blob_hash(full.read_bytes())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None if committed is None else "deleted"
        return None if current == committed else current

    def committed_blob(self, path: str) -> str | None:
        """HEAD's blob id at ``path`` (None: not in HEAD, or no commit yet)."""
        head, written = self.repo.store.head(), self._written
        if written is not None and written[0] == head and path in written[1]:
            return written[1][path]
        return self.repo.store.blob_id(path) if head else None

    def _needs_rebuild(self, state: dict, *, cheap: bool = False) -> bool:
        folder = self.base / "fulltext"
        # Opening the index's table of contents costs ~0.5 ms; once open here, the folder
        # still being there is enough (someone deleting .git/mdmem/ removes state.json too).
        present = folder.is_dir() if cheap and self._ix is not None else fulltext.windex.exists_in(str(folder))
        return state.get("schema") != SCHEMA_VERSION or state.get("model") != self.model_id or not present

    def writing(self, notes: Iterable[Note]) -> None:
        """A write of ``notes`` has begun (checked, not yet committed): their texts are
        embedded from now, as in :meth:`committing`, a few milliseconds earlier."""
        if is_local(self._embedder):
            self._ahead.start_texts(self._embedder, note_texts(self.model_id, notes))

    def committing(self, changes: dict[str, bytes | None]) -> None:
        """This process is about to commit ``changes``: their notes are embedded on another
        thread while the commit is made, if this process has a local embedder ready (never
        made here); the next recall's catch-up takes the vectors (search/embed_ahead.py). A
        commit that does not happen leaves only a guess no catch-up asks for. A server's
        embedder gets them only once committed (:meth:`committed`)."""
        if is_local(self._embedder):
            self._ahead.start(self._embedder, changes)

    def committed(self, parent: str | None, commit: str, changes: dict[str, bytes | None]) -> None:
        """This process committed ``changes`` on ``parent``, making ``commit``: the next
        catch-up diffs only these paths. Their notes are embedded ahead (those not handed
        over already by :meth:`writing` or :meth:`committing`: nothing is embedded twice)."""
        if self._embedder:
            self._ahead.start(self._embedder, changes)
        self._analyse_ahead(changes)
        self._written = (commit, {p: None if d is None else blob_hash(d) for p, d in changes.items()}) \
            if len(changes) <= WRITTEN_MAX else None
        if parent is None:
            return
        with self._told_lock:
            if len(self._hints) >= 256:
                self._hints.pop(next(iter(self._hints)))
            self._hints[parent] = (commit, frozenset(p for p in changes if is_note_path(p)))

    def _analyse_ahead(self, changes: dict[str, bytes | None]) -> None:
        """The notes this process just committed, analysed as the index will hold them, here
        on the writer's thread (the index mutex not held), for the catch-up that indexes them
        next; only in a process whose index is open (one that recalls), never raising."""
        ix = self._ix
        if ix is None or len(changes) > MAX_ANALYSED_AHEAD:
            return
        for path, data in changes.items():
            if data is None or not is_note_path(path):
                continue
            try:
                stored = validated(path, data, self.repo.contracts, max_bytes=self.repo.config.note_max_bytes)
                doc = fulltext.note_doc(stored)
                self._analysed.put_text(ix.schema, doc)
                if self._embedder:
                    with self._told_lock:
                        self._awaited.update(note_texts(self._embedder.model_id, [stored.note]))
            except Exception:  # noqa: BLE001 -- only a head start; the catch-up analyses itself
                continue

    def settle_vectors(self, timeout: float = SETTLE_SECONDS) -> None:
        """Wait, before taking the index mutex, for the vectors still being made of the notes
        this process committed (embedded ahead): the catch-up that takes them then finds them
        made. It waited for one holding the mutex, every recall queued behind (20-28 ms, in 4
        of the 10 longest holds of a 120 s server run). At most ``timeout`` seconds; past that
        the catch-up waits as before."""
        with self._told_lock:
            keys = set(self._awaited)
        if keys:
            # Every recall that comes meanwhile waits here too (not the first only); the keys
            # made go once made (taken or not, they are not waited for again).
            made = self._ahead.settle(keys, timeout)
            with self._told_lock:
                self._awaited -= made

    def embed_bulk(self, notes: Iterable[Note]) -> None:
        """A bulk import committed ``notes``: embedded on the embed-ahead worker while the
        import goes on (its catch-up takes the vectors); the embedder is made for it, and the
        texts the cache already holds are left out. BM25 only: nothing to do."""
        with self.mutex:
            embedder = self.embedder
            if embedder is None:
                return
            texts = note_texts(self.model_id, notes)
            found = self.cache.get_many(sorted(texts))
            self._ahead.start_bulk(embedder, {k: t for k, t in texts.items() if k not in found})

    def drop_bulk(self) -> None:
        """A bulk import ended without its catch-up: what was embedded ahead for it is let go."""
        self._ahead.drop_bulk()

    def _committed_changes(self, old: str | None, new: str | None) -> tuple[set[str], set[str]]:
        """Note paths changed between two commits, and those among them that ``old`` lacked
        (only known from a tree diff; the writes told along the way say only what changed)."""
        if new is None:
            return set(), set()
        told: set[str] = set()
        at = old
        with self._told_lock:
            while at is not None and at != new and at in self._hints:
                at, paths = self._hints[at]
                told |= paths
        if old is not None and at == new and len(told) <= RECENT_MAX:
            return told, set()
        # Many paths (a bulk import): the tree diff (~10 ms at 10k) also says which are new,
        # and those are added without a delete-by-path lookup in every segment.
        changes = self.repo.store.note_changes(old, new, renames=True)
        return {c.path for c in changes}, {c.path for c in changes if c.added}

    def _worktree_dirty(self) -> dict[str, str]:
        """Note files whose work-tree content differs from HEAD (edited, new, deleted)."""
        self.tree_walks += 1
        return self.repo.store.dirty_note_paths()

    def _apply(self, paths: list[str], broken: dict, *, progress: ProgressCallback | None,
               fresh: AbstractSet[str] = frozenset(), prebuilt: Prebuilt | None = None) -> SyncReport:
        report = SyncReport(broken={p: r for p, r in broken.items() if p not in paths})
        ix = self._open()
        if prebuilt is not None and set(ix.schema.names()) != set(fulltext.make_schema().names()):
            prebuilt = None  # an index with other fields (vectors): not the worker's schema
        joined = {p for p, _ in prebuilt.docs} if prebuilt is not None else set()
        upserts = self._read_notes([p for p in paths if p not in joined], report, progress=progress)
        found = {s.path for s in upserts} | joined
        removals = [p for p in paths if p not in found]  # deleted, or broken: out of the index
        if upserts or removals or joined:
            # Embed first: an unreachable embedder fails before anything is written.
            docs = self._documents(upserts, report, progress=progress)
            writer = BulkWriter(ix)
            try:
                prepare_vectors(writer, docs)
                # A joined note's older version goes, as update_document would remove it.
                for path in removals + sorted(joined - set(fresh)):
                    writer.delete_by_term("doc_id", path)
                fulltext.add_documents(writer, docs, fresh=fresh, progress=progress)
                if prebuilt is None:
                    writer.commit(mergetype=fulltext.merge_when_many)
                else:
                    writer.commit(mergetype=fulltext.adopt_segments(self.base / "fulltext", prebuilt.folder,
                                                                    prebuilt.segments, fulltext.merge_when_many))
            except BaseException:
                writer.cancel()
                raise
            self._refresh()
        report.indexed = [p for p in paths if p in found]
        report.removed = removals
        report.joined = len(joined)
        return report

    def _usable(self, prebuilt: Prebuilt | None, wanted: AbstractSet[str], dirty: dict) -> Prebuilt | None:
        """``prebuilt`` if every document in it is the version to index now: one per path,
        each path among ``wanted`` (to be indexed again), unchanged in the work tree (not in
        ``dirty``) and holding HEAD's blob; and no embedder (its documents have no vectors).
        Anything else (a path written twice, a hand edit, another process's commit): None,
        and the notes are read from disk as before."""
        if prebuilt is None or self.embedder is not None:
            return None
        paths = [p for p, _ in prebuilt.docs]
        if len(set(paths)) != len(paths) or not set(paths) <= wanted or set(paths) & set(dirty):
            return None
        head = self.repo.store.blob_ids(paths)
        if any(head.get(p) != v for p, v in prebuilt.docs):
            return None
        return prebuilt

    def _apply_recent(self, paths: list[str], broken: dict) -> SyncReport:
        """Index ``paths`` into the in-memory segment; their versions on disk are hidden."""
        report = SyncReport(broken={p: r for p, r in broken.items() if p not in paths})
        upserts = self._read_notes(paths, report, progress=None)
        docs = self._documents(upserts, report, progress=None)
        if self._recent is None:
            self._recent = RecentNotes(self._ix.schema, self._indexed_doc, self._analysed)
        self._recent.apply(paths, docs)
        self._combined = None
        report.indexed = [s.path for s in upserts]
        found = set(report.indexed)
        report.removed = [p for p in paths if p not in found]
        return report

    def _indexed_doc(self, fields: dict) -> dict | None:
        """The index document the disk index made from a note version (its stored fields
        name the path and blob), read back from git; None if that blob is not there (a hand
        edit indexed from the work tree) or no longer reads as a note."""
        try:
            data = self.repo.store.read_blob(fields["version"])
            note = validate_note(fields["path"], data, self.repo.contracts)
        except (KeyError, ValueError, NoteInvalid):
            return None
        return fulltext.note_doc(StoredNote(fields["path"], fields["version"], note))

    def _drop_recent(self) -> None:
        """Forget the in-memory segment. The files it held in a version other than HEAD's are
        checked again by the next catch-up (a hand edit's event was spent on it). Not the
        others: each equalled HEAD when last seen, so a change since has an event of its own,
        and the commits since the index on disk are diffed anyway. Checking every note held
        (~100 each time a server's disk catch-up lands) was 12-14 ms of CPU under the mutex."""
        if self._recent is not None:
            # A segment never caught up to the end (its apply raised) says nothing: all of it.
            self._touched |= set(self._recent.state["dirty"]) if "dirty" in self._recent.state \
                else self._recent.paths
        self._recent = None
        self._combined = None

    def _read_notes(self, paths: list[str], report: SyncReport, *,
                    progress: ProgressCallback | None) -> list[StoredNote]:
        """The valid notes at ``paths``; broken ones go into the report, missing ones nowhere."""
        notes: list[StoredNote] = []
        report_every = 0 if progress is None or len(paths) < 64 else 64
        for n, path in enumerate(paths, 1):
            try:
                stored = read_note(self.worktree_of(path), path, self.repo.contracts,
                                   max_bytes=self.repo.config.note_max_bytes)
            except NoteInvalid as exc:
                report.broken[path] = f"{exc.field}: {exc.reason}"
                stored = None
            if stored is not None:
                notes.append(stored)
            if report_every and (n % report_every == 0 or n == len(paths)):
                progress(n, len(paths), "reading notes")
        return notes

    def _documents(self, notes: list[StoredNote], report: SyncReport, *,
                   progress: ProgressCallback | None) -> list[dict]:
        docs = [fulltext.note_doc(s) for s in notes]
        self.embed_docs(docs, report, progress=progress)
        return docs

    def embed_docs(self, docs: list[dict], report: SyncReport | None = None, *,
                   progress: ProgressCallback | None = None) -> None:
        """Give each index document its embedding (from the cache when the same model has
        embedded the same text before). No embedder: nothing to add."""
        if self.embedder is None or not docs:
            return
        texts = [fulltext.embedding_texts(d["key"], d["body"], d.get("context_text")) for d in docs]
        keys = [[cache_key(self.model_id, t) for t in ts] for ts in texts]
        wanted = sorted({k for ks in keys for k in ks})
        # What this process's writes embedded ahead first: the recall after a write then asks
        # SQLite nothing before it stores the vector (a SELECT under the index mutex).
        fresh = self._ahead.take(wanted, progress, f"embedding with {self.model_id}")
        found = self.cache.get_many([k for k in wanted if k not in fresh]) if len(fresh) < len(wanted) else {}
        missing = sorted({k: t for ks, ts in zip(keys, texts) for k, t in zip(ks, ts)
                          if k not in found and k not in fresh}.items())
        if report is not None:
            report.cached = sum(1 for ks in keys if all(k in found for k in ks))
            report.embedded = len(fresh) + len(missing)
        if missing:
            vectors = self._embed_with_progress([t for _, t in missing], progress)
            fresh.update({k: v for (k, _), v in zip(missing, vectors)})
        if fresh:
            self.cache.put_many(self.model_id, fresh)
            found.update(fresh)
        for doc, ks in zip(docs, keys):
            # The mean, not renormalised: its dot product with a query is the mean cosine.
            doc[VECTOR_FIELD] = found[ks[0]] if len(ks) == 1 else np.mean([found[k] for k in ks], axis=0,
                                                                           dtype=np.float32)

    def _embed_with_progress(self, texts: list[str], progress: ProgressCallback | None) -> np.ndarray:
        if progress is None or len(texts) < 64:
            return self.embedder.embed_documents(texts)
        parts = []
        for i in range(0, len(texts), 256):
            parts.append(self.embedder.embed_documents(texts[i:i + 256]))
            progress(min(i + 256, len(texts)), len(texts), f"embedding with {self.model_id}")
        return np.vstack(parts)

    def rebuild(self, *, progress: ProgressCallback | None = None) -> SyncReport:
        with self.mutex, self.lock():
            return self._rebuild(progress=progress)

    def _rebuild(self, *, progress: ProgressCallback | None, prebuilt: Prebuilt | None = None) -> SyncReport:
        """From scratch: the notes in the work tree. Vectors found in the cache cost nothing.
        Everything is read and embedded before the old index is removed: an embedder that
        fails leaves the index as it was."""
        head = self.repo.store.head()
        # Walked before the notes are read: an edit in between then differs from what is
        # recorded and is indexed again by the next catch-up (never recorded as indexed).
        dirty = self._worktree_dirty()
        paths = self.note_paths()
        report = SyncReport(rebuilt=True)
        prebuilt = self._usable(prebuilt, set(paths), dirty)
        joined = {p for p, _ in prebuilt.docs} if prebuilt is not None else set()
        notes = self._read_notes([p for p in paths if p not in joined], report, progress=progress)
        docs = self._documents(notes, report, progress=progress)
        # Built beside the old index and swapped in: a kill leaves the old one (or the
        # finished new one) in place, never an empty index that recall would trust.
        folder = self.base / "fulltext"
        fulltext.build_beside(folder, docs, limitmb=256, progress=progress,
                              segments=prebuilt.segments if prebuilt is not None else None,
                              segment_folder=prebuilt.folder if prebuilt is not None else None)
        self._close_index()
        cachefiles.swap_in(folder)
        shutil.rmtree(self.base / "versions", ignore_errors=True)
        (self.base / "vectors.sqlite").unlink(missing_ok=True)  # where vectors lived before schema 8
        self._open()
        self._refresh()
        with self._ix.searcher() as searcher:  # the big segments' files of long lists, written now
            self._long.attach(searcher, holding_lock=True)
        read = {s.path for s in notes} | joined
        report.indexed = [p for p in paths if p in read]
        report.joined = len(joined)
        self._save_state({"schema": SCHEMA_VERSION, "model": self.model_id, "commit": head,
                          "dirty": dirty, "broken": report.broken})
        self._last_worktree_check = time.monotonic()
        return report

    # --- searching ------------------------------------------------------------------
    def _open(self):
        """The index, created if missing: only under the index lock (creating clears the folder)."""
        if self._ix is None:
            self._ix = fulltext.open_or_create(self.base / "fulltext")
        return self._ix

    def _refresh(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
        self._searcher = None
        self._combined = None

    def searcher(self):
        """The searcher over the index on disk and, when this process holds recent notes in
        memory, over both (their older versions on disk are hidden by :meth:`table`)."""
        disk = self._disk_searcher()
        if self._recent is None:
            return disk
        if self._combined is None:
            self._combined = self._recent.searcher(disk)
        return self._combined

    def _disk_searcher(self):
        if self._searcher is None:
            try:
                if self._ix is None:
                    self._ix = fulltext.windex.open_dir(str(self.base / "fulltext"))
                self._searcher = self._ix.searcher(weighting=fulltext.weighting())
            except Exception:  # noqa: BLE001 -- missing, mid-swap, or damaged: see under the lock
                self._ix = None
                with self.lock():
                    self._recover_folders()
                    try:
                        self._searcher = self._open().searcher(weighting=fulltext.weighting())
                    except Exception as exc:  # noqa: BLE001 -- damaged: rebuild from the notes
                        self._quarantine(f"{type(exc).__name__}: {exc}")
                        self._rebuild(progress=None)
                        self._searcher = self._open().searcher(weighting=fulltext.weighting())
            bm25.count_by_segment(self._searcher)
            self._long.attach(self._searcher)
        return self._searcher

    def _recover_folders(self) -> None:
        """Finish or undo an index swap a kill interrupted (under the index lock)."""
        cachefiles.recover_folder(self.base / "fulltext")
        cachefiles.recover_folder(self.base / "versions")

    def _quarantine(self, reason: str) -> None:
        """The index cannot be read: move it (and what describes it) aside, with one warning."""
        self._close_index()
        cachefiles.move_aside(self.base / "fulltext", reason)
        shutil.rmtree(self.base / "versions", ignore_errors=True)
        (self.base / "versions.json").unlink(missing_ok=True)
        self.state_path.unlink(missing_ok=True)

    def reopen(self) -> None:
        """Let go of what this process holds open of the index (searcher, table of contents,
        long lists, notes in memory): the next call opens it as it is on disk now."""
        with self.mutex:
            self._close_index()

    def recover(self, exc: BaseException) -> None:
        """A read of the index failed (a truncated or missing segment, garbage in a file):
        move it aside and rebuild from the notes, so the caller can ask again."""
        with self.mutex, self.lock():
            self._quarantine(f"{type(exc).__name__}: {exc}")
            self._rebuild(progress=None)

    def table(self) -> DocTable:
        """The filter columns of the current searcher (made again with it)."""
        s = self.searcher()
        if self._table is None or self._table.searcher is not s:
            hidden = self._recent.hidden(self._disk_searcher()) if self._recent is not None else ()
            self._table = DocTable.of(s, self._table, hidden=hidden)
        return self._table

    def embed_query(self, text: str) -> np.ndarray | None:
        return self.embedder.embed_query(text) if self.embedder is not None else None

    def warm_embedder(self) -> None:
        """A local model loaded and run once, on the thread that embeds recalls' questions: the
        first recall loaded it (~190 ms of MiniLM, every recall behind it waiting), and until
        then no write was embedded ahead. A model behind a server is left to the first call."""
        embedder = self.embedder
        if is_local(embedder):
            self._ahead.query(embedder, "what is true now?").result()

    def embed_query_soon(self, text: str) -> Future:
        """:meth:`embed_query` started on another thread: a future of the vector (None
        without an embedder; its result raises what embedding raised)."""
        embedder = self.embedder
        if embedder is None:
            done: Future = Future()
            done.set_result(None)
            return done
        return self._ahead.query(embedder, text)

    def _reflected(self) -> dict:
        return self._recent.state if self._recent is not None else self._load_state()

    def dirty_state(self) -> dict[str, str]:
        """Work-tree files the index holds in a version other than HEAD's: path -> blob id
        (or "deleted"), as of the last catch-up."""
        return dict(self._reflected().get("dirty", {}))

    def broken(self) -> dict[str, str]:
        return self._reflected().get("broken", {})


def _marked_pending(state: dict, seen: dict | None) -> bool:
    """``state`` is ``seen`` with only a catch-up's "pending" mark added: another process is
    catching the index on disk up and has not saved where it got to. What this process searches
    (its searcher, its notes in memory) still reflects ``seen``'s commit, and stays; taken for a
    move, it threw its in-memory notes away and read them all again against the old commit
    (~100 notes: 40-90 ms, index held), then again once the catch-up saved."""
    return (seen is not None and bool(state.get("pending"))
            and {k: v for k, v in state.items() if k != "pending"} == {k: v for k, v in seen.items() if k != "pending"})


def index_lock(root: Path) -> Lock:
    """The search indexes' cross-process lock of the repo at ``root`` (LockTimeout after two
    minutes): held while an index folder is built, swapped, deleted (erasure) or given files."""
    return folder_index_lock(cache_dir(root))


def folder_index_lock(cache_folder: Path) -> Lock:
    """:func:`index_lock` by the cache folder (a linked worktree's, whose work tree may be gone)."""
    clear_cache_path(cache_folder)
    return Lock(str(cache_locks_dir(cache_folder) / "index.lock"), timeout=120)


def _valid_state(state: dict) -> bool:
    return (isinstance(state.get("schema", 0), int) and isinstance(state.get("model", ""), str)
            and isinstance(state.get("commit") or "", str) and isinstance(state.get("dirty", {}), dict)
            and isinstance(state.get("broken", {}), dict))
