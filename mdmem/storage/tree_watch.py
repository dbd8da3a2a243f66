"""TreeWatch: which files of the work tree changed since we last asked, from the kernel's
inotify events, without walking the tree.

Finding a person's edits by walking the work tree (git status: an lstat per file) costs
~40 ms at 10,000 notes and ~300 ms at 100,000, which is why recall used to check at most
once a second and hand edits were missed in between. inotify queues an event in the
kernel as the write happens, so draining the queue without blocking at the start of a
call sees every write that finished before the call: edits count at once, and a call
that finds the queue empty costs microseconds.

Only Linux has inotify; ``TreeWatch.start`` returns None elsewhere, or when the kernel's
watch limit is reached, and the caller falls back to walking the tree. A queue overflow
or a folder moved or removed as a whole makes :meth:`changes` return None: the caller
then walks the tree once, as on the first call.
"""
from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

try:  # Linux only; elsewhere the caller walks the tree
    from inotify_simple import INotify, flags
except (ImportError, OSError):  # pragma: no cover - non-Linux
    INotify = None
    flags = None

# Folders whose files are never notes: git's own, and mdmem's cache.
SKIP = {".git", ".mdmem"}
_MASK = 0 if flags is None else (flags.CREATE | flags.MODIFY | flags.CLOSE_WRITE | flags.DELETE | flags.MOVED_FROM
                                 | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF | flags.ONLYDIR
                                 | flags.DONT_FOLLOW)


class _Hub:
    """One inotify instance per process, shared by every TreeWatch in it: the kernel allows
    each user only 128 instances (machine-wide), and a test run or a server opens many
    repos. The kernel gives one folder one watch descriptor per instance, so two watches
    of the same folder share it; events go to every watch holding the descriptor."""

    def __init__(self):
        self.ino = INotify(nonblocking=True)
        self.pid = os.getpid()
        # Weak: a repo dropped without close() must not live on through its watch.
        self.owners: dict[int, weakref.WeakSet] = {}
        self.lock = threading.Lock()

    def add(self, watch: "TreeWatch", path: str) -> int:
        wd = self.ino.add_watch(path, _MASK)
        self.owners.setdefault(wd, weakref.WeakSet()).add(watch)
        return wd

    def release(self, watch: "TreeWatch", wd: int) -> None:
        owners = self.owners.get(wd)
        if owners is None:
            return
        owners.discard(watch)
        if not owners:
            del self.owners[wd]
            try:
                self.ino.rm_watch(wd)
            except OSError:  # the folder is gone: the kernel dropped the watch already
                pass

    def drain(self) -> None:
        """Hand every queued event to the watches of its folder."""
        while True:
            try:
                events = self.ino.read(timeout=0)
            except BlockingIOError:
                events = []
            if not events:
                return
            for ev in events:
                if ev.mask & flags.Q_OVERFLOW:
                    for owners in self.owners.values():
                        for w in owners:
                            w._overflowed = True
                    continue
                for w in list(self.owners.get(ev.wd, ())):
                    w._event(ev)
                if ev.mask & flags.IGNORED:
                    self.owners.pop(ev.wd, None)


_HUB: _Hub | None = None
_HUB_LOCK = threading.Lock()


def _hub() -> _Hub | None:
    global _HUB
    with _HUB_LOCK:
        if _HUB is not None and _HUB.pid != os.getpid():
            _HUB = None  # a forked child: the parent's queue is not ours to drain
        if _HUB is None and INotify is not None:
            try:
                _HUB = _Hub()
            except OSError:  # EMFILE: the user's instances are used up; walk the tree instead
                return None
        return _HUB


def take_events() -> None:
    """Hand every event queued for this process to its watches, so that ``changes(drain=False)``
    on each of many watches sees them (one read of the kernel's queue for them all)."""
    hub = _HUB
    if hub is None or hub.pid != os.getpid():
        return
    with hub.lock:
        hub.drain()


class TreeWatch:
    def __init__(self, root: Path, hub: _Hub):
        self.root = Path(root)
        self._hub = hub
        self._dirs: dict[int, str] = {}  # watch descriptor -> folder relative to root ("" = root)
        self._paths: set[str] = set()
        self._overflowed = False

    @classmethod
    def start(cls, root: Path, subtrees: tuple[str, ...] = ("team", "private")) -> "TreeWatch | None":
        """Watch ``root`` (for the subtrees appearing) and every folder under ``subtrees``.
        None where inotify is missing or the kernel refuses more watches."""
        hub = _hub()
        if hub is None:
            return None
        watch = cls(root, hub)
        try:
            with hub.lock:
                watch._add("", recursive=False)
                for sub in subtrees:
                    if (watch.root / sub).is_dir():
                        watch._add(sub, recursive=True)
        except OSError:  # ENOSPC: the per-user watch limit; walking the tree still works
            watch.close()
            return None
        return watch

    def _add(self, rel: str, *, recursive: bool) -> list[str]:
        """Watch folder ``rel`` (and, recursively, every folder below it); the files found
        below it, which may have been written before the watch existed."""
        found = []
        todo = [rel]
        while todo:
            folder = todo.pop()
            full = self.root / folder if folder else self.root
            try:
                wd = self._hub.add(self, str(full))
            except (FileNotFoundError, NotADirectoryError):
                continue
            self._dirs[wd] = folder
            if not recursive:
                continue
            try:
                entries = list(os.scandir(full))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                child = f"{folder}/{entry.name}" if folder else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in SKIP:
                        todo.append(child)
                else:
                    found.append(child)
        return found

    def _event(self, ev) -> None:
        folder = self._dirs.get(ev.wd)
        if ev.mask & flags.IGNORED:
            self._dirs.pop(ev.wd, None)
            return
        if folder is None:
            return
        if ev.mask & flags.MOVE_SELF:
            # A watched folder moved away whole: the events do not say which files it held.
            # (A folder deleted reports its files' deletions first.)
            self._overflowed = True
            return
        if ev.mask & flags.DELETE_SELF:
            return
        rel = f"{folder}/{ev.name}" if folder else ev.name
        if ev.mask & flags.ISDIR:
            if ev.name in SKIP:
                return
            if ev.mask & (flags.CREATE | flags.MOVED_TO) and rel.split("/", 1)[0] in ("team", "private"):
                try:
                    self._paths.update(self._add(rel, recursive=True))
                except OSError:
                    self._overflowed = True
            elif ev.mask & flags.MOVED_FROM:
                self._overflowed = True
            return
        self._paths.add(rel)

    def changes(self, *, drain: bool = True) -> set[str] | None:
        """Paths (relative, with /) of files created, written, moved or deleted since the
        last call; None when the events cannot say (overflow, a folder moved away), and the
        caller must walk the tree. ``drain`` False: the events the process's queue handed out
        already (one caller asking many watches at once drains it once: a read of the queue
        cost ~20-70 us, sixty a workspace recall)."""
        if self._hub.pid != os.getpid():
            return None  # a forked child: the queue belongs to the parent
        with self._hub.lock:
            if drain:
                self._hub.drain()
            paths, overflowed = self._paths, self._overflowed
            self._paths, self._overflowed = set(), False
        return None if overflowed else paths

    def close(self) -> None:
        with self._hub.lock:
            for wd in list(self._dirs):
                self._hub.release(self, wd)
            self._dirs.clear()
