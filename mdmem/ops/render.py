"""The MEMORY views as operations: the views a change alters (committed with it), a full
re-render, the stale ones, and the startup view one user starts from."""
from __future__ import annotations

import datetime as _dt

from ..model.clock import TimeLike, resolve_now
from ..policy.access import require_user
from ..results import RenderResult
from ..storage.trailers import Trailers
from .state import RepoState


def scope_view(repo: RepoState, root: str, now: TimeLike = None, *, overlay: dict[str, bytes | None] | None = None,
               max_lines: int | None = None, max_bytes: int | None = None) -> str:
    """One scope root's MEMORY view at HEAD with ``overlay`` (path -> bytes, None deleted)
    applied as if committed: the committed view (a function of the notes) without ``now``,
    the entries live at ``now`` with it (startup)."""
    return repo.views.scope_view(root, repo.store.head(), overlay or {},
                                 now=resolve_now(now) if now is not None else None,
                                 max_lines=max_lines, max_bytes=max_bytes)


def views_for(repo: RepoState, changes: dict[str, bytes | None], when: _dt.datetime | None = None, *,
              head: str | None = None) -> dict[str, bytes | None]:
    """The scope views a change alters on ``head`` (default HEAD), regenerated to go into the
    same commit."""
    from ..views.fresh import changed, touched_roots

    head = head or repo.store.head()
    return changed(repo.store, head, repo.views.for_roots(touched_roots(changes), head, changes))


def fresh_view_changes(repo: RepoState) -> dict[str, bytes | None]:
    """Every view (and the root guide) as a fresh render of HEAD would have it, where it differs."""
    from ..views.fresh import changed

    head = repo.store.head()
    return changed(repo.store, head, repo.views.expected(head))


def stale_views(repo: RepoState) -> list[str]:
    """Views committed at HEAD that differ from a fresh render of HEAD (`mdmem check`)."""
    head = repo.store.head()
    return repo.views.stale(head) if head else []


def forged_views(repo: RepoState) -> list[dict[str, str]]:
    """Committed views at HEAD that differ from a fresh render of HEAD, each with the commit
    that last changed it and who made it (mapped through [people], else the raw e-mail): a
    view agents read first and nobody's note says, judged like a planted note."""
    head = repo.store.head()
    out: list[dict[str, str]] = []
    if not head:
        return out
    for path in repo.views.stale(head):
        last = repo.store.last_change(head, path)
        commit, email = last if last else ("", "")
        author = repo.config.committer(email) or email or "unknown"
        out.append({"path": path, "commit": commit, "author": author,
                    "detail": f"a MEMORY view that differs from a fresh render of its notes, last changed by {author}"})
    return out


def replace_forged_views(repo: RepoState, *, as_user: str | None, now: TimeLike = None) -> list[dict[str, str]]:
    """Put a fresh render in place of every forged view: committed (as a render by ``as_user``)
    when the caller is known, else written into the work tree only (agents reading the file
    read the fresh render; the next commit's hook commits it). Returns the forged views."""
    forged = forged_views(repo)
    if not forged:
        return []
    if as_user is not None:
        render(repo, as_user=as_user, now=now)
        return forged
    fresh = fresh_view_changes(repo)
    for path, data in fresh.items():
        target = repo.root / path
        if data is not None and path in {f["path"] for f in forged}:
            target.write_bytes(data)
    return forged


def render(repo: RepoState, *, as_user: str, now: TimeLike = None) -> RenderResult:
    """Regenerate the root MEMORY.md and every scope view in one commit."""
    user = require_user(as_user)
    when = resolve_now(now)
    with repo.store.locked():
        changes = fresh_view_changes(repo)
        if not changes:
            return RenderResult(commit=None, views=[])
        message = "render MEMORY views\n\n" + Trailers("render", user, "system:render").render()
        commit = repo.store.commit(changes, message, actor=user, when=when)
    return RenderResult(commit=commit, views=sorted(changes))


def startup(repo: RepoState, *, as_user: str, now: TimeLike = None) -> str:
    """The view one user starts from: the root guide, their teams and their private scope,
    composed within the budget. Carries only what this user may see."""
    from ..views.render import render_root

    user = require_user(as_user)
    when = resolve_now(now)
    guide = render_root(repo.config)
    roots = repo.access.readable_roots(user)
    lines_left = max(40, repo.config.view_max_lines - guide.count("\n"))
    bytes_left = max(4000, repo.config.view_max_bytes - len(guide.encode()))
    parts = [guide]
    for root in roots:
        parts.append(scope_view(repo, root, when, max_lines=max(20, lines_left // len(roots)),
                                max_bytes=max(2000, bytes_left // len(roots))))
    return f"# Startup view for {user}\n\n" + "\n".join(parts)
