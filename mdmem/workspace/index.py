"""One search index over a workspace's mounts: one ranking, as one repository holding the same notes.

Asking each mount's own index and merging the answers cost a fixed few milliseconds a mount
(HEAD and state checks, the config stamp, trust, stored fields) and ranked by BM25 statistics
counted per repository (benchmarks/bench_workspace.py: 9-31x one repository at 20 mounts, the
top 5 sharing 30-60% of one repository's). Here the index (search/note_index.py) is given the
mounts as one repository through the narrow part of a repository it uses:

- ``store``: the mounts' git stores as one (:class:`MountStores`). Its head is every mount's
  tip, written out (:func:`combined_head`); a catch-up diffs each mount whose tip moved. A path
  is the note's identity path (the clone holds its root at the same path), so it names its
  mount; a clone's files outside its own root (a stray commit) are never shown.
- ``access.readable_roots``: the mounts whose own mdmem.toml lets the person read their root
  (policy/access.py decides, repository by repository).
- ``trust``: each mount's verifier, by the root of each path.
- ``config``, ``contracts``, ``user_config``: the person's private mount's (else the first).

The cache lives in the workspace's own ``.mdmem-cache/`` (:data:`CACHE_DIR`): never inside a
clone's work tree, which a teammate's commit can fill. An erasure purges it
(:meth:`WorkspaceSource.purge`) and prove-gone checks it (:meth:`WorkspaceSource.leftovers`).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Config, UserConfig
from ..model.kinds import Contracts
from ..model.layout import root_of
from ..search.note_index import NoteIndex
from ..storage.gitdir import git_dir
from ..storage.queries import TreeChange
from ..storage.tree_watch import TreeWatch, take_events
from ..storage.worktree import StoredNote, iter_note_paths

if TYPE_CHECKING:
    from ..policy.verify import Flag
    from ..repo import MemoryRepo
    from ..results import ProgressCallback
    from ..search.recall import Recall

CACHE_DIR = ".mdmem-cache"  # in the workspace folder: its index, and beside it the index's locks
HEAD_PREFIX = "mounts:"


def combined_head(tips: Mapping[str, str | None]) -> str:
    """The workspace's head: each mount's root and tip (empty before its first commit), sorted.
    Written out rather than hashed, so a catch-up reads each mount's old tip from the head the
    index recorded, with no table beside it to lose."""
    return HEAD_PREFIX + ";".join(f"{root}={tips[root] or ''}" for root in sorted(tips))


def split_head(head: str | None) -> dict[str, str | None] | None:
    """The tips a combined head names; None for anything else (a mount's own commit id, nothing)."""
    if not head or not head.startswith(HEAD_PREFIX):
        return None
    tips: dict[str, str | None] = {}
    for part in head[len(HEAD_PREFIX):].split(";"):
        if part:
            root, _, tip = part.partition("=")
            tips[root] = tip or None
    return tips


class MountStores:
    """The mounts' git stores as the one store an index reads (see the module's docstring)."""

    def __init__(self, mounts: Callable[[], dict[str, MemoryRepo]]):
        self._mounts = mounts
        # root -> (the mount's store, the watch of its refs, its tip): reading a tip cost ~0.1 ms
        # (HEAD and the branch's ref file), twenty a recall; the kernel's events say when one moved.
        self._tips: dict[str, tuple[Any, TreeWatch, str | None]] = {}
        self._tips_lock = threading.Lock()

    def _repos(self) -> dict[str, MemoryRepo]:
        return self._mounts()

    def _repo_of(self, path: str) -> MemoryRepo | None:
        return self._repos().get(root_of(path))

    def tip(self, root: str, repo: MemoryRepo) -> str | None:
        """The mount's branch tip: read again only when something was written in its git folder
        or its refs/heads/ (a commit, a fetch, packed refs, an erasure) since it was last read."""
        return self.tip_read(root, repo)[0]

    def tips_read(self) -> dict[str, tuple[MemoryRepo, str | None, bool]]:
        """Every mount's (repo, tip, read again?), the kernel's queue read once for them all."""
        take_events()
        return {root: (repo, *self.tip_read(root, repo, drain=False)) for root, repo in self._repos().items()}

    def tip_read(self, root: str, repo: MemoryRepo, *, drain: bool = True) -> tuple[str | None, bool]:
        """(:meth:`tip`, whether it was read again: something in the git folder may have changed).
        ``drain`` False: the events already taken from the kernel's queue are enough (see
        :meth:`tips_read`)."""
        store = repo.store
        with self._tips_lock:
            known = self._tips.get(root)
            if known is not None and known[0] is store and known[1].changes(drain=drain) == set():
                return known[2], False
            if known is not None and known[0] is not store:
                known[1].close()
                known = None
            watch = known[1] if known is not None else TreeWatch.start(git_dir(repo.root), ("refs/heads",))
            tip = store.head()  # after the watch started: a move from now on is seen next time
            if watch is not None:
                self._tips[root] = (store, watch, tip)
            return tip, True

    def tips(self) -> dict[str, str | None]:
        return {root: tip for root, (_, tip, _) in self.tips_read().items()}

    def close(self) -> None:
        with self._tips_lock:
            for _, watch, _ in self._tips.values():
                watch.close()
            self._tips.clear()

    def head(self) -> str:
        return combined_head(self.tips())

    def has_object(self, oid: str | None) -> bool:
        """A combined head is there while every mount it names is mounted and holds its tip (a
        mount removed, or a rewrite in one: the index is rebuilt); else a blob or commit of a mount."""
        tips = split_head(oid)
        repos = self._repos()
        if tips is None:
            return bool(oid) and any(repo.store.has_object(oid) for repo in repos.values())
        return all(root in repos and (tip is None or repos[root].store.has_object(tip)) for root, tip in tips.items())

    def is_ancestor(self, older: str, newer: str) -> bool:
        old, new = split_head(older), split_head(newer)
        if old is None or new is None or not set(old) <= set(new):
            return False
        repos = self._repos()
        return all(tip is None or (root in repos and new[root] is not None
                                   and repos[root].store.is_ancestor(tip, new[root] or ""))
                   for root, tip in old.items())

    def _moves(self, old: str | None, new: str | None) -> Iterator[tuple[str, MemoryRepo, str | None, str | None]]:
        """(root, repo, its old tip, its new tip) of each mount whose tip differs."""
        before = split_head(old) or {}
        after = split_head(new) or {}
        repos = self._repos()
        for root in sorted(after):
            if root in repos and before.get(root) != after[root]:
                yield root, repos[root], before.get(root), after[root]

    def note_changes(self, old: str | None, new: str | None, *, renames: bool = False) -> list[TreeChange]:
        out: list[TreeChange] = []
        for root, repo, was, now in self._moves(old, new):
            if now is None:
                continue
            out += [c for c in repo.store.note_changes(was, now, renames=renames, under=root)
                    if root_of(c.path) == root]
        return out

    def commits_with_note_paths(self, revs: str) -> list[tuple[str, int, list[str]]]:
        """Each moved mount's commits (its own ids; its paths in its root only), mount by mount:
        the versions index follows each path's versions, and no path is in two mounts."""
        old, _, new = revs.rpartition("..")
        out: list[tuple[str, int, list[str]]] = []
        for root, repo, was, now in self._moves(old or None, new):
            if now is None:
                continue
            for sha, when, paths in repo.store.commits_with_note_paths(f"{was}..{now}" if was else now):
                mine = [p for p in paths if root_of(p) == root]
                if mine:
                    out.append((sha, when, mine))
        return out

    def blob_id(self, path: str, rev: str | None = None) -> str | None:
        """The blob at ``path`` in its mount: at ``rev`` (a combined head or one of the mount's
        commits), else at the mount's tip; None where the mount or the file is not there."""
        repo = self._repo_of(path)
        if repo is None:
            return None
        tips = split_head(rev)
        if tips is not None:
            rev = tips.get(root_of(path))
            if rev is None:
                return None
        elif rev is None and repo.store.head() is None:
            return None  # no commit yet
        return repo.store.blob_id(path, rev)

    def blob_ids(self, paths: Iterable[str], rev: str | None = None) -> dict[str, str | None]:
        by_root: dict[str, list[str]] = {}
        for p in paths:
            by_root.setdefault(root_of(p), []).append(p)
        tips = split_head(rev)
        repos = self._repos()
        out: dict[str, str | None] = {}
        for root, some in by_root.items():
            repo = repos.get(root)
            at = tips.get(root) if tips is not None else rev
            if repo is None or (tips is not None and at is None):
                out.update(dict.fromkeys(some))
            else:
                out.update(repo.store.blob_ids(some, at))
        return out

    def read_blob(self, oid: str) -> bytes:
        for repo in self._repos().values():
            if repo.store.has_object(oid):
                return repo.store.read_blob(oid)
        raise KeyError(oid)

    def dirty_note_paths(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for root, repo in self._repos().items():
            out.update({p: v for p, v in repo.store.dirty_note_paths().items() if root_of(p) == root})
        return out


class MountTrust:
    """Each mount's verifier (policy/verify.py), by the root of each path."""

    def __init__(self, mounts: Callable[[], dict[str, MemoryRepo]], stores: MountStores):
        self._mounts = mounts
        self._stores = stores

    def flags(self, head: str | None = None) -> dict[str, Flag]:
        tips = split_head(head) or {}
        out: dict[str, Flag] = {}
        for root, repo in self._mounts().items():
            out.update({p: f for p, f in repo.trust.flags(tips.get(root)).items() if root_of(p) == root})
        return out

    def flags_of(self, paths: Iterable[str]) -> dict[str, Flag]:
        by_root: dict[str, set[str]] = {}
        for p in paths:
            by_root.setdefault(root_of(p), set()).add(p)
        mounts = self._mounts()
        out: dict[str, Flag] = {}
        for root, some in by_root.items():
            if root in mounts:
                out.update(mounts[root].trust.flags_of(some, self._stores.tip(root, mounts[root])))
        return out


class MountAccess:
    """Who may read what: each mount's own rule (policy/access.py) for its own root."""

    def __init__(self, readable: Callable[[str], list[str]]):
        self._readable = readable

    def readable_roots(self, user: str) -> list[str]:
        return self._readable(user)


class MountWatch:
    """The kernel's events of every mount's clone, as one TreeWatch (storage/tree_watch.py):
    paths in each mount's own root only. A mount added or removed since: None once (the index
    walks), and the new mount is watched from then on."""

    def __init__(self, clones: Callable[[], dict[str, Path]]):
        self._clones = clones
        self._watches: dict[str, TreeWatch] = {}
        self._folders: dict[str, Path] = {}

    def follow(self) -> bool:
        """Watch each mount now mounted; False if any could not be watched."""
        wanted = self._clones()
        for root in [r for r in self._watches if wanted.get(r) != self._folders.get(r)]:
            self._watches.pop(root).close()
            self._folders.pop(root, None)
        for root, folder in wanted.items():
            if root not in self._watches:
                watch = TreeWatch.start(folder)
                if watch is None:
                    return False
                self._watches[root], self._folders[root] = watch, folder
        return True

    def changes(self) -> set[str] | None:
        if set(self._clones().items()) != set(self._folders.items()):
            self.follow()  # a mount added or removed: walked once, watched from now on
            return None
        out: set[str] = set()
        overflowed = False
        take_events()  # the kernel's queue read once for every mount
        for root, watch in self._watches.items():
            seen = watch.changes(drain=False)
            if seen is None:
                overflowed = True
            else:
                out |= {p for p in seen if root_of(p) == root}
        return None if overflowed else out

    def close(self) -> None:
        for watch in self._watches.values():
            watch.close()
        self._watches.clear()
        self._folders.clear()


class WorkspaceIndex(NoteIndex):
    """The search index over every mount: each note read from its mount's clone."""

    def __init__(self, source: WorkspaceSource):
        # The folder the lock files go in (the index's own is made by whoever writes first).
        source.cache_folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        super().__init__(source, base=source.cache_folder)
        self.source = source

    def worktree_of(self, path: str) -> Path:
        # An unmounted root reads as no file: its notes leave the index.
        return self.source.clones().get(root_of(path), self.source.root / CACHE_DIR / "none")

    def committed_blob(self, path: str) -> str | None:
        # One mount's HEAD, not the combined head (every mount's tip read for each path).
        return self.source.store.blob_id(path)

    def note_paths(self) -> list[str]:
        return sorted(p for root, folder in self.source.clones().items() for p in iter_note_paths(folder, root))

    def start_watch(self) -> MountWatch | None:
        watch = MountWatch(self.source.clones)
        if not watch.follow():
            watch.close()
            return None
        return watch


class WorkspaceSource:
    """The workspace's mounts presented as the one repository the index and recall read
    (search/note_index.py, search/recall.py, ops/searching.py)."""

    def __init__(self, root: Path, mounts: Callable[[], dict[str, MemoryRepo]],
                 readable: Callable[[str], list[str]], primary: Callable[[], MemoryRepo | None],
                 get: Callable[..., StoredNote], user_config: UserConfig):
        self.root = root
        self.cache_folder = root / CACHE_DIR / "index"
        self._mounts = mounts
        self._primary = primary
        self.get = get  # an exact key lookup in recall (search/recall.py): the workspace's own get
        self.user_config = user_config
        self.store = MountStores(mounts)
        self.trust = MountTrust(mounts, self.store)
        self.access = MountAccess(readable)
        self._index: WorkspaceIndex | None = None
        self._recall: Recall | None = None
        self._keep_warm = False

    def clones(self) -> dict[str, Path]:
        return {root: repo.root for root, repo in self._mounts().items()}

    @property
    def config(self) -> Config:
        repo = self._primary()
        return repo.config if repo is not None else Config()

    @property
    def contracts(self) -> Contracts:
        repo = self._primary()
        return repo.contracts if repo is not None else Contracts()

    @property
    def index(self) -> WorkspaceIndex:
        if self._index is None:
            self._index = WorkspaceIndex(self)
            if self._keep_warm:
                self._index.keep_warm(now=False)
        return self._index

    @property
    def recaller(self) -> Recall:
        if self._recall is None:
            from ..search.recall import Recall
            self._recall = Recall(self, self.index)
        return self._recall

    def reset_recaller(self) -> None:
        self._recall = None

    def set_progress(self, progress: ProgressCallback | None) -> None:
        self.index.progress = progress

    def keep_warm(self, roots: tuple[str, ...] | None) -> None:
        self._keep_warm = True
        if roots is not None:
            with self.index.mutex:
                self.index.reader_roots = roots
        self.index.keep_warm()

    def close(self) -> None:
        if self._index is not None:
            with contextlib.suppress(Exception):
                self._index.close()
        self._index = None
        self._recall = None
        self.store.close()

    # --- erasure ------------------------------------------------------------------------------
    def purge(self, history_texts: Callable[[], set[str]]) -> int:
        """After an erasure in any mount: the index and versions folders and their state go
        (rebuilt from the notes), the embedding cache keeps only texts some mount's history
        still holds. The number of embedding entries dropped."""
        from ..erasure.forget import purge_cache_folder

        self.close()
        if not self.cache_folder.is_dir():
            return 0  # never made: nothing to purge
        return purge_cache_folder(self.cache_folder, history_texts)

    def leftovers(self, texts: set[str], readable: Callable[[str], bool], eraser: bool) -> list[str]:
        """What prove-gone finds in this cache that no mount's history holds (named, never quoted)."""
        from ..erasure.proof import cache_folder_leftovers

        return cache_folder_leftovers(self.cache_folder, texts, readable, eraser,
                                      label=f"{CACHE_DIR}/{self.cache_folder.name}/")
