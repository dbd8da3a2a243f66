"""mdmem's git hooks: where they are installed from, and what they run.

git runs hooks from the clone's own ``.git/hooks`` folder, and mdmem installs its three hooks
there from its own package, never from the work tree: a hook is code that runs on every
commit, so nothing a teammate commits may become one (a committed ``.githooks/`` folder that
``core.hooksPath`` pointed at ran whatever the last pull brought: attack F19). Any mdmem
command in a clone installs them when they are missing or not mdmem's (``ensure``), and
``mdmem hooks install`` does it explicitly. The committed ``.gitattributes`` names the merge
driver for MEMORY views; the driver itself is defined in the clone's local config.

- pre-commit: validates the notes the commit touches (every problem of each) and
  regenerates the MEMORY views of the roots it touches, adding them to the commit;
- post-merge: a merge commit gets the views of its merged notes (the merge driver keeps one
  side of a view, then the views are regenerated and the merge commit amended in place);
- post-rewrite: after a rebase, a commit that regenerates views left stale.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .config import CONFIG_NAME, Config
from .errors import BadInput
from .model.layout import is_note_path
from .storage import hook_git
from .template import read_template
from .storage.gitdir import cache_dir

HOOK_NAMES = ("pre-commit", "post-merge", "post-rewrite")
LEGACY_HOOKS_DIR = ".githooks"  # where repos made before 2026-11-30 committed them; never run now
ATTRIBUTES = ".gitattributes"
DRIVER = "mdmem-view"
# The driver keeps our side only for a MEMORY view (the hooks regenerate it); any other path is a
# normal three-way merge (git merge-file: a conflict stays a conflict). Which paths reach the
# driver is the committed .gitattributes, which anyone may change: `*.md merge=mdmem-view` once
# made every concurrent note edit silently keep one side (attack 5, A16). %P is the path.
DRIVER_COMMAND = ("sh -c 'case \"$4\" in team/*/*/*|private/*/*/*) exec git merge-file -q \"$1\" \"$2\" \"$3\";; "
                  "MEMORY.md|team/*/MEMORY.md|private/*/MEMORY.md) exit 0;; "
                  "*) exec git merge-file -q \"$1\" \"$2\" \"$3\";; esac' mdmem-view %A %O %B %P")
MARKER = "# mdmem hook"  # the line that tells mdmem's own hooks from a person's
INSTALLED_NOTICE = ("mdmem: installed mdmem's git hooks in .git/hooks: commits check notes and regenerate "
                    "MEMORY views")


_CONVERTING = ("working-tree-encoding", "filter", "ident")
_NOTE_LIKE = ("x.md", "MEMORY.md", "team/payments/service/billing/fact/x.md", "private/alice/user/alice/fact/x.md")


def converting_attributes(text: str) -> list[str]:
    """The lines of a .gitattributes that make git rewrite notes between what is committed and
    the work tree in a way mdmem cannot read through: another encoding, a filter driver, $Id$
    expansion. (Line endings are fine: mdmem reads CRLF as LF.) One such committed line made
    every note unreadable in every clone (attack 6, F10)."""
    import fnmatch

    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        pattern = parts[0].strip('"')
        if not any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern) for p in _NOTE_LIKE):
            continue
        if any(a.split("=", 1)[0] in _CONVERTING for a in parts[1:]):
            out.append(line.strip())
    return out


def committed_files() -> dict[str, bytes]:
    """What mdmem commits into a repo for its hooks: the attributes naming the view merge driver."""
    return {ATTRIBUTES: read_template("gitattributes").encode()}


def hook_files() -> dict[str, bytes]:
    """mdmem's hooks as installed (name -> bytes), from this package."""
    return {name: read_template(f"githooks/{name}").encode() for name in HOOK_NAMES}


def _problems(root: Path, python: str) -> tuple[list[str], list[str]]:
    """(hooks to (re)write, notices) for this clone."""
    folder = hook_git.hooks_dir(root)
    cfg = hook_git.local_config(root)
    notices = []
    stale = []
    for name, data in hook_files().items():
        path = folder / name
        try:
            current = path.read_bytes()
        except OSError:
            stale.append(name)
            continue
        if current != data or not os.access(path, os.X_OK):
            if _replaceable(current):
                stale.append(name)
            else:
                notices.append(f"mdmem: .git/hooks/{name} is not mdmem's; notes are not checked on commit until "
                               "it is moved aside and `mdmem hooks install` runs")
    other = cfg[hook_git.HOOKS_CONFIG] if hook_git.HOOKS_CONFIG in cfg else None
    if other and other != LEGACY_HOOKS_DIR and Path(root, os.path.expanduser(other)).resolve() != folder:
        # Set here or in the person's global config: git runs that folder, never .git/hooks.
        notices.append(f"mdmem: core.hooksPath is {other}, so git does not run mdmem's hooks in .git/hooks "
                       "(notes are not checked on commit): unset it (git config --global --unset core.hooksPath) "
                       "or copy mdmem's hooks there")
    configured_python = cfg["mdmem.python"] if "mdmem.python" in cfg else None
    if not configured_python or not os.access(configured_python, os.X_OK):
        stale.append("config")
    elif not ("merge." + DRIVER + ".driver" in cfg and cfg[f"merge.{DRIVER}.driver"] == DRIVER_COMMAND):
        stale.append("config")
    return stale, notices


def _replaceable(current: bytes) -> bool:
    """An older mdmem hook, or an empty file: mdmem may rewrite it. Anything else is a person's."""
    return MARKER.encode() in current or not current.strip()


def configure(root: Path, python: str) -> None:
    """Install mdmem's hooks into .git/hooks and define the view merge driver (local config).
    A ``core.hooksPath`` pointing at the committed legacy folder is removed: git must run
    only what mdmem installed."""
    cfg = hook_git.local_config(root)
    if "core.hooksPath" in cfg and cfg["core.hooksPath"] == LEGACY_HOOKS_DIR:
        del cfg["core.hooksPath"]
    cfg[f"merge.{DRIVER}.name"] = "mdmem MEMORY view: keep one side; the hooks regenerate it"
    cfg[f"merge.{DRIVER}.driver"] = DRIVER_COMMAND
    cfg["mdmem.python"] = python
    folder = hook_git.hooks_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in hook_files().items():
        path = folder / name
        try:
            current = path.read_bytes()
        except OSError:
            current = None
        if current is not None and current != data and not _replaceable(current):
            continue  # a person's own hook: never overwritten (ensure says so)
        tmp = folder / f".{name}.mdmem-tmp"
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        os.replace(tmp, path)


def ensure(root: Path, python: str) -> str | None:
    """What any mdmem command does first: install mdmem's hooks if they are missing or stale.
    Returns a one-line notice when something changed (or needs a person), else None."""
    root = Path(root)
    cfg = hook_git.local_config(root)
    legacy = "core.hooksPath" in cfg and cfg["core.hooksPath"] == LEGACY_HOOKS_DIR
    stale, notices = _problems(root, python)
    if stale or legacy:
        configure(root, python)
        return INSTALLED_NOTICE + (" (git no longer runs the committed .githooks folder)" if legacy else "")
    return notices[0] if notices else None


def install(repo, *, as_user: str, python: str, now=None) -> dict:
    """``mdmem hooks install``: install mdmem's hooks into .git/hooks, and commit the
    attributes naming the view merge driver if they are missing or differ."""
    from .model.clock import resolve_now
    from .storage.trailers import Trailers

    as_user = repo.access.check_user(as_user)
    when = resolve_now(now)
    commit = None
    with repo.store.locked():
        head = repo.store.head()
        changes = {p: d for p, d in committed_files().items()
                   if (repo.store.read_at(p, head) if head else None) != d}
        if changes:
            message = ("hooks: the view merge driver's attributes\n\n"
                       + Trailers("hooks", as_user, "system:hooks").render())
            commit = repo.store.commit(changes, message, actor=as_user, when=when)
    configure(repo.root, python)
    _, notices = _problems(repo.root, python)
    return {"committed": commit, "hooks_dir": str(hook_git.hooks_dir(repo.root)), "hooks": list(HOOK_NAMES),
            "files": sorted(committed_files()), "notices": notices,
            "git_runs_them": not any(hook_git.HOOKS_CONFIG in n for n in notices)}


# --- what the hooks run ----------------------------------------------------------------

@dataclass
class HookReport:
    problems: list[str] = field(default_factory=list)  # "path: field: reason"
    regenerated: list[str] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)  # the commit goes on; the person should know


def _views(store, config, root: Path, flags=None):
    from .views.fresh import Views
    from .views.render import MetaCache, RootEntries

    meta = MetaCache(cache_dir(root) / "viewmeta.sqlite")
    return Views(store, RootEntries(store, meta), config, flags=flags), meta


def _flags_at(root: Path):
    """rev -> notes trust flags at that commit (views leave them out)."""
    def flags(rev: str) -> set[str]:
        from .repo import MemoryRepo

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
    from .repo import MemoryRepo

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
    from .policy.access import Access

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
    from .model.validate import note_problems
    from .storage.gitstore import GitStore
    from .views.fresh import changed, read_in, touched_roots

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
    for path in sorted(touched):
        if not is_note_path(path):
            continue
        data = read_in(store, tree, path)
        if data is None:
            continue  # deleted
        if store.is_link_in(tree, path):  # its blob is the target's name, not a note (A18.7)
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
    from .storage.gitstore import GitStore
    from .views.fresh import changed

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
    from .model.clock import resolve_now
    from .storage.gitstore import GitStore
    from .storage.trailers import Trailers
    from .views.fresh import changed

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
