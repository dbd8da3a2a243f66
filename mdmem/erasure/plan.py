"""What an erasure will change, computed before anything changes (the dry-run shows it).

Targets (notes erased whole, every version):
- ``--path``: those notes; ``--subject``: every note of that subject;
- ``--owner P`` (erasing a person): P's private root, and notes whose subject is ``user:P``
  in roots the asker may erase. Team notes P wrote are NOT erased — ownership is not
  authorship — they stay, with P's identity fields pseudonymised, and show up in the
  mention scan when their text names P;
- ``--text T``: T is scrubbed; a note whose path, key or frontmatter holds T is erased whole
  (scrubbing there would leave a broken note).

Copies are scrubbed only for distinctive needles (:mod:`.needles`), only in note files and
MEMORY views, only in roots the asker may erase. Permission is computed on what would
change. A non-eraser's plan is computed over the roots they may read only, so what lives in
roots they cannot read changes neither the plan nor the refusal (no oracle).
"""
from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput, NotFound, Refused
from ..model import layout
from ..model.note import parse_note
from ..storage import history_ops as ops
from . import needles as nd
from .scan import REPO_FILES, HistoryScan, is_git_note, is_view, root_of, split_note

FORCE_THRESHOLD = 25  # more copies or local files than this to change needs --force
MAX_LOCAL_FILE = 64 * 1024 * 1024  # untracked files larger than this are listed, not read
HOLD_PREFIX = "refs/mdmem-erasure/"
LEFTOVERS = ("COMMIT_EDITMSG", "ORIG_HEAD", "FETCH_HEAD", "MERGE_MSG", "SQUASH_MSG", "MERGE_HEAD")


@dataclass
class Plan:
    as_user: str
    eraser: bool
    subject: str | None
    owner: str | None
    paths_given: int
    texts_given: int
    scrub: bool = True
    targets: list[str] = field(default_factory=list)            # note paths erased whole
    versions: int = 0
    target_keys: list[str] = field(default_factory=list)        # keys / subject-keys naming erased notes
    target_ids: list[str] = field(default_factory=list)         # ids of erased notes (digests' derived_from)
    digest_lines: list[list[str]] = field(default_factory=list)  # [summary folder, "- kind key:"] naming one
    needles: list[str] = field(default_factory=list)
    copies: dict[str, dict] = field(default_factory=dict)       # path -> {versions, replacements}
    not_scrubbed: dict[str, str] = field(default_factory=dict)  # path -> why it keeps a needle
    messages: int = 0                                           # commit messages to rewrite
    people: dict[str, str] = field(default_factory=dict)        # handle -> pseudonym
    aliases: dict[str, list[str]] = field(default_factory=dict)  # handle -> other names of them
    stashes: list[dict] = field(default_factory=list)
    worktrees: list[dict] = field(default_factory=list)
    local_files: list[dict] = field(default_factory=list)       # untracked/ignored/edited files
    refs_renamed: dict[str, str] = field(default_factory=dict)
    refs_deleted: list[dict] = field(default_factory=list)
    rewrite_refs: list[str] = field(default_factory=list)
    message_commits: list[str] = field(default_factory=list)    # commits whose messages may be scrubbed
    local_blobs: list[str] = field(default_factory=list)        # stashed blobs to scrub (any path: local work)
    local_commits: list[str] = field(default_factory=list)      # stash commits (messages scrubbed too)
    mentions_outside: list[str] = field(default_factory=list)   # user:P notes the asker may not erase
    review: list[dict] = field(default_factory=list)            # held writes erased or scrubbed
    commits_touched: int = 0
    commits_moved: int = 0  # commits_touched and every commit after one: all get new ids

    # --- what a person sees ---------------------------------------------------------------
    def targets_record(self) -> dict:
        """The targets as given, for the receipt: never an erased path, key or text."""
        out = {}
        if self.subject:
            out["subject"] = self.pseudonymise_subject(self.subject)
        if self.owner:
            out["owner"] = self.people.get(self.owner, self.owner)
        if self.paths_given:
            out["paths"] = f"{self.paths_given} path(s), not recorded"
        if self.texts_given:
            out["texts"] = f"{self.texts_given} string(s), not recorded"
        return out

    def pseudonymise_subject(self, subject: str) -> str:
        kind, _, name = subject.partition(":")
        return f"{kind}:{self.people[name]}" if kind == "user" and name in self.people else subject

    def to_dict(self) -> dict:
        """The plan for a person: every file and count, never the erased text."""
        return {"targets": self.targets_record(), "notes": self.target_notes(),
                "other_files_erased": [p for p in self.targets if not layout.is_note_path(p)],
                "versions": self.versions,
                "commits_to_rewrite": self.commits_touched,
                "commits_with_new_ids": self.commits_moved,
                "copies_to_scrub": [{"path": p, **c} for p, c in sorted(self.copies.items())],
                "not_scrubbed": [{"path": p, "why": w} for p, w in sorted(self.not_scrubbed.items())],
                "commit_messages_to_rewrite": self.messages,
                "identities_pseudonymised": len(self.people),
                "stashes": self.stashes, "worktrees": self.worktrees, "local_files": self.local_files,
                "refs_renamed": sorted(self.refs_renamed), "refs_deleted": self.refs_deleted,
                "review_branches": [r["branch"] for r in self.review],
                "roots": self.roots(), "needs_force": self.needs_force(),
                "mentions_outside_your_roots": self.mentions_outside}

    def target_notes(self) -> list[str]:
        return [p for p in self.targets if layout.is_note_path(p)]

    def roots(self) -> list[str]:
        return sorted({root_of(p) for p in [*self.targets, *self.copies]} - {REPO_FILES})

    def needs_force(self) -> bool:
        return len(self.copies) + len(self.local_files) > FORCE_THRESHOLD

    def changes_anything(self) -> bool:
        # A person with no commit of theirs left (already erased) is nothing to do: a second
        # forget must not rewrite the commits made since.
        return bool(self.targets or self.copies or self.messages or (self.people and self.commits_touched)
                    or self.local_files
                    or self.refs_renamed or any(s["action"] == "scrubbed" for s in self.stashes)
                    or any(w.get("scrub") for w in self.worktrees))

    # --- for the journal --------------------------------------------------------------------
    def to_state(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, data: dict) -> "Plan":
        return cls(**data)


def _under(subject: str, wanted: str) -> bool:
    """``user:alice`` covers ``user:alice:oncall`` too: a sub-subject is the same folder subtree."""
    return subject == wanted or subject.startswith(wanted + ":")


def identity_names(person: str, aliases: list[str]) -> set[str]:
    """The person's handle and aliases as access control compares them: exactly (``Alice`` is
    another user than ``alice``); e-mail addresses without regard to case, as mail does."""
    return {same_identity_key(n) for n in (person, *aliases)}


def same_identity_key(name: str) -> str:
    return name.lower() if "@" in name else name


MAX_TEXTS = 100


def check_targets(*, subject=None, owner=None, paths=None, texts=None) -> list[str]:
    """What to erase, checked before anything is read or journaled (a refused needle must leave
    nothing behind); the texts to scrub, blank ones left out."""
    if not (subject or owner or paths or texts):
        raise BadInput("forget: name what to erase: --subject, --owner, --path or --text")
    if subject:
        layout.check_subject(subject)
    if owner:
        layout.check_name(owner, "owner")
    for p in paths or []:
        if not layout.is_note_path(p):
            raise BadInput(f"--path: {p!r} is not a note path (team/<team>/... or private/<owner>/...)")
    texts = [t for t in (texts or []) if t and t.strip()]
    if len(texts) > MAX_TEXTS:
        # Each is searched for in every version of every file, under the write lock: 2,500 in
        # one call (a dry run too) held every writer of the repository for 30 s.
        raise BadInput(f"--text: {len(texts):,} given; one erasure scrubs at most {MAX_TEXTS} texts (split the "
                       "list into several erasures)")
    for t in texts:
        if not nd.is_distinctive(t):
            raise BadInput(f"--text: {len(t)} character(s) given; {nd.why_not(t)}")
    return texts


def build_plan(repo, *, as_user: str, subject=None, owner=None, paths=None, texts=None, scrub: bool = True) -> Plan:
    texts = check_targets(subject=subject, owner=owner, paths=paths, texts=texts)
    access = repo.access
    eraser = as_user in access.erasers
    if owner and owner != as_user and not eraser:
        # Decided before looking at any data: the answer cannot depend on what exists.
        raise Refused(f"forget --owner {owner}: only {owner} themself or an eraser may erase a person "
                      "(the eraser role is [roles] erasers in mdmem.toml)")
    about = subject.split(":", 1)[1] if subject and subject.startswith("user:") else None
    if about and about != as_user and not eraser:
        # Also decided before looking: notes about another person live mostly where the asker
        # cannot look, and a data-dependent answer would tell them whether such notes exist.
        raise Refused(f"forget --subject {subject}: erasing what is known about another person needs the eraser "
                      "role ([roles] erasers in mdmem.toml); to erase your own notes about them, name them "
                      "with --path")
    plan = Plan(as_user, eraser, subject, owner, len(paths or []), len(texts), scrub)

    def readable(root: str) -> bool:
        return eraser or root == REPO_FILES or access.may_read_root(as_user, root)

    def erasable(root: str) -> bool:
        return root != REPO_FILES and access.may_erase_root(as_user, root)

    scan = HistoryScan.read(repo.root)
    ever = [p for p in scan.note_paths() if readable(root_of(p))]
    targets = set()
    for p in paths or []:
        if p not in ever:
            raise NotFound(f"--path: no note ever at {p} visible to {as_user}")
        targets.add(p)
    if subject:
        targets |= {p for p in ever if _under(layout.parse_path(p).subject, subject)}
    if owner:
        admins = repo.trust.config_admins()
        if owner in admins and not admins - {owner}:
            # Their commits become a pseudonym's, which no config names: nobody could change
            # mdmem.toml afterwards.
            raise Refused(f"forget: {owner} is this repo's only config admin ("
                          + ("its only eraser" if repo.access.erasers else "its founder; it names no erasers")
                          + "): name another eraser in mdmem.toml ([roles] erasers) and commit it first, else "
                          "nobody could change the config after the erasure")
        plan.people[owner] = f"erased-{secrets.token_hex(4)}"
        # Other names and addresses of theirs from [people.<owner>]: identity fields in git.
        person = repo.config.people.get(owner)
        others = list(repo.config.aliases.get(owner, ()))
        if person is not None:
            others += [x for x in (person.name, person.email, *person.emails) if x]
        plan.aliases[owner] = sorted(set(others))
        targets |= {p for p in ever if p.startswith(f"private/{owner}/")}
        about = [p for p in ever if _under(layout.parse_path(p).subject, f"user:{owner}")]
        targets |= {p for p in about if erasable(root_of(p))}
        plan.mentions_outside = sorted(p for p in about if not erasable(root_of(p)))
        # Their whole root goes, its MEMORY view (every version) included.
        targets |= {p for p in scan.path_blobs if p.startswith(f"private/{owner}/")}
    text_bytes = [t.encode() for t in texts]
    # A text naming a note (its path or key) or sitting in its frontmatter (but for the context,
    # scrubbed like a body): the note goes whole.
    for p in ever:
        if any(t in p for t in texts):
            targets.add(p)
    readable_blobs = {b for p, bs in scan.path_blobs.items() if readable(root_of(p)) for b in bs}
    data = scan.blobs(readable_blobs)
    if text_bytes:
        for p in ever:
            if p not in targets and any(any(t in nd.outside_context(split_note(data.get(b, b""))[0])
                                                for t in text_bytes)
                                        for b in scan.path_blobs[p]):
                targets.add(p)
    plan.targets = sorted(targets)
    refused = sorted({root_of(p) for p in targets if not erasable(root_of(p))})

    # Needles: the explicit texts, and what every erased version's body yields.
    found: set[str] = set(texts)
    keys: set[str] = set()
    ids: set[str] = set()
    lines: set[tuple[str, str]] = set()
    derived: dict[str, set[str]] = {}  # needle -> the erased versions (blobs) it comes from
    for p in plan.targets:
        if not layout.is_note_path(p):
            continue  # the erased root's view: derived from the notes below
        loc = layout.parse_path(p)
        for b in scan.path_blobs[p]:
            plan.versions += 1
            raw = data.get(b, b"")
            try:
                note = parse_note(p, raw)
                body = note.text
                ids.add(note.id)
            except Exception:
                body = raw.decode("utf-8", "replace")
            for needle in nd.from_note_text(body):  # views quote it even with --no-scrub
                derived.setdefault(needle, set()).add(b)
        if loc.key:
            # A digest of the subject lists the note as "- <kind> <key>: <first line>" (ops.consolidate).
            lines.add((layout.kind_dir(loc.root, loc.subject, "summary") + "/", f"- {loc.kind} {loc.key}:"))
            keys.add(f"{loc.subject}/{loc.key}")
            if nd.is_distinctive(loc.key) or loc.key in texts:
                keys.add(loc.key)
        keys.add(f"{loc.subject} {p.rsplit('/', 1)[-1]}")
    found |= set(derived) - set(_quoted_from_others(scan, data, targets, derived, readable, plan))
    plan.needles = nd.ordered(found)
    plan.target_keys = nd.ordered(keys)
    plan.target_ids = sorted(ids)
    plan.digest_lines = [list(pair) for pair in sorted(lines)]
    needle_bytes = [n.encode() for n in plan.needles]

    # Copies: note bodies and views in readable roots that quote a needle.
    for path, blobs in scan.path_blobs.items():
        if path in targets:
            continue
        root = root_of(path)
        if not readable(root):
            continue
        note_file = layout.is_note_path(path)
        versions = replacements = 0
        for b in blobs:
            raw = data.get(b, b"")
            if note_file:
                front, part = split_note(raw)
                part += b"\n" + nd.context_block(front)  # a context may quote an erased note too
            else:
                part = raw
            n = sum(nd.occurrences(part, x) for x in needle_bytes)
            if n:
                versions += 1
                replacements += n
        if not versions:
            continue
        if note_file or is_view(path):
            if not erasable(root):
                refused.append(root)
            elif scrub or is_view(path):
                plan.copies[path] = {"versions": versions, "replacements": replacements}
            else:
                plan.not_scrubbed[path] = "a quoted copy, kept (--no-scrub)"
        elif is_git_note(path):
            plan.copies[path] = {"versions": versions, "replacements": replacements, "what": "git note"}
        else:
            plan.not_scrubbed[path] = "not a note (configuration, audit log and other files are never scrubbed)"

    # Commit messages: scrubbed where every root the commit touched may be erased.
    key_bytes = [k.encode() for k in plan.target_keys]
    id_bytes = [i.encode() for i in plan.target_ids]  # a digest's commit names its inputs by id
    target_set = set(plan.targets)
    for commit, message in _messages(repo.root).items():
        touches_target = bool(scan.commit_paths.get(commit, set()) & target_set)
        if not (any(nd.may_hold(message, n) for n in needle_bytes) or any(i in message for i in id_bytes)
                or (touches_target and any(k in message for k in key_bytes))):
            continue
        roots = scan.commit_roots.get(commit, set())
        if eraser or (roots and all(erasable(r) for r in roots)):
            plan.message_commits.append(commit)
        else:
            refused += [r for r in roots if readable(r) and not erasable(r)]
    plan.messages = len(plan.message_commits)
    # Local state before the permission answer: an uncommitted copy is a change too. Only
    # roots the asker may read are looked at, so the answer never depends on others' files.
    refused += _local_state(repo, plan, scan, needle_bytes, readable=readable, erasable=erasable)
    if refused:
        raise Refused(f"forget: {as_user} may erase only their own private notes; this would change "
                      f"{', '.join(sorted(set(refused)))}, which needs the eraser role in mdmem.toml "
                      "([roles] erasers = [...])")

    changed_commits = {c for c in scan.commit_paths if scan.commit_paths[c] & (target_set | set(plan.copies))}
    changed_commits |= set(plan.message_commits)
    if plan.people:
        changed_commits |= _authored_by(repo.root, identity_names(owner, plan.aliases[owner]))
    plan.commits_touched = len(changed_commits)
    moved = ops.commits_moved_by(repo.root, changed_commits, plan.rewrite_refs)
    # Counted where the asker may look: which later commits exist in roots they cannot read
    # must not show in the plan (an eraser reads every root, so theirs is the run's count).
    plan.commits_moved = sum(1 for c in moved if all(readable(r) for r in scan.commit_roots.get(c, ())))
    return plan


def _quoted_from_others(scan: HistoryScan, data: dict[str, bytes], targets: set[str], derived: dict[str, set[str]],
                        readable, plan: Plan) -> set[str]:
    """The erased notes' sentences that another note held first: that note's own knowledge,
    which the erased note quoted (else copying a team's note into a private one and asking for
    its erasure would wipe the team's note from history). Kept, and listed in the plan."""
    age = scan.first_seen()
    owned_since = {n: min(age.get(b, 0) for b in blobs) for n, blobs in derived.items()}
    earlier: set[str] = set()
    for path, blobs in scan.path_blobs.items():
        if path in targets or not layout.is_note_path(path) or not readable(root_of(path)):
            continue
        for b in blobs:
            front, body = split_note(data.get(b, b""))
            held = {n for n, since in owned_since.items() if age.get(b, since) < since and n.encode() in body}
            if held:
                earlier |= held
                plan.not_scrubbed[path] = "it held this text before the erased note quoted it: its own, kept"
    return earlier


def _messages(root: Path) -> dict[str, bytes]:
    out = ops.run_git(root, "log", *ops.HISTORY_REFS, "--format=%H%x00%B%x1e", check=False)
    messages = {}
    for rec in out.split("\x1e"):
        rec = rec.strip("\n")
        if rec:
            commit, _, body = rec.partition("\0")
            messages[commit] = body.encode()
    return messages


def _authored_by(root: Path, names: set[str]) -> set[str]:
    out = ops.run_git(root, "log", *ops.HISTORY_REFS, "--format=%H%x00%an%x00%ae%x00%cn%x00%ce%x00%B%x1e",
                      check=False)
    found = set()
    for rec in out.split("\x1e"):
        fields = rec.strip("\n").split("\0")
        if len(fields) < 6:
            continue
        ids = [fields[1], fields[2], fields[2].split("@")[0], fields[3], fields[4], fields[4].split("@")[0]]
        trailer_values = [v.strip().split(":")[-1] for v in re.findall(r"^Memory-[\w-]+: (.*)$", fields[5], re.M)]
        if any(same_identity_key(x) in names for x in ids + trailer_values):
            found.add(fields[0])
    return found


def _local_state(repo, plan: Plan, scan: HistoryScan, needle_bytes: list[bytes], *,
                 readable, erasable) -> list[str]:
    """Stashes, worktrees, local files and refs: each listed with what will happen and why.
    Work-tree files are looked at only in roots the asker may read (and repository files);
    the roots of local files they may not erase are returned, for the refusal."""
    root = repo.root
    refused: list[str] = []
    targets = set(plan.targets)
    erased_names = [k for k in plan.target_keys if "/" not in k and " " not in k] + plan.needles

    def holds(data: bytes) -> bool:
        return any(nd.occurs(data, n) for n in needle_bytes)

    for entry in ops.stash_entries(root):
        changed = ops.stash_changed_paths(root, entry.commit)
        blobs = ops.read_blobs(root, [f"{entry.commit}{part}:{p}" for p in changed for part in ("", "^3")])
        holding = [oid for oid, b in blobs.items() if holds(b)]
        plan.local_blobs += holding
        plan.local_commits += [c for c in (ops.peel_to_commit(root, f"{entry.commit}{part}")
                                           for part in ("", "^2", "^3")) if c]
        why = ("it changes an erased note" if set(changed) & targets else
               "it holds erased text" if holding else None)
        plan.stashes.append({"stash": f"stash@{{{entry.index}}}", "commit": entry.commit, "message": entry.message,
                             "action": "scrubbed" if why else "rebased",
                             "why": why or "its base commit is rewritten; its own changes are kept as they are"})
    for wt in ops.linked_worktrees(root):
        # As in the main work tree: the files holding erased text are scrubbed in place (an
        # uncommitted copy of an erased note is deleted); the worktree and all its other work stay.
        dirty = sorted(ops.dirty_files(wt.path))
        scrub = [rel for rel in dirty if rel in targets or _file_holds(wt.path / rel, needle_bytes)]
        plan.worktrees.append({"path": str(wt.path), "branch": wt.branch, "head": wt.head,
                               "action": ("files scrubbed" if scrub else
                                          "files updated" if wt.branch else "head moved"),
                               "scrub": scrub, "dirty": dirty,
                               "why": (f"uncommitted {', '.join(scrub[:5])} hold(s) erased text: scrubbed in place, "
                                       "its other edits kept") if scrub else
                                      "its commit is rewritten; rewritten files are checked out, its own edits kept"})
    tracked_changed = targets | set(plan.copies)
    untracked = set(ops.untracked_files(root))
    for rel, full in _files_under(root, skip=(".git",)):  # an old .mdmem/ cache holds text too
        file_root = root_of(rel)
        if file_root != REPO_FILES and not readable(file_root):
            continue  # another person's files: never looked at (no oracle), never changed
        if rel in targets and rel not in untracked:
            continue  # a tracked erased note: the rewrite removes it from the work tree
        if rel in tracked_changed and rel not in untracked:
            if _file_holds(full, needle_bytes) and _differs_from_head(repo, rel, full):
                plan.local_files.append({"path": rel, "action": "replaced",
                                         "why": "uncommitted edits hold erased text; the scrubbed version replaces it"})
            continue
        if rel in targets:
            plan.local_files.append({"path": rel, "action": "deleted", "why": "an untracked copy of an erased note"})
            continue
        try:
            size = full.stat().st_size
        except OSError:
            continue
        if size > MAX_LOCAL_FILE:
            plan.local_files.append({"path": rel, "action": "not checked",
                                     "why": f"larger than {MAX_LOCAL_FILE} bytes"})
            continue
        if not _file_holds(full, needle_bytes):
            continue
        if rel not in untracked and file_root == REPO_FILES:
            plan.not_scrubbed.setdefault(rel, "not a note (never scrubbed)")
            continue
        if rel not in untracked and not _differs_from_head(repo, rel, full):
            continue  # a committed copy: the history rewrite decides about it, not the work tree
        if file_root != REPO_FILES and not erasable(file_root):
            refused.append(file_root)
            continue
        what = "untracked or ignored file" if rel in untracked else "uncommitted edit"
        plan.local_files.append({"path": rel, "action": "scrubbed", "why": f"{what} holding erased text"})
    for name, oid, _kind in ops.list_refs(root):
        if name.startswith(HOLD_PREFIX) or name == "refs/stash":
            continue
        if name.startswith("refs/remotes/"):
            plan.refs_deleted.append({"ref": name, "why": "a copy of the remote's old history; fetch again"})
            continue
        if name.startswith("refs/heads/review/"):
            held = _held_path(root, oid)
            if held in targets:
                plan.refs_deleted.append({"ref": name, "why": "a held write of an erased note"})
                plan.review.append({"branch": name[len("refs/heads/"):], "action": "deleted"})
                continue
            if held in plan.copies:
                plan.review.append({"branch": name[len("refs/heads/"):], "action": "scrubbed"})
        plan.rewrite_refs.append(name)
        short = name.split("/", 2)[-1]
        new = short
        for n in erased_names:
            safe = n.replace(" ", "-")
            if n in new or safe in new:
                new = new.replace(n, "removed").replace(safe, "removed")
        if new != short:
            plan.refs_renamed[name] = name[:len(name) - len(short)] + new
    return refused


def _held_path(root: Path, oid: str) -> str | None:
    out = ops.run_git(root, "diff", "--name-only", f"{oid}~1", oid, check=False).split()
    notes = [p for p in out if layout.is_note_path(p)]
    return notes[0] if notes else None


def _files_under(top: Path, skip: tuple[str, ...] = (".git",)):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) == top and d in skip)]
        for name in filenames:
            full = Path(dirpath) / name
            if full.is_symlink():
                continue  # never followed: a link's target is not ours to change
            yield str(full.relative_to(top)).replace(os.sep, "/"), full


def _file_holds(full: Path, needle_bytes: list[bytes]) -> bool:
    try:
        if full.stat().st_size > MAX_LOCAL_FILE:
            return False
        data = full.read_bytes()
    except OSError:
        return False
    return any(nd.occurs(data, n) for n in needle_bytes)


def _differs_from_head(repo, rel: str, full: Path) -> bool:
    head = repo.store.read_at(rel, "HEAD") if repo.store.head() else None
    try:
        return head != full.read_bytes()
    except OSError:
        return False
