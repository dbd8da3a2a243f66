"""Reading notes as a user may see them: one note (get, show), keys, listings, history, and the
helpers every operation shares to find a note's root and path and read it from the work tree."""
from __future__ import annotations

import datetime as _dt
from typing import Any
from dataclasses import replace


from ..config import CONFIG_NAME
from ..errors import BadInput, NoteInvalid, NotFound
from ..model import layout
from ..model.clock import TimeLike, format_time, parse_time, resolve_now
from ..model.kinds import SUMMARY_KEY, Contract
from ..model.note import Note, new_id, parse_note
from ..policy.access import not_visible, require_user
from ..results import KeyInfo, Version
from ..storage.worktree import StoredNote, live_in_dir, read_note, scan_notes
from .state import RepoState


# --- where a note lives, and reading it ----------------------------------------------
def root_for(user: str, scope: str, team: str | None, owner: str | None) -> str:
    # An argument that does not apply is refused, not dropped: `--scope private --team payments`
    # wrote a private note where no teammate saw it.
    if scope == "private":
        if team:
            raise BadInput(f"team: --team {team} names a team note's team, but --scope is private; "
                           "say --scope team for the team's note, or drop --team")
        return layout.scope_root("private", owner=owner or user)
    if owner:
        raise BadInput(f"owner: --owner {owner} names a private note's owner; a {scope} note's owner is "
                       "whoever writes it (drop --owner)")
    return layout.scope_root(scope, team=team)


def path_for(root: str, contract: Contract, subject: str, key: str | None, when: _dt.datetime, text: str) -> str:
    if contract.keyed:
        # draft() has refused a keyed write without a key; "" is refused by check_key all the same.
        return layout.keyed_path(root, subject, contract.name, key or "")
    slug = layout.check_key(key) if key else f"{layout.slugify(text)}-{new_id()[-6:].lower()}"
    return layout.episode_path(root, subject, when, slug)


def read(repo: RepoState, path: str) -> StoredNote | None:
    return read_note(repo.root, path, repo.contracts, max_bytes=repo.config.note_max_bytes)


def visible_stored(repo: RepoState, user: str, path: str) -> StoredNote:
    repo.access.visible_root(user, path)  # the path is checked before any file is touched
    stored = read(repo, path)
    if stored is None:
        raise not_visible(path, user)
    return stored


def all_notes(repo: RepoState) -> list[StoredNote]:
    return scan_notes(repo.root, repo.contracts, max_bytes=repo.config.note_max_bytes)[0]


def untrusted(repo: RepoState, path: str) -> str | None:
    """Why the committed note at ``path`` is not trusted, or None."""
    flag = repo.trust.flags_of([path]).get(path)
    return flag.detail if flag is not None else None


def marked(repo: RepoState, stored: StoredNote) -> StoredNote:
    reason = untrusted(repo, stored.path)
    return replace(stored, untrusted=reason) if reason else stored


def candidate_paths(repo: RepoState, user: str, subject: str, kind: str, key: str | None,
                    scope: str | None, team: str | None) -> list[str]:
    contract = repo.contracts.resolve(kind)
    if scope:
        roots = [root_for(user, scope, team, None)]
    else:
        roots = repo.access.readable_roots(user)
    return [layout.keyed_path(r, subject, contract.name, key or SUMMARY_KEY) for r in roots]


# --- the read operations -------------------------------------------------------------
def get(repo: RepoState, *, as_user: str, path: str | None = None, subject: str | None = None,
        kind: str | None = None, key: str | None = None, scope: str | None = None,
        team: str | None = None, now: TimeLike = None) -> StoredNote:
    """The live version of one note: by path, or by subject + kind + key (an exact lookup).

    Without a scope the user's private note wins over team notes of the same key.
    """
    user = require_user(as_user)
    when = resolve_now(now)
    if path:
        stored = visible_stored(repo, user, path)
        if not stored.note.is_live(when):
            raise NotFound(f"{path}: not live at {format_time(when)} (ended or expired)")
        return marked(repo, stored)
    if not (subject and kind):
        raise BadInput("get: pass a path, or subject and kind (and key for keyed kinds)")
    contract = repo.contracts.resolve(kind)
    if contract.keyed and not key and contract.name != "summary":
        raise BadInput(f"key: kind {contract.name} is keyed; get needs the key")
    for candidate in candidate_paths(repo, user, subject, kind, key, scope, team):
        if not repo.access.may_read_root(user, layout.parse_path(candidate).root):
            continue
        found = read(repo, candidate)
        if found is not None and found.note.is_live(when):
            return marked(repo, found)
    raise not_visible(f"{subject} {contract.name} {key or ''}".strip(), user)


def keys(repo: RepoState, *, as_user: str, subject: str, kind: str, scope: str | None = None,
         team: str | None = None, now: TimeLike = None) -> list[KeyInfo]:
    """Live keys for a subject and kind in every root the user may read."""
    user = require_user(as_user)
    contract = repo.contracts.resolve(kind)
    when = resolve_now(now)
    roots = [root_for(user, scope, team, None)] if scope else repo.access.readable_roots(user)
    out = []
    for root in roots:
        if not repo.access.may_read_root(user, root):
            continue
        for stored in live_in_dir(repo.root, layout.kind_dir(root, subject, contract.name), repo.contracts, when,
                                  max_bytes=repo.config.note_max_bytes):
            out.append(KeyInfo(key=stored.note.key or "", root=root, path=stored.path, version=stored.version,
                               note_id=stored.note.id, first_line=stored.note.first_line()))
    return out


def notes(repo: RepoState, *, as_user: str, now: TimeLike = None, include_ended: bool = False,
          folders: list[str] | None = None) -> list[StoredNote]:
    """Every note the user may see (live ones unless ``include_ended``); ``folders``: only those
    below these folders of roots the user may read (the caller checked them)."""
    user = require_user(as_user)
    when = resolve_now(now)
    out = []
    for folder in repo.access.readable_roots(user) if folders is None else folders:
        for stored in scan_notes(repo.root, repo.contracts, folder, max_bytes=repo.config.note_max_bytes)[0]:
            if include_ended or stored.note.is_live(when):
                out.append(stored)
    return out


def show(repo: RepoState, *, as_user: str, path: str) -> StoredNote:
    """One note by path whatever its validity (ended and expired notes too), if the user may
    see it; every frontmatter field, editors' ones included."""
    return visible_stored(repo, require_user(as_user), path)


def listing(repo: RepoState, *, as_user: str, subject: str | None = None, kind: str | None = None,
            root: str | None = None, include_ended: bool = False, now: TimeLike = None) -> list[StoredNote]:
    """The notes the user may see, by subject, kind and scope root (``mdmem ls``)."""
    user = require_user(as_user)
    if root is not None and not repo.access.may_read_root(user, root.rstrip("/")):
        raise NotFound(f"--root {root}: no scope root visible to {user}; yours: "
                       f"{', '.join(repo.access.readable_roots(user))}")
    kind_name = repo.contracts.resolve(kind).name if kind else None
    if subject:
        layout.check_subject(subject)
    # Only the folders that can hold what was asked for are read: a subject's notes lie in its
    # folder of each root (their paths say so, and reading checks it).
    roots = [root.rstrip("/")] if root is not None else repo.access.readable_roots(user)
    folders = [f"{r}/{layout.subject_dir(subject)}" if subject else r for r in roots]
    rows = [s for s in notes(repo, as_user=user, now=now, include_ended=include_ended, folders=folders)
            if (root is None or s.root == root.rstrip("/")) and (kind_name is None or s.note.kind == kind_name)
            and (subject is None or s.note.subject == subject)]
    # Marked as recall, get and history mark them: a note no permitted writer committed.
    flags = repo.trust.flags_of([s.path for s in rows]) if rows else {}
    return [replace(s, untrusted=flags[s.path].detail) if s.path in flags else s for s in rows]


def verify(repo: RepoState, *, as_user: str | None) -> dict[str, Any]:
    """trust's report; for a user, only the notes in roots they may read (and mdmem.toml)."""
    report = repo.trust.report()
    if as_user is None:
        return report
    user = require_user(as_user)
    readable = set(repo.access.readable_roots(user))
    return {**report, "untrusted": [f for f in report["untrusted"]
                                    if f["path"] == CONFIG_NAME or layout.root_of(f["path"]) in readable]}


def check(repo: RepoState) -> tuple[list[StoredNote], list[NoteInvalid]]:
    good, bad = scan_notes(repo.root, repo.contracts, max_bytes=repo.config.note_max_bytes)
    head = repo.store.head()
    misplaced = repo.store.misplaced(head) if head else []
    bad += [NoteInvalid(path, "path", f"must be {what}, not this (a plain-git commit made it)")
            for path, what in misplaced]
    # A team the config no longer declares (renamed, removed): its notes are read by no one
    # through mdmem, and nothing said so.
    teams = repo.config.teams
    orphaned = [s for s in good if s.note.scope == "team" and s.note.team not in teams]
    bad += [NoteInvalid(s.path, "team", f"team {s.note.team!r} is not declared in {CONFIG_NAME} ([teams]): no one "
                        "reads this note; declare the team again or move the note to a team that is")
            for s in orphaned]
    # A scope repository holds one root: another root's notes here would be read and synced by
    # everyone who may clone this one (the host enforces repositories, not folders).
    strays = [s for s in good if not repo.access.holds(s.root)]
    bad += [NoteInvalid(s.path, "path", f"{repo.access.not_held(s.root)}; move the note there") for s in strays]
    return [s for s in good if s not in orphaned and s not in strays], bad


MAX_MOVES_FOLLOWED = 100


def history(repo: RepoState, *, as_user: str, path: str | None = None, subject: str | None = None,
            kind: str | None = None, key: str | None = None, scope: str | None = None,
            team: str | None = None, at: TimeLike = None) -> list[Version]:
    """Every version of one note from git, newest first; with ``at``, the one current then."""
    user = require_user(as_user)
    if not path:
        if not (subject and kind):
            raise BadInput("history: pass a path, or subject and kind and key")
        # Only roots the user may read are asked: git is not an oracle for the others.
        paths = [p for p in candidate_paths(repo, user, subject, kind, key, scope, team)
                 if repo.access.may_read_root(user, layout.parse_path(p).root)]
        path = next((p for p in paths if repo.store.log(p)), None)
        if path is None:
            raise not_visible(f"{subject} {kind} {key or ''}".strip(), user)
    root = repo.access.visible_root(user, path)
    writers = repo.access.writers_of_root(root)
    versions: list[Version] = []
    walk, rev = path, "HEAD"
    # A move (ops/lifecycle.move) brought the note here from another path of the same root: its
    # versions there come next, read at the commit before the move (a bounded number of moves).
    for _ in range(MAX_MOVES_FOLLOWED):
        came_from: str | None = None
        for entry in repo.store.log(walk, rev):
            note = None
            if entry.blob is not None:
                try:
                    note = parse_note(walk, repo.store.read_blob(entry.blob))
                except NoteInvalid:
                    note = None
                if note is not None and not version_visible(repo, user, note):
                    came_from = None
                    break  # the walk stops at the first version the user may not see
            t = entry.trailers
            committer = repo.config.committer(entry.email)
            why = None if committer in writers else \
                f"committed by {committer or 'an unknown identity'}, who may not write {root}"
            versions.append(Version(entry.commit, entry.time, t.get("op", "edit"), t.get("actor", entry.author),
                                    t.get("source", "human"), entry.blob, note, why, path=walk))
            moved = t.get("moved-from")
            if moved and moved != walk and entry.blob is not None and why is None \
                    and layout.is_note_path(moved) and layout.root_of(moved) == root:
                came_from, rev = moved, f"{entry.commit}^"
                break  # what this path held before the note came is another note's history
        if came_from is None:
            break
        walk = came_from
    if not versions:
        raise not_visible(path, user)
    if at is not None:
        when = parse_time(at, field="at")
        for v in versions:
            if v.time <= when:
                if v.note is None or not v.note.is_live(when):
                    raise NotFound(f"{path}: not live at {format_time(when)}")
                return [v]
        raise NotFound(f"{path}: did not exist at {format_time(when)}")
    return versions


def version_visible(repo: RepoState, user: str, note: Note) -> bool:
    root = f"team/{note.team}" if note.scope == "team" else f"private/{note.owner}"
    return repo.access.may_read_root(user, root)
