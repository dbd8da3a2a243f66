"""What mdmem's git hooks run (pre-commit, post-merge, post-rewrite): checks of the notes a commit
touches and the MEMORY views regenerated into it. Called by `mdmem hooks run` from the hook files
hooks/install.py lays down; it opens the repository through the facade, like the CLI."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..config import CONFIG_NAME, Config
from ..errors import BadInput
from ..model.layout import is_note_path, root_of
from ..storage import hook_git
from ..storage.gitdir import cache_dir
from .install import ATTRIBUTES, converting_attributes


@dataclass
class HookReport:
    problems: list[str] = field(default_factory=list)  # "path: field: reason"
    regenerated: list[str] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)  # the commit goes on; the person should know


def _views(store, config, root: Path, flags=None):
    from ..views.fresh import Views
    from ..views.render import MetaCache, RootEntries

    meta = MetaCache(cache_dir(root) / "viewmeta.sqlite")
    return Views(store, RootEntries(store, meta), config, flags=flags), meta


def _flags_at(root: Path):
    """rev -> notes trust flags at that commit (views leave them out)."""
    def flags(rev: str) -> set[str]:
        from ..repo import MemoryRepo

        with MemoryRepo(root) as repo:
            return set(repo.trust.flags(rev))
    return flags


@dataclass
class _Rules:
    """What a commit being made is judged by: verify's rules at HEAD (policy/verify.py)."""
    config: Config  # the last trusted mdmem.toml (the staged one when an admin changes it)
    flagged: set[str]  # HEAD's untrusted notes
    user: str | None  # who the commit's author e-mail is, by the last trusted [people]
    admin: bool  # whether they may change mdmem.toml and the allowed-signers file
    admins: frozenset[str]


def _rules(root: Path, head: str | None, staged: Config, touched: list[str], email: str) -> _Rules:
    """The config a commit is judged by is the one verify will judge it by: the last trusted
    mdmem.toml, never the staged one unless a config admin is changing it (else bob's own
    commit that widens his access would let his planted notes through his hook)."""
    from ..repo import MemoryRepo

    if head is None:
        return _Rules(staged, set(), staged.committer(email), True, frozenset())  # the founding commit
    with MemoryRepo(root) as repo:
        flagged = set(repo.trust.flags(head))
        rules = repo.trust.last_trusted_config()
        user, admin, admins = repo.trust.judge_rule_change(email)
    changing = CONFIG_NAME in touched
    return _Rules(staged if changing and admin else rules, flagged, user, admin, admins)


def _staged_flags(rules: _Rules, touched: list[str]) -> set[str]:
    """The notes a commit being made will leave untrusted: HEAD's flags for notes it does not
    touch; a note it touches is trusted when the person committing may write its root."""
    from ..policy.access import Access

    flagged = set(rules.flagged)
    user, config = rules.user, rules.config
    writers = Access.of(config)
    for path in touched:
        if not is_note_path(path):
            continue
        flagged.discard(path)
        if user is None or user not in writers.writers_of_root("/".join(path.split("/")[:2])):
            flagged.add(path)
    return flagged


def pre_commit(root: Path, *, env: dict | None = None) -> HookReport:
    """Check the staged notes a commit touches; regenerate and stage the views of their roots.

    ``env`` is the hook's environment (git passes the index being committed in it)."""
    from ..model.validate import note_problems
    from ..policy.access import Access
    from ..storage.gitstore import GitStore
    from ..views.fresh import changed, read_in, touched_roots

    root = Path(root)
    report = HookReport()
    staged_config = hook_git.staged_file(root, CONFIG_NAME, env)
    if not staged_config:
        return report  # not a memory repo (or mdmem.toml is being deleted: nothing to render)
    try:
        config = Config.from_dict(tomllib.loads(staged_config), where=CONFIG_NAME)
    except (tomllib.TOMLDecodeError, BadInput) as exc:
        report.problems.append(f"{CONFIG_NAME}: {exc}")
        return report
    store = GitStore(root)
    # Index entries a running mdmem process still owes for its own commits: HEAD's, not the
    # versions before them (else this commit would revert mdmem's notes).
    hook_git.follow_head(root, store.pending_entries(), env)
    tree = hook_git.staged_tree(root, env)
    head = hook_git.head_commit(root)
    touched = hook_git.touched_paths(root, head, tree, env)
    email = hook_git.author_email(root, env)
    rules = _rules(root, head, config, touched, email)
    rule_files = sorted({CONFIG_NAME, rules.config.trust.allowed_signers} & set(touched))
    if rule_files and not rules.admin:
        who = rules.user or f"your git identity <{email}>, no mdmem user,"
        admins = ", ".join(sorted(rules.admins)) or "nobody"
        report.problems += [f"{name}: author: {who} is not a config admin ([roles] erasers of the last trusted "
                            f"mdmem.toml; now {admins}): the change would not take effect and `mdmem verify` would "
                            "flag it; ask an admin to commit it" for name in rule_files]
        return report
    config = rules.config
    access = Access.of(config)
    for path in sorted(touched):
        if not is_note_path(path):
            continue
        data = read_in(store, tree, path)
        if data is None:
            continue  # deleted
        if not access.holds(root_of(path)):
            # A scope repository is cloned by its root's readers: another root's note here
            # would reach all of them (the host enforces repositories, not folders).
            report.problems.append(f"{path}: path: {access.not_held(root_of(path))}")
            continue
        if store.is_link_in(tree, path):  # its blob is the target's name, not a note
            report.problems.append(f"{path}: is a symbolic link; a note is a regular file")
            continue
        report.problems += [f"{path}: {name}: {reason}" for name, reason in note_problems(path, data, config.contracts)]
    report.problems += [f"{path}: path: must be {what}, not this" for path, what in store.misplaced(tree)]
    if ATTRIBUTES in touched:
        staged = (read_in(store, tree, ATTRIBUTES) or b"").decode("utf-8", "replace")
        report.problems += [f"{ATTRIBUTES}: {line!r}: makes git convert notes in the work tree (another encoding, a "
                            "filter or $Id$); mdmem reads notes as committed (UTF-8; CRLF is fine)"
                            for line in converting_attributes(staged)]
    if report.problems:
        return report
    flagged = _staged_flags(rules, touched)
    untrusted = sorted(p for p in touched if is_note_path(p) and p in flagged and read_in(store, tree, p) is not None)
    if untrusted and rules.user is not None:
        # A known person writing where they may not (a planted note): refused, as verify would flag it.
        report.problems += [f"{p}: author: {rules.user} may not write {'/'.join(p.split('/')[:2])} (by the last "
                            "trusted mdmem.toml); the note would be untrusted and left out of views" for p in untrusted]
        return report
    if untrusted:
        # An identity mdmem does not know may be a person whose address is not mapped yet: told, not stopped.
        report.warnings.append(f"mdmem pre-commit: your git identity <{email}> is no mdmem user (add it to "
                               f"[people.<you>] emails in mdmem.toml); {len(untrusted)} note(s) of this commit will "
                               "be untrusted and left out of views until a permitted writer commits them: "
                               + ", ".join(untrusted[:5]))
    views, meta = _views(store, config, root, flags=lambda rev: flagged)
    try:
        roots = touched_roots(touched)
        guide = CONFIG_NAME in touched or "MEMORY.md" in touched
        if CONFIG_NAME in touched:
            roots |= views.all_roots(tree)  # teams and readers may have changed
        changes = changed(store, tree, views.for_roots(roots, tree, guide=guide))
    finally:
        meta.close()
    if not changes:
        return report
    hook_git.stage(root, changes, env)
    report.regenerated = sorted(changes)
    return report


def post_merge(root: Path, *, squash: bool = False) -> HookReport:
    """A merge commit just made by git: amend it with the views of its merged notes."""
    from ..storage.gitstore import GitStore
    from ..views.fresh import changed

    report = HookReport()
    root = Path(root)
    if squash or not (root / CONFIG_NAME).exists():
        return report
    store = GitStore(root)
    parents = hook_git.parents_of_head(root)
    if len(parents) < 2 or parents[0] != hook_git.orig_head(root):
        return report  # a fast-forward: those commits are someone else's, already rendered
    head = store.head()
    config = Config.load(root)
    views, meta = _views(store, config, root, flags=_flags_at(root))
    try:
        changes = changed(store, head, views.expected(head))
    finally:
        meta.close()
    if changes:
        with store.locked():
            report.commit = store.amend_head(changes, "views regenerated after merge")
        report.regenerated = sorted(changes)
    return report


def post_rewrite(root: Path, *, kind: str, actor: str, author: tuple[str, str] | None) -> HookReport:
    """After a rebase, one commit that regenerates the views the replayed commits left stale."""
    from ..model.clock import resolve_now
    from ..storage.gitstore import GitStore
    from ..storage.trailers import Trailers
    from ..views.fresh import changed

    report = HookReport()
    root = Path(root)
    if kind != "rebase" or not (root / CONFIG_NAME).exists():
        return report
    store = GitStore(root)
    config = Config.load(root)
    views, meta = _views(store, config, root, flags=_flags_at(root))
    try:
        head = store.head()
        changes = changed(store, head, views.expected(head))
    finally:
        meta.close()
    if changes:
        message = ("render MEMORY views after a rebase\n\n"
                   + Trailers("render", actor, "system:render").render())
        with store.locked():
            report.commit = store.commit(changes, message, actor=actor, when=resolve_now(), author=author)
        report.regenerated = sorted(changes)
    return report
