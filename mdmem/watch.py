"""`mdmem watch`: when a person saves a note, validate it and catch the index up within a
second; optionally commit valid human edits with ``Memory-Source: human:<git user>``.

A note that breaks the schema is reported with path, field and reason, kept out of the
index until it is fixed, and never touched on disk.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from .errors import NoteInvalid
from .storage.trailers import Trailers
from .model.layout import is_note_path, root_of
from .storage.worktree import read_note

DEBOUNCE_SECONDS = 0.15
_NOT_CHANGES = frozenset({"opened", "closed_no_write"})


@dataclass
class WatchEvent:
    path: str
    status: str  # indexed | removed | invalid | committed | not committed
    detail: str = ""

    def to_dict(self) -> dict:
        return {"path": self.path, "status": self.status, "detail": self.detail}


def git_identity(store) -> tuple[str, str]:
    """The person's own git identity (user.name, user.email) as git would sign their commit."""
    name, email = store.config_value("user.name"), store.config_value("user.email")
    if not name or not email:
        from .errors import BadInput
        raise BadInput("watch --commit: git has no user.name/user.email here; set them (git config user.name ...) "
                       "so your edits are committed as you")
    return name, email


def git_user(store, config=None) -> str:
    """The mdmem handle of the person at this git identity: the [people] entry listing their
    e-mail, else their git name made into a handle."""
    name, email = git_identity(store)
    user = config.user_for_email(email) if config is not None else None
    return user or "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name) or "unknown"


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: "Watcher"):
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Opening or reading a file is not a change (the watcher's own reads made it
        # reindex forever: one `cat` gave 38 reindexes in 6 s).
        if event.event_type in _NOT_CHANGES:
            return
        for raw in (getattr(event, "src_path", ""), getattr(event, "dest_path", "")):
            if raw:
                self.watcher.touch(raw)


class Watcher:
    def __init__(self, repo, on_event: Callable[[WatchEvent], None], *, commit: bool = False):
        self.repo = repo
        self.on_event = on_event
        self.commit = commit
        self.root = repo.root.resolve()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._observer = Observer()
        # The content each path had when last handled: a change is a new content hash, so
        # an event that leaves a file as it was (a touch, a save without edits) costs nothing.
        self._seen: dict[str, str | None] = {}
        self._worker = threading.Thread(target=self._run, name="mdmem-watch", daemon=True)

    def touch(self, raw: str) -> None:
        try:
            rel = str(type(self.root)(raw).resolve().relative_to(self.root)).replace("\\", "/")
        except ValueError:
            return
        if rel.startswith((".git/", ".mdmem/")) or not is_note_path(rel):
            return
        with self._lock:
            self._pending.add(rel)
        self._wake.set()

    def start(self) -> "Watcher":
        self.repo.index.sync(worktree=True)
        self._observer.schedule(_Handler(self), str(self.root), recursive=True)
        self._observer.start()
        self._worker.start()
        return self

    def stop(self) -> None:
        """Safe at any moment, even before or while :meth:`start` runs (a client that
        disconnects while the server's first index build is still going)."""
        self._stop.set()
        self._wake.set()
        self._observer.stop()
        for thread in (self._observer, self._worker):
            if thread.ident is not None:  # started; joining a thread never started raises
                thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            time.sleep(DEBOUNCE_SECONDS)  # editors write in bursts: save, rename, chmod
            with self._lock:
                paths, self._pending = sorted(self._pending), set()
            if paths:
                try:
                    self._handle(paths)
                except Exception as exc:  # a watcher must outlive one bad event
                    self.on_event(WatchEvent("", "error", str(exc)))

    def _changed(self, paths: list[str]) -> list[str]:
        """The paths whose content differs from what was last handled (or, the first time,
        from what the index holds: HEAD's version or the dirty one it recorded)."""
        store = self.repo.store
        head = store.head()
        dirty = self.repo.index.dirty_state()
        out = []
        for path in paths:
            now = store.worktree_blob_id(path)
            if path in self._seen:
                before = self._seen[path]
            elif path in dirty:
                before = None if dirty[path] == "deleted" else dirty[path]
            else:
                before = store.blob_id(path, head) if head else None
            self._seen[path] = now
            if now != before:
                out.append(path)
        return out

    def _handle(self, paths: list[str]) -> None:
        paths = self._changed(paths)
        if not paths:
            return
        report = self.repo.index.sync(worktree=True)
        valid: dict[str, bytes | None] = {}
        for path in paths:
            if path in report.broken:
                self.on_event(WatchEvent(path, "invalid", report.broken[path]))
                continue
            full = self.repo.root / path
            if not full.exists():
                self.on_event(WatchEvent(path, "removed"))
                valid[path] = None
                continue
            try:
                read_note(self.repo.root, path, self.repo.contracts, max_bytes=self.repo.config.note_max_bytes)
            except NoteInvalid as exc:
                self.on_event(WatchEvent(path, "invalid", f"{exc.field}: {exc.reason}"))
                continue
            self.on_event(WatchEvent(path, "indexed"))
            valid[path] = full.read_bytes()
        if self.commit and valid:
            self._commit(valid)

    def _commit(self, changes: dict[str, bytes | None]) -> None:
        store = self.repo.store
        with store.locked():
            head = store.head()
            dirty = {p: d for p, d in changes.items()
                     if (store.blob_id(p, head) if head else None) != (store.worktree_blob_id(p))}
            if not dirty:
                return
            author = git_identity(self.repo.store)
            user = git_user(self.repo.store, self.repo.config)
            # The same write permission as remember: an edit of a root this person may not write
            # (another's private notes, another team's), or of a root a scope repository does not
            # hold, stays uncommitted and is named.
            access = self.repo.access
            for path in sorted(dirty):
                root = root_of(path)
                why = (access.not_held(root) if not access.holds(root)
                       else None if user and user in access.writers_of_root(root)
                       else f"{user or 'this git identity'} may not write {root}")
                if why is not None:
                    self.on_event(WatchEvent(path, "not committed", why))
                    del dirty[path]
            if not dirty:
                return
            op = "edit" if all(d is not None for d in dirty.values()) else "delete"
            message = (f"human {op}: {', '.join(sorted(dirty))}\n\n"
                       + Trailers(op, user, f"human:{user}").render())
            commit = self.repo.commit_changes(dirty, message, actor=user, when=_now(), author=author)
        for path in dirty:
            self.on_event(WatchEvent(path, "committed", commit))


def _now():
    from .model.clock import resolve_now
    return resolve_now()
