"""Which MEMORY views a tree holds and what each must say: the one definition behind every
place a view is written (mdmem's own commits, `render`, erasure, the pre-commit hook,
merges made by `sync`) and behind `mdmem check`, which fails on a stale one.

A committed view is a function of its tree and the configuration alone (render_scope with
no clock), so "a committed view always equals a fresh render of its commit" can be checked
at any time: views hold every note of their root, and an entry that ends says until when.

- the root ``MEMORY.md``: the guide (render_root of the configuration);
- ``<root>/MEMORY.md`` for every scope root holding a note file, and for every team in the
  configuration (even empty); a private root with no notes left keeps no view.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..model.layout import is_note_path
from ..storage.queries import blob_hash
from .render import VIEW_NAME, RootEntries, render_root, render_scope, view_path

SCOPES = ("team", "private")


def root_of(path: str) -> str | None:
    """The scope root (``team/<t>`` or ``private/<o>``) a path lies in, if any."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] in SCOPES and parts[1]:
        return f"{parts[0]}/{parts[1]}"
    return None


def is_view_path(path: str) -> bool:
    return path == VIEW_NAME or (path.endswith("/" + VIEW_NAME) and root_of(path) is not None
                                 and path.count("/") == 2)


def touched_roots(paths: Iterable[str]) -> set[str]:
    """Scope roots whose view a change of ``paths`` may alter (notes, or the view itself)."""
    out = set()
    for p in paths:
        root = root_of(p)
        if root is not None and (is_note_path(p) or is_view_path(p)):
            out.add(root)
    return out


def keeps_view(root: str, teams, has_notes: Callable[[], bool]) -> bool:
    """Whether ``root`` holds a view: every configured team does, any root holding a note file does."""
    return (root.startswith("team/") and root.split("/", 1)[1] in teams) or has_notes()


@dataclass
class Views:
    """Renders views from git trees for one configuration. ``entries`` is the RootEntries a
    MemoryRepo keeps (so a write's pending state is reused), or a fresh one."""

    store: object
    entries: RootEntries
    config: object
    # rev -> note paths whose latest commit no permitted writer made (policy/verify.py); a
    # view leaves them out. A path the overlay writes is being written by a permitted writer.
    flags: Callable[[str], set[str]] | None = None

    def scope_view(self, root: str, rev: str | None, overlay: dict[str, bytes | None] | None = None, *,
                   now=None, max_lines: int | None = None, max_bytes: int | None = None) -> str:
        from ..policy.access import Access
        from .render import without

        entries, totals = self.entries.get(root, rev, overlay or {})
        flagged = {p for p in (self.flags(rev) if self.flags and rev else ())
                   if p.startswith(root + "/") and p not in (overlay or {})}
        if flagged:
            entries, totals = without(entries, flagged)
        readers = sorted(Access(self.config.teams, self.config.erasers).readers_of_root(root))
        return render_scope(root, entries, now, readers=readers, totals=totals,
                            max_lines=max_lines or self.config.view_max_lines,
                            max_bytes=max_bytes or self.config.view_max_bytes)

    def keeps_view(self, root: str, rev: str | None, overlay: dict[str, bytes | None] | None = None) -> bool:
        from ..policy.access import Access

        # A scope repository renders its one root: another root's note that got in (from an
        # unguarded remote) got a view, committed by sync under the person's name.
        if not Access.of(self.config).holds(root):
            return False
        return keeps_view(root, self.config.teams, lambda: self.entries.has_notes(root, rev, overlay or {}))

    def for_roots(self, roots: Iterable[str], rev: str | None,
                  overlay: dict[str, bytes | None] | None = None, *, guide: bool = False) -> dict[str, bytes | None]:
        """The views of ``roots`` at ``rev`` (a commit or tree id) with ``overlay`` applied:
        path -> bytes, or None where the root keeps no view. ``guide`` adds the root MEMORY.md."""
        out: dict[str, bytes | None] = {}
        if guide:
            out[VIEW_NAME] = render_root(self.config).encode()
        for root in sorted(set(roots)):
            if self.keeps_view(root, rev, overlay):
                out[view_path(root)] = self.scope_view(root, rev, overlay).encode()
            else:
                out[view_path(root)] = None
        return out

    def all_roots(self, rev: str | None) -> set[str]:
        """Every scope root with a folder in the tree at ``rev``, and every configured team."""
        roots = {f"team/{t}" for t in self.config.teams}
        if rev is None:
            return roots
        for scope in SCOPES:
            roots |= {f"{scope}/{name}" for name in self.store.folders_in(rev, scope)}
        return roots

    def expected(self, rev: str | None) -> dict[str, bytes | None]:
        """Every view the tree at ``rev`` must hold (None: must not hold)."""
        return self.for_roots(self.all_roots(rev), rev, guide=True)

    def stale(self, rev: str) -> list[str]:
        """View paths whose content at ``rev`` differs from a fresh render of ``rev``."""
        return sorted(changed(self.store, rev, self.expected(rev)))


def read_in(store, rev: str | None, path: str) -> bytes | None:
    """A file's bytes in the tree at ``rev`` (a commit or tree id), None if absent."""
    return None if rev is None else store.file_in(rev, path)


def changed(store, rev: str | None, views: dict[str, bytes | None]) -> dict[str, bytes | None]:
    """Only the views whose content at ``rev`` differs (nothing to commit for the rest)."""
    # Compared by blob id: the view committed at ``rev`` is not read and inflated for it (25 KB
    # at 100k notes, ~0.4 ms a write).
    held = store.blob_ids(list(views), rev) if rev is not None else dict.fromkeys(views)
    return {p: d for p, d in views.items() if held[p] != (None if d is None else blob_hash(d))}
