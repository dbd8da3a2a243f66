"""Workspace: the scope repositories one person may read, mounted at their roots, used as one memory.

It offers MemoryRepo's method names and signatures for what spans mounts, so the CLI, the MCP
server and the daemon take either. Each mount is an ordinary memory repository (MemoryRepo,
unchanged: its own views, verify, hooks, check, receipts, erasure journal); the workspace routes
a write to the repository of its root (the first two path parts) and asks every mount a
read, merging the answers; recall reads one index over every mount (workspace/index.py). Who
may see what stays each repository's own rule (policy/access.py over its mdmem.toml): the
workspace only ever holds what the host let this person clone, and asks each mount as the
acting person.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import CONFIG_NAME, UserConfig
from ..hooks import install as hooks
from ..errors import BadInput, Conflict, MdmemError, NoteInvalid, NotFound, Refused, as_mdmem_error
from ..model import layout as note_layout
from ..model.clock import SpanLike, TimeLike, resolve_now
from ..model.kinds import Contracts
from ..ops import searching
from ..ops.read import root_for
from ..policy.access import not_visible, require_user
from ..policy.gate import HUMAN
from ..repo import MemoryRepo
from ..results import (BatchResult, ErasurePlan, ErasureReceipt, IndexReport, KeyInfo, ProgressCallback,
                       ReviewItem, SweepResult, Version, WriteResult)
from ..storage import clones
from ..storage.gitdir import DAEMON_LOG, file_stamp
from ..storage.locks import Lock
from ..storage.worktree import StoredNote
from .index import WorkspaceIndex, WorkspaceSource
from .journal import Pending, finish_op, mark_done, pending_ops, start_op
from .view import compose, write_view
from .layout import JOURNAL_DIR, VIEW_NAME, WORKSPACE_FILE, Mount, WorkspaceFile, check_root, locate, mount_folder
from .results import INCOMPLETE, FAIL, PASS, MountInfo, MountSync, WorkspaceErasure, WorkspaceProof, WorkspaceSync

if TYPE_CHECKING:
    from ..search.recall import Hit

SYNC_THREADS = 8  # git fetch/push wait on the network and on git: threads overlap the waits


def reads(repo: MemoryRepo, user: str, root: str) -> bool:
    """Whether the repository's own mdmem.toml lets ``user`` read ``root`` (policy/access.py decides)."""
    try:
        return repo.access.may_read_root(user, root)
    except BadInput:  # not a declared user of that repository (removed from the team)
        return False


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def file_text(path: Path) -> str:
    """A workspace file's text as a person would read it (a journal's JSON strings unescaped)."""
    raw = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            return "\n".join(_strings(json.loads(raw)))
        except ValueError:
            pass
    return raw


class Workspace:
    """A folder mounting scope repositories (see :mod:`mdmem.workspace.layout`)."""

    is_workspace = True

    def __init__(self, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
                 user_config: UserConfig | None = None, finish_pending: bool = True,
                 finish_erasure: bool = True) -> None:
        """``finish_pending``/``finish_erasure`` False: an operation a crash cut short is left for
        :meth:`finish_pending` (`forget --resume` says what it finished)."""
        self.root = Path(path).absolute()
        self.file = WorkspaceFile.load(self.root)
        self.settings: dict[str, Any] = {"embedder": embedder, "fusion": fusion, "user_config": user_config}
        self._repos: dict[str, MemoryRepo] = {}
        self.problems: dict[str, str] = {}  # root -> why its mount could not be opened
        self.progress: ProgressCallback | None = None
        self._source: WorkspaceSource | None = None  # the one index over every mount (made on first use)
        self._opened: tuple[frozenset[str], dict[str, MemoryRepo]] | None = None  # _open_mounts's answer
        self._config_files: dict[str, tuple[MemoryRepo, str]] = {}  # root -> (its repo, its mdmem.toml)
        self._readers: dict[str, tuple[tuple[Any, ...], bool]] = {}  # root -> (its stamp, readable): recall's
        if finish_pending and finish_erasure and pending_ops(self.root):
            self.finish_pending()

    # --- opening --------------------------------------------------------------------
    @classmethod
    def init(cls, path: str | Path, *, as_user: str, now: TimeLike = None, **settings: Any) -> Workspace:
        """A new, empty workspace in ``path`` (a new or empty folder) for ``as_user``."""
        user = require_user(as_user)
        folder = Path(path).absolute()
        if (folder / WORKSPACE_FILE).exists():
            raise BadInput(f"{folder}: already a workspace ({WORKSPACE_FILE} exists); nothing changed")
        if (folder / CONFIG_NAME).exists() or (folder / ".git").exists():
            raise BadInput(f"{folder}: a memory or git repository; a workspace is a folder of its own that mounts "
                           "repositories (mdmem workspace init NEW_FOLDER)")
        if folder.exists() and any(folder.iterdir()):
            raise BadInput(f"{folder}: folder is not empty; give mdmem workspace init an empty or new folder")
        folder.mkdir(parents=True, exist_ok=True)
        WorkspaceFile(user=user).save(folder)
        ws = cls(folder, **settings)
        ws.write_view(now=now)
        return ws

    @classmethod
    def open(cls, path: str | Path, **settings: Any) -> Workspace:
        return cls(path, **settings)

    @classmethod
    def find(cls, start: str | Path | None = None, **settings: Any) -> Workspace:
        found = locate(start)
        if found is None:
            raise BadInput(f"{Path(start or Path.cwd())}: not inside a workspace (no {WORKSPACE_FILE} here or above)")
        return cls(found, **settings)

    locate = staticmethod(locate)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, *, leave_housekeeping: bool = False) -> None:
        """Each mount's close (ops.state.RepoState.close: ``leave_housekeeping`` as there)."""
        if self._source is not None:
            self._source.close()
            self._source = None
        for repo in self._repos.values():
            with contextlib.suppress(Exception):
                repo.close(leave_housekeeping=leave_housekeeping)
        self._repos.clear()
        self._opened = None

    @property
    def user(self) -> str:
        return self.file.user

    def memory_id(self) -> str:
        """This workspace's id (storage/memory_id.py), kept in its folder: what a token added
        for it names."""
        from ..storage.memory_id import WORKSPACE_ID_FILE, read_or_make

        return read_or_make(self.root / WORKSPACE_ID_FILE)

    def check_user(self, user: str | None, *, given_by: str = "--as / MDMEM_USER") -> str:
        """The acting person must be the workspace's: its clones are what the host let them read."""
        user = require_user(user)
        if user != self.file.user:
            raise BadInput(f"identity: this workspace ({self.root}) acts for {self.file.user}, not {user}; "
                           f"check {given_by}, or use {user}'s own workspace")
        return user

    def follow_config(self) -> None:
        """Each mount follows its own mdmem.toml (MemoryRepo does it per call)."""

    def _lock(self) -> Lock:
        (self.root / JOURNAL_DIR).mkdir(mode=0o700, exist_ok=True)
        return Lock(self.root / JOURNAL_DIR / "lock", timeout=120)

    # --- mounts ---------------------------------------------------------------------------
    def clone_path(self, root: str) -> Path:
        return self.root / self.file.mounts[root].path

    def repo_for(self, root: str) -> MemoryRepo:
        """The mounted repository holding ``root`` (opened once); Refused naming the root when it is not mounted."""
        if root not in self.file.mounts:
            mounted = ", ".join(sorted(self.file.mounts)) or "none"
            raise Refused(f"{root} is not mounted in this workspace ({self.root}; mounted: {mounted}); "
                          f"mount it with mdmem workspace add {root} REMOTE")
        if root not in self._repos:
            repo = MemoryRepo.open(self.clone_path(root), **self.settings)
            if self.progress is not None:
                repo.index.progress = self.progress
            self._repos[root] = repo
            self._opened = None
        return self._repos[root]

    def opened(self) -> dict[str, MemoryRepo]:
        """The mounts' repositories opened so far (root -> repo): what a long-lived process (the
        daemon) holds in memory and watches for a rewrite."""
        return dict(self._repos)

    def set_progress(self, progress: ProgressCallback | None) -> None:
        self.progress = progress
        for repo in self._repos.values():
            repo.index.progress = progress
        if self._source is not None:
            self._source.set_progress(progress)

    def add_many(self, remotes: Mapping[str, str], *, as_user: str | None = None) -> list[MountInfo]:
        """Mount several repositories (root -> remote), the workspace view written once at the end.
        One that fails stops the rest with its error; the ones mounted before it stay mounted."""
        try:
            return [self.add(root, remote, as_user=as_user, refresh_view=False)
                    for root, remote in sorted(remotes.items())]
        finally:
            self.write_view()

    def add(self, root: str, remote: str, *, as_user: str | None = None, refresh_view: bool = True) -> MountInfo:
        """Clone ``remote`` and mount it at ``root``. The clone must be a scope repository holding
        ``root`` (``[scope] root`` in its mdmem.toml) or holding no other root's notes."""
        check_root(root)
        if as_user is not None:
            self.check_user(as_user)
        if root in self.file.mounts:
            raise BadInput(f"{root}: already mounted from {self.file.mounts[root].remote}; "
                           f"mdmem workspace remove {root} first")
        shown = self.root / root
        if shown.exists() or shown.is_symlink():
            raise BadInput(f"{shown}: already exists in the workspace; a mount is shown there")
        dest = self.root / mount_folder(root)
        if dest.exists():
            raise BadInput(f"{dest}: a clone is already there (a mount removed by hand?); delete that folder first")
        clones.clone(remote, dest)
        try:
            self._check_clone(root, dest)
        except MdmemError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        (dest / root).mkdir(parents=True, exist_ok=True)  # a new root's folder: git keeps no empty folder
        hooks.configure(dest, sys.executable)  # as `mdmem init` does: the clone's commits are checked
        shown.parent.mkdir(parents=True, exist_ok=True)
        shown.symlink_to(Path("..", mount_folder(root), root), target_is_directory=True)
        self.file.mounts[root] = Mount(root, remote, mount_folder(root))
        self.file.known = [r for r in self.file.known if r != root]
        self.file.save(self.root)
        repo = self.repo_for(root)
        if reads(repo, self.user, root):
            # git clone brings only the main branch: the holds waiting for review come as sync brings them
            with contextlib.suppress(MdmemError):
                repo.sync(as_user=self.user)
        if refresh_view:
            self.write_view()
        return self.mount_info(root)

    def _check_clone(self, root: str, dest: Path) -> None:
        if not (dest / CONFIG_NAME).exists():
            raise BadInput(f"{root}: the clone has no {CONFIG_NAME}: not a memory repository")
        with MemoryRepo.open(dest, **self.settings) as repo:
            declared = repo.config.scope_root
            if declared is not None and declared != root:
                raise BadInput(f"{root}: the repository holds {declared} ([scope] root in its {CONFIG_NAME}); "
                               f"mount it at {declared}")
            others = sorted({p.split("/")[0] + "/" + p.split("/")[1] for p in repo.store.tracked_note_paths()
                             if note_layout.is_note_path(p)} - {root})
            if others:
                raise BadInput(f"{root}: the repository also holds {', '.join(others[:5])}; a scope repository holds "
                               "one root (mdmem split makes them)")

    def remove(self, root: str, *, as_user: str | None = None, force: bool = False) -> None:
        """Unmount ``root`` and delete its clone. Refused while it has commits no remote has or
        uncommitted edits (they would be lost), unless ``force``."""
        if as_user is not None:
            self.check_user(as_user)
        if root not in self.file.mounts:
            raise BadInput(f"{root}: not mounted (mounted: {', '.join(sorted(self.file.mounts)) or 'none'})")
        path = self.clone_path(root)
        if path.exists() and not force:
            state = clones.state(path)
            ahead = clones.unpublished(path)
            if ahead or state.dirty:
                what = ([f"{ahead} commit(s) not pushed"] if ahead else []) + \
                    ([f"{len(state.dirty)} file(s) edited"] if state.dirty else [])
                raise Conflict(f"{root}: {' and '.join(what)}; mdmem sync --push first, or --force to drop them")
        repo = self._repos.pop(root, None)
        self._opened = None
        if repo is not None:
            repo.close()
        shown = self.root / root
        if shown.is_symlink():
            shown.unlink()
        with contextlib.suppress(OSError):
            shown.parent.rmdir()  # team/ or private/ once empty
        shutil.rmtree(path, ignore_errors=True)
        del self.file.mounts[root]
        self.file.save(self.root)
        self.write_view()

    def set_known(self, roots: Iterable[str]) -> None:
        """Roots a host says exist for this person (mounted or not): prove-gone names each one not
        mounted as not read. Saved in the workspace file."""
        self.file.known = sorted({check_root(r, "known root") for r in roots} - set(self.file.mounts))
        self.file.save(self.root)

    def identity_path(self, full: str | Path) -> str | None:
        """A file's note path (``team/<team>/...``) from where it is on disk: under the workspace
        (through a mount's symlink) or inside a mount's clone; None elsewhere."""
        given = Path(full).absolute()
        places = [(self.root.resolve() / self.file.mounts[r].path, r) for r in sorted(self.file.mounts)]
        for candidate in (given, given.resolve()):
            for clone, _ in places:
                if candidate.is_relative_to(clone):
                    return candidate.relative_to(clone).as_posix()
            if candidate.is_relative_to(self.root) and candidate != self.root:
                return candidate.relative_to(self.root).as_posix()
        return None

    def mount_info(self, root: str) -> MountInfo:
        m = self.file.mounts[root]
        path = self.root / m.path
        problem = None if path.exists() else f"{path}: the clone is missing"
        state = clones.state(path) if problem is None else None
        readable = writable = False
        if state is not None:
            try:
                repo = self.repo_for(root)
                readable = reads(repo, self.user, root)
                writable = readable and self.user in repo.access.writers_of_root(root)
                if not readable:
                    problem = f"{self.user} is not declared a reader of {root} in its {CONFIG_NAME}"
            except MdmemError as exc:
                problem = str(exc)
        return MountInfo(root=root, remote=m.remote, path=m.path, head=state.head if state else None,
                         branch=state.branch if state else None, ahead=state.ahead if state else None,
                         behind=state.behind if state else None, dirty=state.dirty if state else [],
                         readable=readable, writable=writable, problem=problem)

    def mount_list(self) -> list[MountInfo]:
        return [self.mount_info(r) for r in sorted(self.file.mounts)]

    def readable(self, user: str) -> Iterator[tuple[str, MemoryRepo]]:
        """(root, repo) of every mount the person may read by its own mdmem.toml; a mount that cannot
        be opened is skipped and named in ``problems``."""
        user = self.check_user(user)
        for root in sorted(self.file.mounts):
            try:
                repo = self.repo_for(root)
                if not reads(repo, user, root):
                    self.problems[root] = f"{user} is not declared a reader of {root} in its {CONFIG_NAME}"
                    continue
            except MdmemError as exc:
                self.problems[root] = str(exc)
                continue
            yield root, repo

    def clone_roots(self) -> list[Path]:
        """Every mount's clone, readable by the person or not: a long-lived server follows
        erasures in each (a mount made readable later by its mdmem.toml is served from then on,
        and one erased there must restart it all the same)."""
        return [self.clone_path(root) for root in sorted(self.file.mounts)]

    def mounted_repos(self, user: str) -> list[MemoryRepo]:
        """The open repository of every mount the person may read (what a long-lived server watches)."""
        return [repo for _, repo in self.readable(user)]

    @property
    def contracts(self) -> Contracts:
        """The kinds a write names are resolved with (the importer's look-ahead): the person's own
        repository's, else the first mount's; each repository's gate still judges its own notes."""
        mine = f"private/{self.user}"
        roots = [mine] if mine in self.file.mounts else sorted(self.file.mounts)[:1]
        return self.repo_for(roots[0]).contracts if roots else Contracts()

    @property
    def user_config(self) -> UserConfig:
        return self.settings.get("user_config") or UserConfig()

    def _writable(self, user: str, root: str) -> MemoryRepo:
        self.check_user(user)
        repo = self.repo_for(root)  # the repository's own gate refuses a writer it does not declare
        try:
            repo.check_user(user)
        except BadInput:
            raise Refused(f"{root}: {user} is not declared in its {CONFIG_NAME} (not a member) and may not "
                          "write there") from None
        return repo

    # --- writing ----------------------------------------------------------------------------
    def remember(self, text: str, *, as_user: str, kind: str, subject: str, key: str | None = None,
                 scope: str | None = None, team: str | None = None, owner: str | None = None,
                 source: str = "user", ttl: SpanLike = None, valid_from: TimeLike = None, new_key: bool = False,
                 expect_version: str | None = None, derived_from: list[str] | None = None,
                 context: str | None = None, now: TimeLike = None, channel: str = HUMAN,
                 claimed_source: str | None = None) -> WriteResult:
        """One note, routed to the repository of its root: one commit there."""
        user = require_user(as_user)
        root = root_for(user, note_layout.default_scope(scope, team), team, owner)
        with self._lock():
            result = self._writable(user, root).remember(
                text, as_user=user, kind=kind, subject=subject, key=key, scope=scope, team=team, owner=owner,
                source=source, ttl=ttl, valid_from=valid_from, new_key=new_key, expect_version=expect_version,
                derived_from=derived_from, context=context, now=now, channel=channel, claimed_source=claimed_source)
        self.write_view(now=now)
        return result

    def remember_many(self, items: Iterable[Mapping[str, Any]], *, as_user: str, now: TimeLike = None,
                      new_key: bool = False, batch_size: int = 1000,
                      progress: ProgressCallback | None = None) -> BatchResult:
        """Notes for several roots: each root's notes in one commit of its repository. The whole write
        is journaled first, so a crash between repositories is finished by the next command."""
        user = self.check_user(as_user)
        when = resolve_now(now)
        by_root: dict[str, list[dict[str, Any]]] = {}
        out = BatchResult()
        for n, raw in enumerate(items, 1):
            item = dict(raw)
            item.setdefault("line", n)
            try:
                root = root_for(user, note_layout.default_scope(item.get("scope"), item.get("team")),
                                item.get("team"), item.get("owner"))
                if root not in self.file.mounts:
                    self.repo_for(root)  # raises Refused naming the root
            except MdmemError as exc:
                out.refused.append({"line": item["line"], "reason": str(exc), "exit_code": exc.exit_code})
                continue
            by_root.setdefault(root, []).append(item)
        with self._lock():
            before = {root: self.repo_for(root).store.head() for root in by_root}
            # The holds each repository had: a part whose items were all held moves no tip, and
            # is known done after a crash by the holds it made (see _left_to_write).
            holds = {root: sorted(r.review_id for r in self.repo_for(root).review_list(as_user=user))
                     for root in by_root}
            args = {"items": by_root, "now": str(when.isoformat()), "new_key": new_key, "holds_before": holds}
            pending = start_op(self.root, "remember_many", user, args, before)
            self._run_writes(pending, progress=progress, into=out)
            finish_op(self.root, pending)
        self.write_view(now=when)
        return out

    def _run_writes(self, pending: Pending, *, progress: ProgressCallback | None = None,
                    into: BatchResult | None = None) -> BatchResult:
        out = into if into is not None else BatchResult()
        for root, items in sorted(pending.args["items"].items()):
            if root in pending.done:
                continue
            repo = self.repo_for(root)
            if repo.store.head() != pending.before.get(root):
                mark_done(self.root, pending, root)  # its commit landed before the crash
                continue
            items = self._left_to_write(repo, pending, root, items)
            if not items:
                mark_done(self.root, pending, root)  # every item was held before the crash
                continue
            done = repo.remember_many(items, as_user=pending.user, now=pending.args["now"],
                                      new_key=pending.args["new_key"], batch_size=max(1, len(items)),
                                      progress=progress)
            out.committed += done.committed
            out.held += done.held
            out.refused += done.refused
            out.commits += done.commits
            out.index[root] = done.index
            mark_done(self.root, pending, root)
        # The workspace daemon's output goes as each repository's daemon log goes (purge_caches):
        # the erasure ends that daemon, and what it wrote may quote what was erased.
        with contextlib.suppress(OSError):
            (self.root / JOURNAL_DIR / DAEMON_LOG).unlink()
        return out

    @staticmethod
    def _left_to_write(repo: MemoryRepo, pending: Pending, root: str,
                       items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of ``root``'s part still to write after a crash that left its tip where it
        was: those this write did not hold already (a hold this person made since the journal
        was written, of the item's text). A refused item changed nothing and is asked again.
        A journal from before holds were recorded: every item."""
        known = (pending.args.get("holds_before") or {}).get(root)
        if known is None:
            return items
        made: dict[str, int] = {}
        for item in repo.review_list(as_user=pending.user):
            if item.review_id not in known and item.actor == pending.user:
                made[item.text.strip()] = made.get(item.text.strip(), 0) + 1
        left = []
        for item in items:
            text = str(item.get("text") or "").strip()
            if made.get(text):
                made[text] -= 1
            else:
                left.append(item)
        return left

    def finish_pending(self) -> list[str]:
        """Finish every multi-repository operation a crash cut short (their journal), repo by repo;
        the ids finished."""
        finished = []
        with self._lock():
            for pending in pending_ops(self.root):
                if pending.op == "remember_many":
                    self._run_writes(pending)
                elif pending.op == "forget":
                    self._run_forget(pending)
                finish_op(self.root, pending)
                finished.append(pending.id)
        if finished:
            self.write_view()  # the view made before the crash may quote what was erased
        return finished

    def retire(self, *, as_user: str, path: str, valid_until: TimeLike = None, expect_version: str | None = None,
               now: TimeLike = None) -> WriteResult:
        user = self.check_user(as_user)
        result = self._writable(user, self._root_of(path, user)).retire(
            as_user=user, path=path, valid_until=valid_until, expect_version=expect_version, now=now)
        self.write_view(now=now)
        return result

    def move(self, *, as_user: str, path: str, key: str, expect_version: str | None = None,
             now: TimeLike = None) -> WriteResult:
        user = self.check_user(as_user)
        result = self._writable(user, self._root_of(path, user)).move(
            as_user=user, path=path, key=key, expect_version=expect_version, now=now)
        self.write_view(now=now)
        return result

    def sweep(self, *, as_user: str, now: TimeLike = None) -> SweepResult:
        """Each readable mount's expired notes the person may write, one commit per repository."""
        removed: list[str] = []
        commits = []
        for _, repo in self.readable(as_user):
            if as_user not in repo.access.writers_of_root(repo.config.scope_root or ""):
                continue
            done = repo.sweep(as_user=as_user, now=now)
            removed += done.removed
            commits.append(done.commit)
        self.write_view(now=now)
        return SweepResult(removed=removed, commit=next((c for c in commits if c), None))

    def consolidate(self, *, as_user: str, subject: str, scope: str | None = None, team: str | None = None,
                    now: TimeLike = None) -> WriteResult:
        user = self.check_user(as_user)
        root = root_for(user, note_layout.default_scope(scope, team), team, None)
        result = self._writable(user, root).consolidate(as_user=user, subject=subject, scope=scope, team=team,
                                                        now=now)
        self.write_view(now=now)
        return result

    # --- review -------------------------------------------------------------------------------
    def review_list(self, *, as_user: str) -> list[ReviewItem]:
        return [item for _, repo in self.readable(as_user) for item in repo.review_list(as_user=as_user)]

    def sync_conflicts(self, *, as_user: str) -> list[dict]:
        return [c for _, repo in self.readable(as_user) for c in repo.sync_conflicts(as_user=as_user)]

    def _holder_of(self, review_id: str, user: str) -> MemoryRepo:
        for _, repo in self.readable(user):
            if any(item.review_id == review_id for item in repo.review_list(as_user=user)):
                return repo
        raise NotFound(f"review {review_id}: no such held write visible to {user} in this workspace")

    def approvers(self, review_id: str, *, as_user: str) -> list[str]:
        return self._holder_of(review_id, as_user).approvers(review_id, as_user=as_user)

    def approve(self, review_id: str, *, as_user: str, new_key: bool = False, override: bool = False,
                now: TimeLike = None) -> WriteResult:
        result = self._holder_of(review_id, as_user).approve(review_id, as_user=as_user, new_key=new_key,
                                                             override=override, now=now)
        self.write_view(now=now)
        return result

    def reject(self, review_id: str, *, as_user: str, now: TimeLike = None) -> ReviewItem:
        return self._holder_of(review_id, as_user).reject(review_id, as_user=as_user, now=now)

    # --- reading --------------------------------------------------------------------------------
    def _root_of(self, path: str, user: str) -> str:
        try:
            return note_layout.parse_path(note_layout.check_note_path(path)).root
        except BadInput:
            raise not_visible(str(path)[:200], user) from None

    def _reader_for(self, path: str, user: str) -> MemoryRepo:
        """The mount holding ``path``; an unmounted root answers as a note not visible (no oracle)."""
        self.check_user(user)
        root = self._root_of(path, user)
        if root not in self.file.mounts or not reads(self.repo_for(root), user, root):
            raise not_visible(path, user)
        return self.repo_for(root)

    def _selected_roots(self, user: str, scope: str | None, team: str | None) -> list[str] | None:
        """The roots a selector names (None: every root, the person's private one first)."""
        if scope is None and team is None:
            return None
        return [root_for(user, note_layout.default_scope(scope, team), team, None)]

    def _candidates(self, user: str, scope: str | None, team: str | None) -> Iterator[tuple[str, MemoryRepo]]:
        wanted = self._selected_roots(user, scope, team)
        mounts = list(self.readable(user))
        private = f"private/{user}"
        mounts.sort(key=lambda rr: (rr[0] != private, rr[0]))  # the person's own note wins
        for root, repo in mounts:
            if wanted is None or root in wanted:
                yield root, repo

    @staticmethod
    def _scope_args(root: str) -> dict[str, str | None]:
        scope, name = root.split("/")
        return {"scope": scope, "team": name if scope == "team" else None}

    def get(self, *, as_user: str, path: str | None = None, subject: str | None = None,
            kind: str | None = None, key: str | None = None, scope: str | None = None,
            team: str | None = None, now: TimeLike = None) -> StoredNote:
        user = self.check_user(as_user)
        if path:
            return self._reader_for(path, user).get(as_user=user, path=path, now=now)
        for root, repo in self._candidates(user, scope, team):
            with contextlib.suppress(NotFound):
                return repo.get(as_user=user, subject=subject, kind=kind, key=key, now=now, **self._scope_args(root))
        if not (subject and kind):
            raise BadInput("get: pass a path, or subject and kind and key")
        raise not_visible(f"{subject} {kind} {key or ''}".strip(), user)

    def keys(self, *, as_user: str, subject: str, kind: str, scope: str | None = None,
             team: str | None = None, now: TimeLike = None) -> list[KeyInfo]:
        user = self.check_user(as_user)
        out: list[KeyInfo] = []
        for root, repo in self._candidates(user, scope, team):
            out += repo.keys(as_user=user, subject=subject, kind=kind, now=now, **self._scope_args(root))
        return out

    def notes(self, *, as_user: str, now: TimeLike = None, include_ended: bool = False) -> list[StoredNote]:
        return [n for _, repo in self.readable(as_user)
                for n in repo.notes(as_user=as_user, now=now, include_ended=include_ended)]

    def show(self, *, as_user: str, path: str) -> StoredNote:
        return self._reader_for(path, as_user).show(as_user=as_user, path=path)

    def listing(self, *, as_user: str, subject: str | None = None, kind: str | None = None,
                root: str | None = None, include_ended: bool = False, now: TimeLike = None) -> list[StoredNote]:
        out: list[StoredNote] = []
        parts = root.strip("/").split("/") if root else []
        for mounted, repo in self.readable(as_user):
            if parts and mounted.split("/")[:len(parts[:2])] != parts[:2]:
                continue  # another root (or another scope) than the one asked for
            out += repo.listing(as_user=as_user, subject=subject, kind=kind, root=root if len(parts) >= 2 else None,
                                include_ended=include_ended, now=now)
        return sorted(out, key=lambda s: s.path)

    def check(self) -> tuple[list[StoredNote], list[NoteInvalid]]:
        """Every mount's notes and invalid notes (each repository checked as it is)."""
        good: list[StoredNote] = []
        bad: list[NoteInvalid] = []
        for root in sorted(self.file.mounts):
            repo = self.repo_for(root)
            g, b = repo.check()
            good += g
            bad += b
            if not reads(repo, self.user, root):
                # The host let this person clone it, the repository does not declare them: the
                # host's rules and the declarations have drifted apart (regenerate the host's rules).
                bad.append(NoteInvalid(root, "membership", f"{self.user} has a clone of this repository but its "
                                       f"{CONFIG_NAME} does not declare them a reader; the host's access rules "
                                       "and the declared members disagree"))
        return good, bad

    def stale_views(self) -> list[str]:
        return [v for root in sorted(self.file.mounts) for v in self.repo_for(root).stale_views()]

    def history(self, *, as_user: str, path: str | None = None, subject: str | None = None,
                kind: str | None = None, key: str | None = None, scope: str | None = None,
                team: str | None = None, at: TimeLike = None) -> list[Version]:
        user = self.check_user(as_user)
        if path:
            return self._reader_for(path, user).history(as_user=user, path=path, at=at)
        if not (subject and kind):
            raise BadInput("history: pass a path, or subject and kind and key")
        out: list[Version] = []
        for root, repo in self._candidates(user, scope, team):
            with contextlib.suppress(NotFound):
                out += repo.history(as_user=user, subject=subject, kind=kind, key=key, at=at,
                                    **self._scope_args(root))
        if not out:
            raise not_visible(f"{subject} {kind} {key or ''}".strip(), user)
        return sorted(out, key=lambda v: v.time, reverse=True)

    def verify(self, *, as_user: str | None = None) -> dict[str, Any]:
        """Each mount's verify, merged: the untrusted notes of every repository."""
        merged: dict[str, Any] = {}
        for root in sorted(self.file.mounts):
            if as_user is not None:
                self.check_user(as_user)
                repo = self.repo_for(root)
                if as_user not in repo.access.users:
                    continue
            result = self.repo_for(root).verify(as_user=as_user)
            for name, value in result.items():
                if isinstance(value, list):
                    merged.setdefault(name, []).extend(value)
                elif isinstance(value, dict):
                    merged.setdefault(name, {}).update(value)
                else:
                    merged.setdefault("by_root", {}).setdefault(root, {})[name] = value
        return merged

    def untrusted(self, path: str) -> str | None:
        root = self._root_of(path, self.user)
        return self.repo_for(root).untrusted(path) if root in self.file.mounts else None

    def broken(self, *, as_user: str) -> dict[str, str]:
        """Notes the workspace's index keeps out as broken, in the roots the person may read."""
        return searching.broken(self.index_source(), as_user=self.check_user(as_user))  # type: ignore[arg-type]

    # --- the index and recall -------------------------------------------------------------------
    def index_source(self) -> WorkspaceSource:
        """The mounts as the one repository the workspace's index and recall read (workspace/index.py)."""
        if self._source is None:
            self._source = WorkspaceSource(self.root, self._open_mounts, self._readable_roots, self._primary,
                                           self.get, self.user_config)
            if self.progress is not None:
                self._source.set_progress(self.progress)
        return self._source

    @property
    def index(self) -> WorkspaceIndex:
        """The one search index over every mount (what a repository's ``index`` is to it)."""
        return self.index_source().index

    def _open_mounts(self) -> dict[str, MemoryRepo]:
        """Every mount that opens (one that does not is named in ``problems``); asked several
        times a recall, so kept until a mount is opened, added or removed."""
        if self._opened is not None and self._opened[0] == self.file.mounts.keys():
            return self._opened[1]
        out = {}
        for root in sorted(self.file.mounts):
            try:
                out[root] = self.repo_for(root)
            except MdmemError as exc:
                self.problems[root] = str(exc)
        if len(out) == len(self.file.mounts):  # one that failed is tried again next time
            self._opened = (frozenset(out), out)
        return out

    def _readable_roots(self, user: str) -> list[str]:
        """The roots whose own repository lets ``user`` read them, by its mdmem.toml as it is now
        (a team that removed the person stops answering at once, as in one repository)."""
        user = self.check_user(user)
        out = []
        tips = self.index_source().store.tips_read()
        for root in sorted(self.file.mounts):
            try:
                if root not in tips:
                    self.repo_for(root)  # the reason it does not open, into problems
                    continue
                repo, tip, fresh = tips[root]
                # What changes who may read it: a commit (mdmem.toml at the tip), the file as
                # edited, an erasure (its stamp file is in the git folder, read again then).
                # Unchanged since the last recall: the answer stands (the whole check cost
                # ~0.3 ms a mount, each recall).
                config_file = self._config_files.get(root)
                if config_file is None or config_file[0] is not repo:  # (pathlib's join: ~10 us a mount)
                    config_file = self._config_files[root] = (repo, str(repo.root / CONFIG_NAME))
                stamp = (id(repo), user, tip, file_stamp(config_file[1]))  # type: ignore[arg-type]  # a str: os.stat takes it
                known = self._readers.get(root)
                if known is None or known[0] != stamp or fresh:
                    repo.follow_config()
                    known = (stamp, reads(repo, user, root))
                    self._readers[root] = known
                if known[1]:
                    out.append(root)
                else:
                    self.problems[root] = f"{user} is not declared a reader of {root} in its {CONFIG_NAME}"
            except MdmemError as exc:
                self.problems[root] = str(exc)
        return out

    def _primary(self) -> MemoryRepo | None:
        """Whose settings the index follows (embedder, fusion, the floor): the person's own
        repository's, else the first mount's."""
        mounts = self._open_mounts()
        mine = f"private/{self.user}"
        return mounts.get(mine) or next(iter(mounts.values()), None)

    def reindex(self, *, rebuild: bool = False, progress: ProgressCallback | None = None) -> IndexReport:
        """The workspace's index caught up with every mount (or rebuilt from their notes)."""
        return searching.reindex(self.index_source(), rebuild=rebuild, progress=progress)  # type: ignore[arg-type]

    def recall(self, query: str, *, as_user: str, k: int = 5, kinds: list[str] | None = None,
               subject: str | None = None, key: str | None = None, at: TimeLike = None,
               include_history: bool = False, now: TimeLike = None, tags: list[str] | None = None) -> list[Hit]:
        """Every readable mount's notes in one index, one ranking: BM25F's statistics over the
        notes the person may read in every mount, as one repository holding them counts them."""
        user = self.check_user(as_user)
        return searching.recall(self.index_source(), query, as_user=user, k=k, kinds=kinds,  # type: ignore[arg-type]
                                subject=subject, key=key, at=at, include_history=include_history, now=now,
                                tags=tags)

    def keep_warm(self, *, as_user: str | None = None) -> None:
        roots = tuple(sorted(self._readable_roots(self.check_user(as_user)))) if as_user is not None else None
        self.index_source().keep_warm(roots)

    # --- views ------------------------------------------------------------------------------------
    def render(self, *, as_user: str, now: TimeLike = None) -> dict[str, Any]:
        """Every writable mount's views regenerated (a commit each where they changed), and the
        workspace's own MEMORY.md."""
        user = self.check_user(as_user)
        out: dict[str, Any] = {}
        for root, repo in self.readable(user):
            if user in repo.access.writers_of_root(root):
                out[root] = repo.render(as_user=user, now=now).to_dict()
        self.write_view(now=now)
        return {"mounts": out, "workspace_view": str(self.root / VIEW_NAME)}

    def startup(self, *, as_user: str, now: TimeLike = None) -> str:
        """What an agent serving this person reads first: the workspace's mounts and each readable
        root's view, composed within the budget."""
        return compose(self, self.check_user(as_user), resolve_now(now))

    def write_view(self, *, now: TimeLike = None) -> None:
        """The workspace's MEMORY.md, generated for its person; never inside any scope repository."""
        write_view(self, resolve_now(now))

    # --- other clones -------------------------------------------------------------------------------
    def sync(self, *, as_user: str, remote: str = "origin", push: bool = False, replay: bool = False,
             now: TimeLike = None, roots: list[str] | None = None) -> WorkspaceSync:
        """Every mount synced with its remote, in parallel; one failing is named with its error and
        does not stop the others."""
        user = self.check_user(as_user)
        chosen = sorted(roots or self.file.mounts)
        for root in chosen:
            if root not in self.file.mounts:
                self.repo_for(root)  # Refused, naming it
        repos = {}
        results: dict[str, MountSync] = {}
        for root in chosen:
            try:
                repos[root] = self.repo_for(root)
            except MdmemError as exc:
                results[root] = self._failed(root, exc)

        def one(root: str) -> MountSync:
            try:
                report = repos[root].sync(as_user=user, remote=remote, push=push, replay=replay, now=now)
                return MountSync(root=root, remote=self.file.mounts[root].remote, ok=True, report=report)
            except Exception as exc:  # noqa: BLE001 -- each repository's failure is reported, none stops the rest
                return self._failed(root, exc)

        before = {root: repo.store.head() for root, repo in repos.items()}
        with ThreadPoolExecutor(min(SYNC_THREADS, max(1, len(repos)))) as pool:
            for result in pool.map(one, sorted(repos)):
                results[result.root] = result
        # The view is a function of the mounts' tips (and of the time, for what expired): when no
        # tip moved it stands as the last write left it, and a cold process need not render
        # every mount's view to write the same file again.
        moved = any(repo.store.head() != before[root] for root, repo in repos.items())
        if moved or not (self.root / VIEW_NAME).exists():
            self.write_view(now=now)
        if replay and moved:
            # An erasure taken in by the replay: the workspace's index drops what no mount's history
            # holds now, as forget purges it (a proof right after found the erased text there).
            self.index_source().purge(self._history_texts)
        return WorkspaceSync(mounts=[results[r] for r in chosen])

    def _failed(self, root: str, exc: BaseException) -> MountSync:
        err = as_mdmem_error(exc)
        return MountSync(root=root, remote=self.file.mounts[root].remote, ok=False,
                         error=f"{root} ({self.file.mounts[root].remote}): {err}", error_kind=err.kind)

    # --- erasure ------------------------------------------------------------------------------------
    def forget(self, *, as_user: str, subject: str | None = None, owner: str | None = None,
               paths: list[str] | None = None, texts: list[str] | None = None, dry_run: bool = False,
               push: bool = False, scrub: bool = True, force: bool = False,
               now: TimeLike = None) -> WorkspaceErasure:
        """An erasure across every mount it concerns: ``paths`` in their roots' repositories; a
        subject, owner or text in every mount (the owner's private repository whole, notes about
        them and quotes of them in team repositories). Journaled: a crash is finished by the next
        command, repository by repository; each repository keeps its own receipt."""
        from ..erasure.plan import check_targets

        user = self.check_user(as_user)
        # Checked before the journal is written: a refused needle journaled was replayed by every
        # later command, each refused the same way (the workspace unusable).
        texts = check_targets(subject=subject, owner=owner, paths=paths, texts=texts) or None
        args = {"subject": subject, "owner": owner, "paths": paths, "texts": texts, "push": push,
                "scrub": scrub, "force": force, "now": resolve_now(now).isoformat()}
        targets = self._erasure_roots(user, owner=owner, paths=paths)
        out = WorkspaceErasure()
        if owner is not None and f"private/{owner}" not in self.file.mounts:
            out.skipped[f"private/{owner}"] = "not mounted in this workspace: erase it on its host or in a " \
                                               "workspace that mounts it"
        for root, why in self.problems.items():
            out.skipped.setdefault(root, why)
        if dry_run:
            for root in targets:
                try:
                    out.receipts[root] = self._forget_one(root, user, args, dry_run=True)
                except NotFound:
                    out.nothing.append(root)
                except (Refused, BadInput) as exc:
                    out.skipped[root] = str(exc)
                    out.refused.append(root)
                except MdmemError as exc:
                    out.skipped[root] = str(exc)
            return out
        with self._lock():
            before = {root: self.repo_for(root).store.head() for root in targets}
            pending = start_op(self.root, "forget", user, args, before)
            self._run_forget(pending, into=out)
            finish_op(self.root, pending)
        self.write_view(now=now)
        return out

    def _erasure_roots(self, user: str, *, owner: str | None, paths: list[str] | None) -> list[str]:
        if paths:
            roots = sorted({self._root_of(p, user) for p in paths})
            missing = [r for r in roots if r not in self.file.mounts]
            if missing:
                self.repo_for(missing[0])  # Refused, naming it
            return roots
        # Every mount whose mdmem.toml declares this person (an eraser need not read a root to erase it).
        return [root for root in sorted(self.file.mounts) if self._declares(root, user)]

    def _declares(self, root: str, user: str) -> bool:
        try:
            self.repo_for(root).check_user(user)
            return True
        except MdmemError as exc:
            self.problems[root] = str(exc)
            return False

    def _forget_one(self, root: str, user: str, args: dict[str, Any], *, dry_run: bool) -> ErasurePlan | ErasureReceipt:
        paths = [p for p in args["paths"] or [] if p.startswith(root + "/")] or None
        if args["paths"] and not paths:
            raise NotFound(f"forget: nothing in {root}")
        return self.repo_for(root).forget(as_user=user, subject=args["subject"], owner=args["owner"], paths=paths,
                                          texts=args["texts"], dry_run=dry_run, push=args["push"],
                                          scrub=args["scrub"], force=args["force"], now=args["now"])

    def _run_forget(self, pending: Pending, into: WorkspaceErasure | None = None) -> WorkspaceErasure:
        out = into if into is not None else WorkspaceErasure()
        for root in sorted(pending.before):
            if root in pending.done:
                continue
            try:
                # Opening finishes this repository's own interrupted erasure. Asked again even if
                # its tip moved since the journal began: an erasure made before a crash finds
                # nothing now (NotFound), and a tip moved by another process's write (a server
                # of this workspace) is no erasure, which skipping took it for.
                self.repo_for(root)
                out.receipts[root] = self._forget_one(root, pending.user, pending.args, dry_run=False)
            except NotFound:
                out.nothing.append(root)
            except (Refused, BadInput) as exc:
                # Refused input is refused again on every try: named, never left to be replayed.
                out.skipped[root] = str(exc)
                out.refused.append(root)
            except MdmemError as exc:
                # This repository could not be erased now (its remote unreachable, commits to sync
                # first): named, and the operation ends; left journaled, every later command
                # replayed it and failed the same way, the other mounts' erasure included.
                out.skipped[root] = str(exc)
            mark_done(self.root, pending, root)
        # The workspace's index holds every mount's notes: rebuilt from them, and its embeddings
        # kept only for texts some mount's history holds (a crash before this finishes the
        # operation again, this included).
        self.index_source().purge(self._history_texts)
        return out

    def _history_texts(self) -> set[str]:
        from ..erasure.scan import HistoryScan, history_texts

        return {t for repo in self._open_mounts().values()
                for t in history_texts(HistoryScan.read(repo.root), repo.contracts)}

    def finish_erasure(self) -> list[str]:
        return self.finish_pending()

    def prove_gone(self, needles: list[str], *, as_user: str, subject: str | None = None,
                   owner: str | None = None, allow_paths: list[str] | None = None) -> WorkspaceProof:
        """Each mount proved; every repository not read is named, and then the proof is INCOMPLETE,
        never PASS: a mount that cannot be opened, one whose mdmem.toml does not let this person
        read it, the owner's private repository when not mounted, and roots the host lists that are
        not mounted (``known`` in the workspace file)."""
        user = self.check_user(as_user)
        proofs = {}
        unread: dict[str, str] = {}
        for root in sorted(self.file.mounts):
            try:
                repo = self.repo_for(root)
                proofs[root] = repo.prove_gone(needles, as_user=user, subject=subject, owner=owner,
                                               allow_paths=[p for p in allow_paths or [] if p.startswith(root + "/")])
            except MdmemError as exc:
                unread[root] = f"could not be read: {exc}"
        for root in self.file.known:
            if root not in self.file.mounts:
                unread[root] = "not mounted in this workspace (the host lists it)"
        if owner is not None and f"private/{owner}" not in self.file.mounts:
            unread.setdefault(f"private/{owner}", "not mounted in this workspace")
        left = self._workspace_files_holding(needles) + self._index_leftovers()
        failed = any(p.verdict == FAIL for p in proofs.values()) or bool(left)
        short = unread or not proofs or any(p.verdict != PASS for p in proofs.values())
        verdict = FAIL if failed else INCOMPLETE if short else PASS
        return WorkspaceProof(proofs=proofs, unread=unread, verdict=verdict, workspace_files=left)

    def _index_leftovers(self) -> list[str]:
        """The workspace index's documents (and, with every mount read, embedding-cache entries)
        whose text no mount's history holds: what an erasure left in the cache, named."""
        opened = self._open_mounts()
        if not (self.index_source().cache_folder.exists()):
            return []
        return self.index_source().leftovers(self._history_texts(), opened.__contains__,
                                             eraser=len(opened) == len(self.file.mounts))

    def _workspace_files_holding(self, needles: list[str]) -> list[str]:
        """The workspace's own files (its generated MEMORY.md, its daemon's log, journals of
        operations under way) that still hold a needle: named, never the needle."""
        files = [self.root / VIEW_NAME, self.root / WORKSPACE_FILE, self.root / JOURNAL_DIR / DAEMON_LOG,
                 *sorted((self.root / JOURNAL_DIR).glob("*.json*"))]
        out = []
        for path in files:
            try:
                text = file_text(path).casefold()
            except OSError:
                continue
            if any(n.casefold() in text for n in needles if n):
                out.append(str(path.relative_to(self.root)))
        return out
