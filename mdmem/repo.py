"""MemoryRepo: the facade. An open repo's state (ops/state.py) plus one thin method per
operation; the operations themselves live in ops/ (read, write, holds, review, lifecycle,
render, searching, consolidate, founding) and erasure/."""
from __future__ import annotations

import datetime as _dt
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .config import CONFIG_NAME, UserConfig
from .errors import BadInput, NoteInvalid
from .model.clock import SpanLike, TimeLike, resolve_now
from .ops import consolidate as consolidating
from .ops import founding, lifecycle, read, render, review, searching, write
from .ops.state import RepoState
from .policy.access import require_user
from .policy.gate import HUMAN
from .results import (BatchResult, ErasurePlan, ErasureReceipt, IndexReport, KeyInfo, ProgressCallback, ProofReport,
                      RenderResult, ReviewItem,
                      SweepResult, Version, WriteResult)
from .storage.worktree import StoredNote

if TYPE_CHECKING:
    from .search.recall import Hit


ACTOR_PARAMETERS = ("as_user", "actor")  # how a facade operation names who is acting
_Op = TypeVar("_Op", bound=Callable[..., Any])
_Cls = TypeVar("_Cls", bound=type)


def _declared_actor(op: _Op) -> _Op:
    """``op`` refuses an undeclared acting user before it does anything (Access.check_user)."""
    params = inspect.signature(op).parameters
    name = next(p for p in ACTOR_PARAMETERS if p in params)
    optional = params[name].default is None  # verify(as_user=None): every root, no one acting

    @functools.wraps(op)
    def checked(self: MemoryRepo, *args: Any, **kwargs: Any) -> Any:
        user = kwargs.get(name)
        # who may do what: by mdmem.toml as it is now, not as it was at open
        if optional and user is None:
            self.follow_config()
        else:
            self.check_user(user)
        return op(self, *args, **kwargs)
    return checked  # type: ignore[return-value]


def _declared_actors_only(cls: _Cls) -> _Cls:
    """The one place the facade refuses undeclared users: every public operation that takes
    ``as_user``/``actor`` checks it first, including ones that never ask Access (render, sync
    through the API) and any added later (tests/test_trust.py enumerates them)."""
    for name, op in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(op):
            continue
        params = inspect.signature(op).parameters
        if any(p in params for p in ACTOR_PARAMETERS):
            setattr(cls, name, _declared_actor(op))
    return cls


@_declared_actors_only
class MemoryRepo(RepoState):
    """A memory repository: notes in git, kinds, scopes, the write gate and history."""

    def __init__(self, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
                 user_config: UserConfig | None = None, finish_erasure: bool = True) -> None:
        """Open the memory repo at ``path`` (same as :meth:`open`). ``embedder`` and ``fusion``
        override ``mdmem.toml`` ([embedder] backend, [recall] fusion) for this process; the
        library never reads them from the environment (the CLI does, MDMEM_EMBEDDER/MDMEM_FUSION).
        ``user_config`` is the acting person's own configuration (where note text may be sent,
        with which secret; the signing key): never taken from the repo.
        An erasure a crash interrupted is finished first, under the lock: no command sees a
        half-erased repository (``finish_erasure=False`` is for `forget --resume` itself)."""
        from .erasure.journal import pending

        super().__init__(path, embedder=embedder, fusion=fusion, user_config=user_config)
        if finish_erasure and pending(self.root):
            self.finish_erasure()

    # --- opening --------------------------------------------------------------------
    @classmethod
    def init(cls, path: str | Path, *, teams: dict[str, list[str]] | None = None, erasers: list[str] | None = None,
             as_user: str, now: TimeLike = None, embedder: str | None = None,
             fusion: str | None = None, people: list[str] | None = None,
             emails: dict[str, list[str]] | None = None, scope_root: str | None = None) -> MemoryRepo:
        """A new memory repo in an empty folder; ``as_user`` (required) is who made it.
        ``scope_root`` (``team/<team>`` or ``private/<user>``): a scope repository holding that
        one root, for a workspace to mount (``[scope] root`` in mdmem.toml).
        ``people``: users with only private memory, declared in ``[people]`` (with the creator
        when no team or role names them): a repo that declares users accepts only those.
        ``emails``: people's own git addresses for ``[people.<user>] emails`` (the CLI passes
        the founder's, from git's config), so their hand commits count as theirs."""
        as_user = require_user(as_user)
        when = resolve_now(now)
        root = founding.found(path, teams=teams, erasers=erasers, as_user=as_user, when=when, people=people,
                             emails=emails, scope_root=scope_root)
        repo = cls.open(root, embedder=embedder, fusion=fusion)
        repo.render(as_user=as_user, now=when)
        return repo

    @classmethod
    def open(cls, path: str | Path, *, embedder: str | None = None, fusion: str | None = None,
             user_config: UserConfig | None = None, finish_erasure: bool = True) -> MemoryRepo:
        """The memory repo at ``path``; ``with MemoryRepo.open(path) as repo:`` closes it."""
        return cls(path, embedder=embedder, fusion=fusion, user_config=user_config, finish_erasure=finish_erasure)

    def __enter__(self) -> MemoryRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def find(cls, start: str | Path | None = None, *, embedder: str | None = None,
             fusion: str | None = None, user_config: UserConfig | None = None,
             finish_erasure: bool = True) -> MemoryRepo:
        """The memory repo at or above ``start`` (the current folder by default)."""
        return cls.open(cls.locate(start), embedder=embedder, fusion=fusion, user_config=user_config,
                        finish_erasure=finish_erasure)

    @staticmethod
    def locate(start: str | Path | None = None) -> Path:
        """The folder of the memory repo at or above ``start``, without opening it."""
        here = Path(start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).exists():
                return folder
        raise BadInput(f"{here}: not inside a memory repo (no {CONFIG_NAME} here or above); "
                       "pass --repo PATH or set MDMEM_REPO")

    # --- trust --------------------------------------------------------------------
    def verify(self, *, as_user: str | None = None) -> dict[str, Any]:
        """Every note whose latest commit was not made by a permitted writer of its root, or whose
        frontmatter disagrees with its path, with the reason (``mdmem verify``). With ``as_user``
        only the roots they may read (and mdmem.toml, everyone's): no oracle for the others."""
        return read.verify(self, as_user=as_user)

    def untrusted(self, path: str) -> str | None:
        """Why the committed note at ``path`` is not trusted, or None."""
        return read.untrusted(self, path)

    # --- writing (ops/write.py) -----------------------------------------------------------
    def remember(self, text: str, *, as_user: str, kind: str, subject: str, key: str | None = None,
                 scope: str | None = None, team: str | None = None, owner: str | None = None,
                 source: str = "user", ttl: SpanLike = None, valid_from: TimeLike = None, new_key: bool = False,
                 expect_version: str | None = None, derived_from: list[str] | None = None,
                 context: str | None = None, now: TimeLike = None, channel: str = HUMAN,
                 claimed_source: str | None = None, extra: Mapping[str, Any] | None = None) -> WriteResult:
        """Write one note through the gate: committed, held for review, or refused (raised).

        ``channel`` is who is at the other end: a person (CLI, API) or an agent (the MCP server,
        which passes ``source="agent:<name>"`` and the source the agent claimed, if any).
        ``extra``: fields another tool keeps with the note (tags, aliases, a memory tool's path)."""
        return write.remember(self, text, as_user=as_user, kind=kind, subject=subject, key=key, scope=scope,
                              team=team, owner=owner, source=source, ttl=ttl, valid_from=valid_from,
                              new_key=new_key, expect_version=expect_version, derived_from=derived_from,
                              context=context, now=now, channel=channel, claimed_source=claimed_source,
                              extra=extra)

    def remember_many(self, items: Iterable[Mapping[str, Any]], *, as_user: str, now: TimeLike = None,
                      new_key: bool = False, batch_size: int = 1000,
                      progress: ProgressCallback | None = None) -> BatchResult:
        """Write many notes through the gate and make them searchable: each item is a dict of
        :meth:`remember`'s arguments (``text``, ``kind``, ``subject``, ...; ``line`` names it in
        reports). One commit per batch with the views rendered once; held items go to review
        one by one, refused ones are reported with their line and reason, nothing else stops.
        A path written twice starts a new batch, so every version stays in history.
        ``progress(done, total, what)`` is called as batches commit and vectors are made."""
        return write.remember_many(self, items, as_user=as_user, now=now, new_key=new_key, batch_size=batch_size,
                                   progress=progress)

    def commit_changes(self, changes: dict[str, bytes | None], message: str, *, actor: str,
                       when: _dt.datetime, author: tuple[str, str] | None = None) -> str:
        """Commit note changes with the views they alter (call under the lock)."""
        return write.commit_changes(self, changes, message, actor=actor, when=when, author=author)

    # --- a note's end (ops/lifecycle.py) --------------------------------------------------
    def retire(self, *, as_user: str, path: str, valid_until: TimeLike = None, expect_version: str | None = None,
               now: TimeLike = None, channel: str = HUMAN, source: str | None = None) -> WriteResult:
        """Mark a note as no longer true from ``valid_until`` (default now). Over the agent
        ``channel`` (``source="agent:<name>"``) the gate judges it like the agent's write of
        that note: committed, or held for a person's review."""
        return lifecycle.retire(self, as_user=as_user, path=path, valid_until=valid_until,
                                expect_version=expect_version, now=now, channel=channel, source=source)

    def move(self, *, as_user: str, path: str, key: str, expect_version: str | None = None,
             extra: Mapping[str, Any] | None = None, now: TimeLike = None, channel: str = HUMAN,
             source: str | None = None) -> WriteResult:
        """Move the keyed note at ``path`` to ``key`` in one commit (history follows it); over
        the agent ``channel`` the gate judges it like the agent's write of that note."""
        return lifecycle.move(self, as_user=as_user, path=path, key=key, expect_version=expect_version, extra=extra,
                              now=now, channel=channel, source=source)

    def sweep(self, *, as_user: str, now: TimeLike = None) -> SweepResult:
        """Remove expired notes the user may write, in one commit."""
        return lifecycle.sweep(self, as_user=as_user, now=now)

    def consolidate(self, *, as_user: str, subject: str, scope: str | None = None, team: str | None = None,
                    now: TimeLike = None) -> WriteResult:
        """A deterministic digest of one scope's live notes about one subject."""
        return consolidating.consolidate(self, as_user=as_user, subject=subject, scope=scope, team=team, now=now)

    # --- review (ops/holds.py, ops/review.py) ---------------------------------------------
    def review_list(self, *, as_user: str) -> list[ReviewItem]:
        """The held writes the user may see."""
        return review.review_list(self, as_user=as_user)

    def sync_conflicts(self, *, as_user: str) -> list[dict[str, str]]:
        """Pairs sync resolved by validity that nobody has looked at since (roots the user reads)."""
        from .remote import open_conflicts

        return open_conflicts(self, as_user=as_user)

    def approvers(self, review_id: str, *, as_user: str) -> list[str]:
        """Who may approve the held write ``review_id``: a second person (``[review] self_approve`` aside)."""
        return review.approvers(self, review_id, as_user=as_user)

    def approve(self, review_id: str, *, as_user: str, new_key: bool = False, override: bool = False,
                now: TimeLike = None) -> WriteResult:
        """A person approves a held write: it is committed to main through the gate's other checks,
        with the arguments it was held with (new_key, expect_version). Not the writer's own
        (unless ``[review] self_approve``); the MCP server offers no way to approve. If the note
        changed after the write was held, Conflict unless ``override``."""
        return review.approve(self, review_id, as_user=as_user, new_key=new_key, override=override, now=now)

    def reject(self, review_id: str, *, as_user: str, now: TimeLike = None) -> ReviewItem:
        """Drop a held write. The audit log records who rejected which review and when (never
        the content), in the same kind of commit as every other change."""
        return review.reject(self, review_id, as_user=as_user, now=now)

    # --- reading (ops/read.py) ------------------------------------------------------------
    def get(self, *, as_user: str, path: str | None = None, subject: str | None = None,
            kind: str | None = None, key: str | None = None, scope: str | None = None,
            team: str | None = None, now: TimeLike = None) -> StoredNote:
        """The live version of one note: by path, or by subject + kind + key (an exact lookup).

        Without a scope the user's private note wins over team notes of the same key.
        """
        return read.get(self, as_user=as_user, path=path, subject=subject, kind=kind, key=key, scope=scope,
                        team=team, now=now)

    def keys(self, *, as_user: str, subject: str, kind: str, scope: str | None = None,
             team: str | None = None, now: TimeLike = None) -> list[KeyInfo]:
        """Live keys for a subject and kind in every root the user may read."""
        return read.keys(self, as_user=as_user, subject=subject, kind=kind, scope=scope, team=team, now=now)

    def notes(self, *, as_user: str, now: TimeLike = None, include_ended: bool = False) -> list[StoredNote]:
        """Every note the user may see (live ones unless ``include_ended``)."""
        return read.notes(self, as_user=as_user, now=now, include_ended=include_ended)

    def show(self, *, as_user: str, path: str) -> StoredNote:
        """One note by path whatever its validity (ended and expired notes too), if the user may
        see it; every frontmatter field, editors' ones included."""
        return read.show(self, as_user=as_user, path=path)

    def listing(self, *, as_user: str, subject: str | None = None, kind: str | None = None,
                root: str | None = None, include_ended: bool = False, now: TimeLike = None) -> list[StoredNote]:
        """The notes the user may see, by subject, kind and scope root (``mdmem ls``)."""
        return read.listing(self, as_user=as_user, subject=subject, kind=kind, root=root,
                            include_ended=include_ended, now=now)

    def check(self) -> tuple[list[StoredNote], list[NoteInvalid]]:
        """Every note in the work tree, and the ones that are not valid notes."""
        return read.check(self)

    def history(self, *, as_user: str, path: str | None = None, subject: str | None = None,
                kind: str | None = None, key: str | None = None, scope: str | None = None,
                team: str | None = None, at: TimeLike = None) -> list[Version]:
        """Every version of one note from git, newest first; with ``at``, the one current then."""
        return read.history(self, as_user=as_user, path=path, subject=subject, kind=kind, key=key, scope=scope,
                            team=team, at=at)

    # --- MEMORY views (ops/render.py) -----------------------------------------------------
    def scope_view(self, root: str, now: TimeLike = None, *, overlay: dict[str, bytes | None] | None = None,
                   max_lines: int | None = None, max_bytes: int | None = None) -> str:
        """One scope root's MEMORY view at HEAD with ``overlay`` (path -> bytes, None deleted)
        applied as if committed: the committed view (a function of the notes) without ``now``,
        the entries live at ``now`` with it (startup)."""
        return render.scope_view(self, root, now, overlay=overlay, max_lines=max_lines, max_bytes=max_bytes)

    def fresh_view_changes(self) -> dict[str, bytes | None]:
        """Every view (and the root guide) as a fresh render of HEAD would have it, where it differs."""
        return render.fresh_view_changes(self)

    def forged_views(self) -> list[dict[str, str]]:
        """Views at HEAD that differ from a fresh render, with who last changed each (verify)."""
        return render.forged_views(self)

    def replace_forged_views(self, *, as_user: str | None, now: TimeLike = None) -> list[dict[str, str]]:
        """A fresh render in place of each forged view (committed when ``as_user`` is given)."""
        return render.replace_forged_views(self, as_user=as_user, now=now)

    def stale_views(self) -> list[str]:
        """Views committed at HEAD that differ from a fresh render of HEAD (`mdmem check`)."""
        return render.stale_views(self)

    def render(self, *, as_user: str, now: TimeLike = None) -> RenderResult:
        """Regenerate the root MEMORY.md and every scope view in one commit."""
        return render.render(self, as_user=as_user, now=now)

    def startup(self, *, as_user: str, now: TimeLike = None) -> str:
        """The view one user starts from: the root guide, their teams and their private scope,
        composed within the budget. Carries only what this user may see."""
        return render.startup(self, as_user=as_user, now=now)

    # --- the index and recall (ops/searching.py) ------------------------------------------
    def reindex(self, *, rebuild: bool = False, progress: ProgressCallback | None = None) -> IndexReport:
        """Catch the index up with the notes (or rebuild it from them)."""
        return searching.reindex(self, rebuild=rebuild, progress=progress)

    def recall(self, query: str, *, as_user: str, k: int = 5, kinds: list[str] | None = None,
               subject: str | None = None, key: str | None = None, at: TimeLike = None,
               include_history: bool = False, now: TimeLike = None, tags: list[str] | None = None) -> list[Hit]:
        """Live notes the user may see that answer ``query``, best first (see :mod:`mdmem.search.recall`).
        ``tags``: only notes whose frontmatter ``tags`` include every one of them."""
        return searching.recall(self, query, as_user=as_user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                                include_history=include_history, now=now, tags=tags)

    def broken(self, *, as_user: str) -> dict[str, str]:
        """Notes the index keeps out because they are broken (path -> reason), in the roots the
        user may read."""
        return searching.broken(self, as_user=as_user)

    # --- other clones (remote/) --------------------------------------------------------
    def sync(self, *, as_user: str, remote: str = "origin", push: bool = False, replay: bool = False,
             now: TimeLike = None) -> dict[str, Any]:
        """Integrate ``remote``'s history (fetch, then fast-forward or merge in memory), verify what
        came in, and with ``push`` publish; or change nothing (see :func:`mdmem.remote.sync`).
        ``replay``: after an erasure elsewhere, re-apply this clone's own commits onto it."""
        from .remote import sync

        return sync(self, as_user=as_user, remote=remote, push=push, replay=replay, now=now)

    # --- erasure (erasure/) ---------------------------------------------------------------
    def forget(self, *, as_user: str, subject: str | None = None, owner: str | None = None,
               paths: list[str] | None = None, texts: list[str] | None = None, dry_run: bool = False,
               push: bool = False, scrub: bool = True, force: bool = False,
               now: TimeLike = None) -> ErasurePlan | ErasureReceipt:
        """Erase notes from every version of history and every copy (see :mod:`mdmem.erasure.forget`).
        Returns the plan (``dry_run``) or the receipt; never the erased text."""
        from .erasure.forget import forget, require_main_worktree

        user = require_user(as_user)
        when = resolve_now(now)
        require_main_worktree(self.root)
        with self.store.locked(erasure=True):  # alone: every worktree's writers wait
            return forget(self, as_user=user, when=when, subject=subject, owner=owner, paths=paths, texts=texts,
                          dry_run=dry_run, push=push, scrub=scrub, force=force)

    def finish_erasure(self) -> ErasureReceipt | None:
        """Finish an erasure a crash interrupted (its journal is in .git); None if there is none."""
        from .erasure.forget import finish_interrupted

        return finish_interrupted(self)

    def prove_gone(self, needles: list[str], *, as_user: str, subject: str | None = None,
                   owner: str | None = None, allow_paths: list[str] | None = None) -> ProofReport:
        """Check every place mdmem controls for the needles; name what it cannot reach."""
        from .erasure.proof import prove_gone

        return prove_gone(self, needles, as_user=require_user(as_user), subject=subject, owner=owner,
                          allow_paths=allow_paths)
