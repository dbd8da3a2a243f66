"""Who committed each note (DESIGN 6): ``mdmem verify``.

A note is trusted when the latest commit that changed it (on the branch's first-parent line)
was made by someone allowed to write its scope root, and its frontmatter agrees with its
path. Commit identities map to users through ``[people.<user>] emails``; with
``[trust] require_signed`` the commit must also carry a good SSH signature from a key that
the repo's allowed-signers file gives to such a person. Flagged notes are left out of views
and startup and marked untrusted in recall, get and history until a permitted writer
commits them again.

``mdmem.toml`` decides who reads and writes what, so it is judged too: the latest commit that
changed it must be by a config admin (``[roles] erasers``, or while there are none the person
who made the repo) of the last trusted version, the identity read through that version's
``[people]`` (a change cannot vouch for itself). The commit that created it (``mdmem init``)
founds the repo and is trusted. Until an admin commits it, an untrusted change does not take
effect: :meth:`Verifier.trusted_config` gives every access and gate decision the last
trusted version. The allowed-signers file is judged the same way, and with
``require_signed`` a change to either file must also be signed by an admin's key that the last
trusted allowed-signers file lists; note signatures are checked against that last trusted file.

A merge is not a writer: a version of a path that a merge took unchanged from another parent is
attributed to the commit on that side that wrote it (a sync merge by alice must not make bob's
planted note, or his config change, hers); a version the merge itself made is the merger's.

Results are kept per process and in ``.git/mdmem/verify.json`` (a cache: deleting it loses
nothing) and moved forward commit by commit, so a catch-up costs one ``git log`` of the new
commits; mdmem's own writes update the cache without git.
"""
from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..config import CONFIG_NAME, Config
from ..errors import BadInput, LockTimeout, NoteInvalid
from ..model.layout import ERASURE_LOG, is_note_path, root_of
from ..model.validate import validate_note

# 2: the config entry; 3: the founder; 4: deletions, erasure vouchers; 5: the allowed-signers
# file's entry and base, config entries with why not, merges attributed to their sides' writers;
# 6: erasure receipts' attested commits
# A frontmatter problem that is about who wrote the note, not its path (_claim_problem).
ATTRIBUTION = "attribution: "
CACHE_VERSION = 8  # 8: whether a note's writer was permitted by the rules when they wrote it
# verify.json is rewritten whole (19 MB, ~0.5 s of CPU at 100,000 notes). A catch-up or
# validation of fewer notes than this is left to be redone by the next process (a `git log`
# of a few commits, a few notes read) instead: every CLI write at 100k paid two rewrites.
SAVE_AFTER = 64
# ... or after this many commits, whatever notes they changed: the catch-up's `git log` costs ~2 ms
# a commit (10k notes, AVX2 machine), and writes that supersede the same few notes never moved
# SAVE_AFTER notes (126 commits over 40 notes: 275 ms in every new process, growing).
SAVE_AFTER_COMMITS = 32
GOOD_SIGNATURES = ("G",)  # git's %G?: G good and trusted by the allowed-signers file


@dataclass(frozen=True)
class Flag:
    path: str
    reason: str  # committer | deleted | frontmatter | unsigned | signer | config | signers
    detail: str
    commit: str

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason, "detail": self.detail, "commit": self.commit}


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _one_at_a_time(method: _Method) -> _Method:
    """A server's recalls and its writes ask one Verifier from two threads (the index mutex and
    the write lock are not the same): one thread at a time reads or moves its cache, so a
    recall never walks the state while a write's ``committed`` changes it."""
    @functools.wraps(method)
    def serialised(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return cast(_Method, serialised)


class Verifier:
    def __init__(self, repo):
        self.repo = repo
        self._lock = threading.RLock()
        self.path = repo.store.cache_dir / "verify.json"
        self._state: dict | None = None
        # Paths of self._state whose frontmatter is not yet checked (fm None); None: unknown,
        # found by a scan. Kept so flags() need not scan every note after each new HEAD
        # (~77 ms at 100k notes under load, on every recall after a write).
        self._unchecked: set[str] | None = None
        # (config key, head, flags): the flags of every note at head under that config.
        self._flags: tuple[str, str | None, dict[str, Flag]] | None = None
        # (the head of the last flags, the head the state moved to, the note paths changed
        # between): lets flags() redo only those notes (a whole pass cost ~40 ms at 10k notes
        # on a quiet machine, 450 ms under load, on every write until searchable).
        self._moved: tuple[str | None, str | None, set[str]] | None = None
        # ((config_base, founder), (the config there, its admins)): read and parsed once per base.
        self._rules_memo: tuple[tuple, tuple[Config, frozenset[str]]] | None = None
        # Commits mdmem made in this process that moved self._state on since it was last saved.
        self._unsaved = 0

    def renew_after_fork(self) -> None:
        """In a forked child the thread that held the lock is not there (storage.locks)."""
        self._lock = threading.RLock()

    # --- the cache --------------------------------------------------------------------
    def _load(self) -> dict:
        try:
            state = json.loads(self.path.read_text())
            # A damaged cache of the right JSON but the wrong shape is recomputed, not trusted.
            if (isinstance(state, dict) and state.get("version") == CACHE_VERSION
                    and isinstance(state.get("head") or "", str)
                    and all(isinstance(state.get(k), dict) for k in ("touch", "fm", "sig", "deleted", "attest"))
                    and isinstance(state.get("config"), (list, type(None)))
                    and isinstance(state.get("config_base"), (str, type(None)))
                    and isinstance(state.get("founder"), (str, type(None)))
                    and isinstance(state.get("signers_change"), (list, type(None)))
                    and isinstance(state.get("signers_base"), (str, type(None)))):
                return state
        except (OSError, ValueError):
            pass
        return _empty()

    def _save(self, state: dict) -> None:
        """Keep ``state`` on disk if it is the state of HEAD as it is, checked and written
        under the write lock, tried once: an erasure holds that lock from its rewrite to the
        purge of the caches, and a state computed before it names erased paths (a reader that
        dumped its old state while another process's forget ran wrote it back after the
        purge; ~35 ms of json.dumps at 10,000 notes). A lock held by anyone skips the save:
        this is a cache, and the next catch-up saves instead."""
        self._unsaved = 0
        data = json.dumps(state)  # outside the lock: the slow part
        store = self.repo.store
        try:
            with store.locked(timeout=0):
                if state["head"] != store.head():
                    return  # the branch moved or was rewritten since this state was computed
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(data)
                tmp.replace(self.path)
        except (OSError, LockTimeout):
            pass  # a cache; the next call recomputes

    def _current(self, head: str | None) -> dict:
        if self._state is None:
            self._unchecked = None
        state = self._state if self._state is not None else self._load()
        if state["head"] == head:
            self._state = state
            return state
        store = self.repo.store
        since = state["head"] if state["head"] and head and store.is_ancestor(state["head"], head) else None
        if since is None:
            state = _empty()
            self._unchecked = None
        old_head = state["head"]
        walked = 0  # commits the catch-up's `git log` read
        if head is not None:
            changed: set[str] = set()
            # The allowed-signers file is named by the trusted config (a rename is a config change).
            names = {self._rules(state)[0].trust.allowed_signers, self.repo.config.trust.allowed_signers}
            prefixes = ("team", "private", CONFIG_NAME, ERASURE_LOG, *sorted(names))
            log = store.changes_by_commit(head, since, prefixes)
            walked = len(log)
            if since is not None and any(p == ERASURE_LOG for _, _, files, _ in log for _, p in files):
                # A receipt vouches for commits before it, judged already: judge all again (rare).
                state, since = _empty(), None
                log = store.changes_by_commit(head, None, prefixes)
            # What a merge brought in is attributed to its writers (one git log per merge side).
            merged: dict[str, dict[str, tuple[str, str]]] = {
                commit: self._merge_writers(commit, parents, [p for _, p in files], prefixes)
                for commit, _, files, parents in log if len(parents) > 1}

            def origin(commit: str, email: str, path: str) -> tuple[str, str]:
                return merged[commit].get(path, (commit, email)) if commit in merged else (commit, email)
            # Erasure receipts in this range: the commits before one that carry the pseudonym it
            # made were rewritten by that erasure, which an eraser ran -- it vouches for them. Who
            # added the receipt is who wrote it, not a merge that brought it in.
            vouch: dict[str, tuple[str, str]] = {}
            for commit, who, files, _ in log:
                if any(p == ERASURE_LOG for _, p in files):
                    at, by = origin(commit, who, ERASURE_LOG)
                    pseudonyms, attested = self._receipt_news(commit)
                    vouch.update((pseudonym, (commit, by)) for pseudonym in pseudonyms)
                    # The commits its rewrite made lost their signatures: the receipt's own commit
                    # (the one that wrote it, a merge brings it in), signed by the eraser, stands
                    # in for them (judged with the signatures), for commits before it only.
                    state["attest"].update((c, [at, by]) for c in attested if store.is_ancestor(c, at))
            for commit, email, files, _ in log:
                paths = {path for _, path in files}
                # Both rule files are judged by the rules before this commit (it cannot vouch for itself).
                signers_name = self._rules(state)[0].trust.allowed_signers
                signers = None
                if signers_name in paths:
                    at, by = origin(commit, email, signers_name)
                    signers = self._rule_change(at, vouch[by][1] if by in vouch else by, state)
                if CONFIG_NAME in paths:
                    at, by = origin(commit, email, CONFIG_NAME)
                    change = self._config_change(at, vouch[by][1] if by in vouch else by, state)
                    state["config"] = change
                    if change[4]:
                        state["founder"] = change[2]
                        signers = signers and [*signers[:3], True, ""]  # founded together with the config
                    if change[3] or change[4]:
                        state["config_base"] = commit  # the rules a later change is judged by
                if signers is not None:
                    state["signers_change"] = signers
                    if signers[3]:
                        state["signers_base"] = commit  # the keys later signatures are checked against
                for status, path in files:
                    if not is_note_path(path):
                        continue
                    changed.add(path)
                    at, by = origin(commit, email, path)
                    entry = [at, by] + ([vouch[by][1]] if by in vouch else [])
                    # A version is judged by the rules in force when it was committed (the last
                    # trusted config then): a member moved out of a team later does not make
                    # what they wrote there untrusted.
                    if self._permitted_then(state, path, by):
                        state["then"][path] = at
                    else:
                        state["then"].pop(path, None)
                    if status == "D":
                        state["touch"].pop(path, None)
                        state["deleted"][path] = entry  # a deletion is a change to its root too
                    else:
                        state["touch"][path] = entry
                        state["deleted"].pop(path, None)
                if ERASURE_LOG in paths:
                    vouch = {e: v for e, v in vouch.items() if v[0] != commit}  # later commits: on their own
            for path in changed:
                state["fm"].pop(path, None)
                if self._unchecked is not None:
                    self._unchecked.discard(path)
                if path in state["touch"]:
                    # Validated when flags are asked for: opening a repo (trusted_config) needs only
                    # the config's history, not every note read (2,000 notes: 2.1 s cold).
                    state["fm"][path] = None
                    if self._unchecked is not None:
                        self._unchecked.add(path)
            live = {entry[0] for entry in state["touch"].values()}
            live = _receipt_chain(live, state["attest"])  # the receipts attesting them: their signatures too
            state["sig"] = {c: v for c, v in state["sig"].items() if c in live}
            self._note_moved(old_head, head, changed)
        state["head"] = head
        self._state = state
        # Computed from nothing, or many notes or commits caught up: kept on disk; a few are
        # redone by the next process instead (see SAVE_AFTER, SAVE_AFTER_COMMITS).
        if since is None or head is None or len(changed) >= SAVE_AFTER or walked >= SAVE_AFTER_COMMITS:
            self._save(state)
        return state

    def _merge_writers(self, merge: str, parents: list[str], paths: list[str],
                       prefixes: tuple[str, ...]) -> dict[str, tuple[str, str]]:
        """path -> (commit, author e-mail) of whoever wrote the version of each of ``paths`` (what
        ``merge`` changed against its first parent) that the merge took unchanged from another
        parent: the newest commit on that side, not in the first parent's history, that wrote
        exactly that version -- alice syncing (a merge commit by her) bob's planted note into her
        clone must not make it hers. A path missing from the answer is the merger's: a version the
        merge itself made (a resolution, or one no parent holds), or one the first parent's line
        had already moved past -- a merge whose other parent is an old commit brings back an old
        version (a note alice since changed, the mdmem.toml that still made bob an eraser),
        written by alice once, restored now by the merger. One git call per side."""
        store = self.repo.store
        at_merge = store.blob_ids(paths, merge)
        out: dict[str, tuple[str, str]] = {}
        for side in parents[1:]:
            left = [p for p in paths if p not in out]
            at_side = store.blob_ids(left, side)
            took = [p for p in left if at_side[p] == at_merge[p]]
            if not took:
                continue
            wrote = store.writers(parents[0], side, prefixes)
            for path in took:
                found = next(((c, e) for c, e, blob in wrote.get(path, ()) if blob == at_merge[path]), None)
                if found is not None:
                    out[path] = found
        return out

    @_one_at_a_time
    def trusted_config(self, current: Config, worktree: bytes | None = None) -> Config:
        """The config every access and gate decision reads: the committed mdmem.toml -- HEAD's
        when its latest change is trusted, else the last trusted version, so a self-granted
        membership, role or [trust] widening never takes effect (verify flags it until an
        eraser commits the file). ``current`` (parsed from the work tree's bytes
        ``worktree``) is used only when it is that same version, or when mdmem.toml was never
        committed (a repo being set up by hand). An uncommitted edit takes effect once it is
        committed and judged: a local edit must not make its author an eraser, a team member
        or a self-approver -- such a clone pushed an erasure of another person's notes
        through the guard. No trusted version at all: an empty config (no
        teams, no roles, the default trust), which is closed."""
        head = self.repo.store.head()
        if head is None:
            return current
        state = self._current(head)
        if not state.get("config"):
            return current
        # The last trusted version: HEAD's own when its latest change is trusted (config_base is
        # then the commit that made it).
        base = state.get("config_base")
        data = self.repo.store.read_at(CONFIG_NAME, base) if base else None
        if data is None:
            return Config()
        if data == worktree:
            return current
        return self._rules(state)[0]

    @_one_at_a_time
    def last_trusted_config(self) -> Config:
        """The last trusted committed mdmem.toml at HEAD: what a new change to it, and the notes
        of a commit being made, are judged by (the pre-commit hook). Empty (closed) if none."""
        head = self.repo.store.head()
        return self._rules(self._current(head))[0] if head is not None else Config()

    @_one_at_a_time
    def judge_rule_change(self, email: str) -> tuple[str | None, bool, frozenset[str]]:
        """(who ``email`` is, whether they may change mdmem.toml or the allowed-signers file now,
        who may): a commit being made is judged by the last trusted rules, as verify will judge
        it (its signature, with require_signed, only once it is committed)."""
        head = self.repo.store.head()
        if head is None:
            return Config().committer(email), True, frozenset()  # the founding commit
        rules, admins = self._rules(self._current(head))
        user = rules.committer(email)
        return user, user is not None and user in admins, admins

    @_one_at_a_time
    def config_admins(self) -> frozenset[str]:
        """Who may change mdmem.toml: the trusted config's erasers, or while it names none the
        person who made the repo."""
        erasers = self.repo.access.erasers
        head = self.repo.store.head()
        founder = self._current(head).get("founder") if head and not erasers else None
        return _admins(erasers, founder)

    def _rules(self, state: dict) -> tuple[Config, frozenset[str]]:
        """The last trusted mdmem.toml in ``state`` (``config_base``) and its admins: its erasers,
        or while it names none the person who made the repo. A trusted version that does not
        parse gives the empty config (closed), whose admin is the founder."""
        base = state.get("config_base")
        key = (base, state.get("founder"))
        if self._rules_memo is not None and self._rules_memo[0] == key:
            return self._rules_memo[1]
        data = self.repo.store.read_at(CONFIG_NAME, base) if base else None
        try:
            rules = Config.parse(data, where=f"{CONFIG_NAME} at {base[:12]}") if data is not None and base else Config()
        except BadInput:
            rules = Config()
        found = (rules, _admins(rules.erasers, state.get("founder")))
        self._rules_memo = (key, found)
        return found

    def _permitted_then(self, state: dict, path: str, email: str) -> bool:
        """Whether the author ``email`` could write ``path``'s root by the rules in ``state``
        (the last trusted config at that point of history)."""
        from .access import Access

        rules = self._rules(state)[0]
        user = rules.committer(email)
        root = root_of(path)
        return user is not None and root is not None and user in Access.of(rules).writers_of_root(root)

    def _rule_change(self, commit: str, email: str, state: dict) -> list:
        """[commit, email, who made it, trusted, why not]: a change to mdmem.toml or the
        allowed-signers file is trusted when a config admin of the last trusted rules made it and,
        when those rules require signed commits, signed it with a key the last trusted
        allowed-signers file gives to an admin."""
        rules, admins = self._rules(state)
        user = rules.committer(email)
        if user is None or user not in admins:
            return [commit, email, user, False, "author"]
        if rules.trust.require_signed:
            base = state.get("signers_base")
            keys = self.repo.store.read_at(rules.trust.allowed_signers, base) if base else None
            found = self.repo.store.signatures(sorted(_receipt_chain([commit], state["attest"])), keys)
            status, principal = found.get(commit, ("N", ""))
            if status not in GOOD_SIGNATURES:
                # Rewritten by an erasure: an admin's signed receipt of it stands in (see _attestation).
                status, principal = _attestation(commit, state["attest"], found, rules.committer, admins) \
                    or (status, principal)
            if status not in GOOD_SIGNATURES:
                return [commit, email, user, False, f"unsigned (git says {status})"]
            if rules.committer(principal) not in admins:
                return [commit, email, user, False, f"signed by {principal or 'an unknown key'}, not an admin"]
        return [commit, email, user, True, ""]

    def _note_moved(self, old_head: str | None, new_head: str | None, changed: set[str]) -> None:
        """The state moved from ``old_head`` to ``new_head``, changing ``changed`` notes: kept
        so that flags() redoes only those (moves since its last answer add up)."""
        if self._flags is None:
            self._moved = None
        elif self._moved is not None and self._moved[1] == old_head:
            self._moved = (self._moved[0], new_head, self._moved[2] | changed)
        elif self._flags[1] == old_head:
            self._moved = (old_head, new_head, set(changed))
        else:
            self._moved = None  # no base to move from: flags() makes a whole pass

    def _config_change(self, commit: str, email: str, state: dict) -> list:
        """[commit, email, who made it, trusted, whether the commit created the file, why not]: a
        change to the rules is judged by the last trusted rules (``config_base``'s mdmem.toml),
        never by itself nor by an untrusted change before it (else a second commit on top of
        one that made its author an eraser would vouch for both); see :meth:`_rule_change`."""
        store = self.repo.store
        base = state.get("config_base")
        if base is None:
            try:
                before = store.read_at(CONFIG_NAME, f"{commit}^")
            except (KeyError, ValueError):
                before = None  # a root commit: nothing before it
            if before is None:
                return [commit, email, self._founder(commit, email), False, True, ""]
            return [commit, email, None, False, False, "no trusted mdmem.toml before it"]
        if store.read_at(CONFIG_NAME, base) is None:
            return [commit, email, None, False, False, "no trusted mdmem.toml before it"]
        change = self._rule_change(commit, email, state)
        return [*change[:4], False, change[4]]

    def _founder(self, commit: str, email: str) -> str | None:
        """Who made the repo: the author of the commit that created mdmem.toml, read through it."""
        data = self.repo.store.read_at(CONFIG_NAME, commit)
        try:
            return Config.parse(data, where=CONFIG_NAME).committer(email) if data is not None else None
        except BadInput:
            return None

    def _receipt_news(self, commit: str) -> tuple[list[str], list[str]]:
        """What the erasure receipts added at ``commit`` say: the e-mails of the pseudonyms they
        made, and the commits their rewrites made (``attested_commits``)."""
        store = self.repo.store
        new = store.read_at(ERASURE_LOG, commit) or b""
        try:
            old = store.read_at(ERASURE_LOG, f"{commit}^") or b""
        except (KeyError, ValueError):
            old = b""  # a root commit
        pseudonyms, attested = [], []
        for line in set(new.splitlines()) - set(old.splitlines()):
            try:
                receipt = json.loads(line)
                owner = receipt["targets"].get("owner", "")
                listed = receipt.get("attested_commits", [])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if isinstance(owner, str) and owner.startswith("erased-"):
                pseudonyms.append(f"{owner}@mdmem.invalid")
            if isinstance(listed, list):
                attested += [c for c in listed if isinstance(c, str) and len(c) == 40]
        return pseudonyms, attested

    def _frontmatter_problem(self, path: str, rev: str, entry: list | None = None) -> str:
        """Why the note's frontmatter cannot be taken as written ("" if it can): it breaks its
        path or contract, or (ATTRIBUTION, with ``entry``: who last changed it) it says someone
        else wrote it."""
        data = self.repo.store.read_at(path, rev)
        if data is None:
            return ""
        try:
            note = validate_note(path, data, self.repo.contracts)
        except NoteInvalid as exc:
            return f"{exc.field}: {exc.reason}"
        return self._claim_problem(path, note, entry) if entry else ""

    def _claim_problem(self, path: str, note, entry: list) -> str:
        """A note names its writer (owner, and a ``human:`` source): mdmem's gate refuses a write
        saying another, and an approval refuses a hold that does. A commit made by hand (plain
        git) is held to the same: the version it made says its committer, or keeps what the
        version before it said (a person fixing a teammate's note keeps the teammate's name).
        Without this, bob committed a team note "owner: alice, source: human:alice" and every
        view showed it as alice's word."""
        if len(entry) > 2:
            return ""  # an erasure's pseudonym, vouched for by its eraser: its claims went with it
        user = self.repo.config.committer(entry[1])
        if user is None:
            return ""  # an unknown writer: flagged as such by the judge
        claims = (note.owner, note.source)
        names_writer = not note.source.startswith("human:") or note.source == f"human:{user}"
        # system:<job> is mdmem's own work: the only note a job writes is consolidate's digest.
        mdmems = not note.source.startswith("system:") or (note.source == "system:consolidate"
                                                            and note.kind == "summary")
        if note.owner == user and names_writer and mdmems:
            return ""
        parents = self.repo.store.parents(entry[0])
        before = self.repo.store.read_at(path, parents[0]) if parents else None
        if before is not None:
            try:
                prior = validate_note(path, before, self.repo.contracts)
                if (prior.owner, prior.source) == claims:
                    return ""  # an edit that keeps what the note said
            except NoteInvalid:
                pass
        return (f"{ATTRIBUTION}owner {note.owner}, source {note.source}, but {user} made this version "
                "(a note names who wrote it; an edit keeps what it said)")

    @_one_at_a_time
    def committed(self, commit: str, parent: str | None, changes: dict[str, bytes | None], email: str) -> None:
        """mdmem itself committed ``changes`` as ``email``: move the cache on without git."""
        state = self._state
        if state is None or state["head"] != parent or self.repo.config.trust.require_signed:
            return  # the next call catches up from git (signatures need git to check)
        if CONFIG_NAME in changes or ERASURE_LOG in changes or self.repo.config.trust.allowed_signers in changes:
            # judged against the last trusted rules / a receipt: the next call asks git
            self._state = None
            self._flags = None
            return
        for path, data in changes.items():
            if not is_note_path(path):
                continue
            if data is not None:
                state["touch"][path] = [commit, email]
                state["fm"][path] = ""  # mdmem writes only notes that validate
                state["deleted"].pop(path, None)
            else:
                state["touch"].pop(path, None)
                state["fm"].pop(path, None)
                state["deleted"][path] = [commit, email]
            if self._unchecked is not None:
                self._unchecked.discard(path)
        state["head"] = commit
        self._unsaved += 1
        self._note_moved(parent, commit, {p for p in changes if is_note_path(p)})

    @_one_at_a_time
    def flush(self) -> None:
        """At close: keep what this process's own commits moved, once there are as many as a
        catch-up would save after (SAVE_AFTER_COMMITS; a long-lived writer such as the MCP
        server). Fewer are left to the next process's walk: rewriting verify.json costs ~35 ms at
        10,000 notes, walking a commit ~2 ms."""
        if self._state is not None and self._unsaved >= SAVE_AFTER_COMMITS:
            self._save(self._state)  # only if it is still HEAD's (an erasure by another process)

    # --- the rule ---------------------------------------------------------------------
    @_one_at_a_time
    def flags(self, head: str | None = None) -> dict[str, Flag]:
        """path -> why the note at ``head`` (default HEAD) is not trusted."""
        head = head if head is not None else self.repo.store.head()
        cfg = self.repo.config
        key = repr((cfg.people, cfg.trust, sorted(self.repo.access.teams.items())))
        if self._flags is not None and self._flags[:2] == (key, head):
            return self._flags[2]
        state = self._current(head)
        if self._unchecked is None:
            self._unchecked = {p for p, problem in state["fm"].items() if problem is None}
        pending = sorted(self._unchecked)
        for path in pending:
            state["fm"][path] = self._frontmatter_problem(path, state["head"], state["touch"].get(path))
        self._unchecked = set()
        if len(pending) >= SAVE_AFTER:
            self._save(state)
        sigs: dict[str, tuple[str, str]] = {}
        if cfg.trust.require_signed:
            sigs = self._signatures(state, head)
        moved, self._moved = self._moved, None
        if (self._flags is not None and self._flags[0] == key and moved is not None
                and moved[0] == self._flags[1] and moved[1] == head and not cfg.trust.require_signed):
            # Only the notes changed since the last answer can have changed their verdict.
            rule_files = (CONFIG_NAME, cfg.trust.allowed_signers)
            out = {p: f for p, f in self._flags[2].items() if p not in moved[2] and p not in rule_files}
            paths = [p for p in moved[2] if p in state["touch"]]
            gone = [p for p in moved[2] if p in state["deleted"]]
        else:
            out, paths, gone = {}, list(state["touch"]), list(state["deleted"])
        judge = _Judge(cfg, self.repo.access, sigs, state["attest"], state.get("then", {}))
        for path in paths:
            flag = judge(path, state["touch"][path], state["fm"].get(path, ""))
            if flag is not None:
                out[path] = flag
        for path in gone:
            flag = judge.deletion(path, state["deleted"][path])
            if flag is not None:
                out[path] = flag
        for name, reason, change in ((CONFIG_NAME, "config", state.get("config")),
                                     (cfg.trust.allowed_signers, "signers", state.get("signers_change"))):
            if change and not change[3] and not (reason == "config" and change[4]):
                out[name] = _rule_flag(name, reason, change)
        self._flags = (key, head, out)
        return out

    @_one_at_a_time
    def flags_of(self, paths, head: str | None = None) -> dict[str, Flag]:
        """flags() for ``paths`` only: the same rule, judged for these notes alone. Recall marks
        the few hits it returns; a whole pass cost a one-call process (the CLI) ~20-40 ms at 10k
        notes (~10k judgements), 10x that at 100k."""
        head = head if head is not None else self.repo.store.head()
        cfg = self.repo.config
        key = repr((cfg.people, cfg.trust, sorted(self.repo.access.teams.items())))
        if (self._flags is not None and self._flags[:2] == (key, head)) or cfg.trust.require_signed:
            every = self.flags(head)  # known already, or signatures to check: the whole pass
            return {p: every[p] for p in paths if p in every}
        state = self._current(head)
        judge = _Judge(cfg, self.repo.access, {}, then=state.get("then", {}))
        out = {}
        for path in paths:
            if path in (CONFIG_NAME, cfg.trust.allowed_signers):
                flag = self.flags(head).get(path)
            elif path in state["touch"]:
                if state["fm"].get(path, "") is None:  # not validated yet (see _current)
                    state["fm"][path] = self._frontmatter_problem(path, state["head"])
                    if self._unchecked is not None:
                        self._unchecked.discard(path)
                flag = judge(path, state["touch"][path], state["fm"].get(path, ""))
            elif path in state["deleted"]:
                flag = judge.deletion(path, state["deleted"][path])
            else:
                flag = None
            if flag is not None:
                out[path] = flag
        return out

    @_one_at_a_time
    def signer_of(self, commit: str) -> str | None:
        """The declared person whose key made a good signature on ``commit``, checked against the
        last trusted allowed-signers file; None if unsigned or signed by no one declared (a hold
        under require_signed is its signer's write, not its e-mail's)."""
        state = self._current(self.repo.store.head())
        base = state.get("signers_base")
        keys = self.repo.store.read_at(self.repo.config.trust.allowed_signers, base) if base else None
        status, principal = self.repo.store.signatures([commit], keys).get(commit, ("N", ""))
        return self.repo.config.committer(principal) if status in GOOD_SIGNATURES else None

    def _signatures(self, state: dict, head: str | None) -> dict[str, tuple[str, str]]:
        """Signature checks of every note's latest commit, against the last trusted version of the
        allowed-signers file (cached per file version and commit): a key line added by someone
        who may not change the file vouches for nothing."""
        base = state.get("signers_base")
        signers = self.repo.store.read_at(self.repo.config.trust.allowed_signers, base) if base else None
        version = hashlib.sha256(signers or b"").hexdigest()
        cached = state["sig"]
        if state.get("signers") != version:
            cached.clear()
            state["signers"] = version
        commits = _receipt_chain({entry[0] for entry in state["touch"].values()}, state["attest"])
        missing = sorted(commits - set(cached))
        if missing:
            found = self.repo.store.signatures(missing, signers)
            for c in missing:
                cached[c] = list(found.get(c, ("N", "")))
            self._save(state)
        return {c: tuple(v) for c, v in cached.items()}

    @_one_at_a_time
    def report(self) -> dict:
        flags = self.flags()
        return {"head": self.repo.store.head(), "notes": len(self._state["touch"]) if self._state else 0,
                "untrusted": [f.to_dict() for f in sorted(flags.values(), key=lambda f: f.path)]}


class _Judge:
    """The rule for one note: who last changed it, its frontmatter, its signature. Users
    and writers are looked up once per e-mail and root (a whole pass meets few of each)."""

    def __init__(self, cfg, access, sigs: dict[str, tuple[str, str]], attest: dict[str, list] | None = None,
                 then: dict[str, str] | None = None):
        self.cfg, self.access, self.sigs, self.attest = cfg, access, sigs, attest or {}
        self.then = then or {}  # path -> the commit of its version, whose writer the rules then permitted
        self._users: dict[str, str | None] = {}
        self._writers: dict[str, frozenset[str]] = {}

    def user(self, email: str) -> str | None:
        if email not in self._users:
            self._users[email] = self.cfg.committer(email)
        return self._users[email]

    def writers(self, root: str) -> frozenset[str]:
        if root not in self._writers:
            self._writers[root] = frozenset(self.access.writers_of_root(root))
        return self._writers[root]

    def permitted(self, root: str, email: str, voucher: str | None) -> tuple[bool, str]:
        """Whether the author of ``email`` may write ``root``, and who they are. A pseudonym an
        erasure made is vouched for by the eraser who ran it (``voucher``), for the commits that
        erasure rewrote: the team notes a person wrote stay trusted after they are erased."""
        user = self.user(email)
        if user is not None and user in self.writers(root):
            return True, user
        if voucher is not None:
            by = self.user(voucher)
            if by is not None and by in self.access.erasers:
                return True, f"{email.split('@', 1)[0]} (erased; vouched for by {by})"
        return False, user or f"unknown identity <{email}>"

    def attested(self, commit: str) -> bool:
        """Whether an eraser's signed erasure receipt stands in for ``commit``'s signature."""
        return _attestation(commit, self.attest, self.sigs, self.user, self.access.erasers) is not None

    def deletion(self, path: str, entry: list) -> Flag | None:
        root = root_of(path)
        ok, who = self.permitted(root, entry[1], entry[2] if len(entry) > 2 else None)
        if ok:
            return None
        return Flag(path, "deleted", f"deleted by {who}, who may not write {root}; a permitted writer restores it "
                    f"(git checkout {entry[0][:12]}^ -- <path>, commit) and deletes it again if it should go",
                    entry[0])

    def __call__(self, path: str, entry: list, problem: str) -> Flag | None:
        commit, email = entry[0], entry[1]
        root = root_of(path)
        writers = self.writers(root)
        ok, who = self.permitted(root, email, entry[2] if len(entry) > 2 else None)
        if not ok and self.then.get(path) != commit:
            return Flag(path, "committer", f"last changed by {who}, who may not write {root}", commit)
        if problem.startswith(ATTRIBUTION):
            return Flag(path, "attribution", f"frontmatter says {problem[len(ATTRIBUTION):]}", commit)
        if problem:
            return Flag(path, "frontmatter", f"frontmatter disagrees with its path: {problem}", commit)
        if self.cfg.trust.require_signed:
            status, principal = self.sigs.get(commit, ("N", ""))
            if status not in GOOD_SIGNATURES and self.attested(commit):
                return None  # rewritten by an erasure; its eraser's signed receipt attests it
            signer = self.user(principal)
            if status not in GOOD_SIGNATURES:
                return Flag(path, "unsigned", "last commit has no good signature from an allowed signer "
                            f"(git says {status})", commit)
            if signer is None or signer not in writers:
                return Flag(path, "signer", f"signed by {principal or 'an unknown key'}, who may not "
                            f"write {root}", commit)
        return None


def _receipt_chain(commits, attest: dict[str, list]) -> set[str]:
    """``commits`` and the erasure receipts' commits attesting them, transitively."""
    out, frontier = set(commits), set(commits)
    while frontier:
        frontier = {attest[c][0] for c in frontier if c in attest} - out
        out |= frontier
    return out


def _attestation(commit: str, attest: dict[str, list], sigs: dict, who, allowed) -> tuple[str, str] | None:
    """The good signature standing in for ``commit``'s, which an erasure's rewrite dropped
    (git-filter-repo keeps no signatures): that of the receipt listing it, whose commit a person
    in ``allowed`` made and signed with their own key. A later erasure may have rewritten that
    receipt's commit too: then the receipt attesting it stands in, and so on."""
    for _ in range(64):
        receipt, by = attest.get(commit, (None, None))
        person = who(by) if receipt else None
        if person is None or person not in allowed:
            return None
        status, principal = sigs.get(receipt, ("N", ""))
        if status in GOOD_SIGNATURES:
            return (status, principal) if who(principal) == person else None
        commit = receipt
    return None


def _rule_flag(name: str, reason: str, change: list) -> Flag:
    """The flag of an untrusted change to mdmem.toml (``config``) or the allowed-signers file
    (``signers``); ``change`` as made by :meth:`Verifier._rule_change`/``_config_change``."""
    commit, email, user = change[0], change[1], change[2]
    who = user or f"unknown identity <{email}>"
    why = change[5] if reason == "config" else change[4]
    admins = ("a config admin ([roles] erasers of the last trusted mdmem.toml, or while it names none the person "
              "who made the repo)")
    if why in ("", "author"):
        text = (f"last changed by {who}, who is not {admins}, and does not take effect; an admin reviews it and "
                f"commits {name} again")
    else:
        text = (f"last changed by {who}, {why}, and does not take effect; {admins} reviews it and commits {name} "
                "again, signed")
    return Flag(name, reason, text, commit)


def _admins(erasers, founder: str | None) -> frozenset[str]:
    """Who may change mdmem.toml under a config: its erasers, or while it names none the
    person who made the repo."""
    return frozenset(erasers) if erasers else frozenset({founder} if founder else ())


def _empty() -> dict:
    return {"version": CACHE_VERSION, "head": None, "touch": {}, "fm": {}, "sig": {}, "deleted": {},
            "config": None, "config_base": None, "founder": None, "signers_change": None, "signers_base": None,
            "attest": {}, "then": {}}
