"""Git hooks that travel with the repo, and what they run.

The hooks live in the committed folder ``.githooks/`` (laid down by ``mdmem init``) with a
``.gitattributes`` naming the merge driver for MEMORY views. git never enables hooks from
a clone by itself, so any mdmem command in a clone without them points ``core.hooksPath``
at the folder (``ensure``), and ``mdmem hooks install`` does it explicitly. Hooks run code
on every commit, so mdmem enables only hooks byte-equal to its own template: a pushed
change to them is refused by ``ensure`` (and by ``sync``) until a person reinstalls.

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

HOOKS_DIR = ".githooks"
HOOK_NAMES = ("pre-commit", "post-merge", "post-rewrite")
ATTRIBUTES = ".gitattributes"
DRIVER = "mdmem-view"
EXECUTABLE = frozenset(f"{HOOKS_DIR}/{name}" for name in HOOK_NAMES)
INSTALLED_NOTICE = ("mdmem: enabled this repo's git hooks (core.hooksPath = .githooks): commits check notes "
                    "and regenerate MEMORY views")


def committed_files() -> dict[str, bytes]:
    """The hook folder and attributes as mdmem writes them (repo path -> bytes)."""
    files = {f"{HOOKS_DIR}/{name}": read_template(f"githooks/{name}").encode() for name in HOOK_NAMES}
    files[ATTRIBUTES] = read_template("gitattributes").encode()
    return files


def differing(root: Path) -> list[str]:
    """Hook files in the work tree that are missing or differ from mdmem's."""
    out = []
    for rel, data in committed_files().items():
        try:
            if (Path(root) / rel).read_bytes() != data:
                out.append(rel)
        except OSError:
            out.append(rel)
    return out


def _configured(cfg, python: str) -> bool:
    def get(key):
        return cfg[key] if key in cfg else None
    configured_python = get("mdmem.python")
    return (get("core.hooksPath") == HOOKS_DIR and get(f"merge.{DRIVER}.driver") == "true"
            and bool(configured_python) and os.access(configured_python, os.X_OK))


def configure(root: Path, python: str) -> None:
    """Point git at the committed hooks and define the view merge driver (local config)."""
    cfg = hook_git.local_config(root)
    cfg["core.hooksPath"] = HOOKS_DIR
    cfg[f"merge.{DRIVER}.name"] = "mdmem MEMORY view: keep one side; the hooks regenerate it"
    cfg[f"merge.{DRIVER}.driver"] = "true"
    cfg["mdmem.python"] = python
    for rel in EXECUTABLE:
        path = Path(root) / rel
        if path.exists() and not os.access(path, os.X_OK):
            path.chmod(0o755)


def ensure(root: Path, python: str) -> str | None:
    """What any mdmem command does first: enable the repo's hooks if they are not enabled.
    Returns a one-line notice when something changed (or was refused), else None."""
    root = Path(root)
    if not (root / HOOKS_DIR).is_dir():
        return None  # a repo made before hooks were committed: `mdmem hooks install` adds them
    cfg = hook_git.local_config(root)
    bad = differing(root)
    if bad:
        if "core.hooksPath" in cfg and cfg["core.hooksPath"] == HOOKS_DIR:
            del cfg["core.hooksPath"]
            return (f"mdmem: disabled the repo's git hooks: {', '.join(bad)} differ from mdmem's; review the "
                    "change, then `mdmem hooks install` restores mdmem's hooks")
        return (f"mdmem: not enabling the repo's git hooks: {', '.join(bad)} differ from mdmem's; review them, "
                "then `mdmem hooks install`")
    if _configured(cfg, python):
        return None
    configure(root, python)
    return INSTALLED_NOTICE


def install(repo, *, as_user: str, python: str, now=None) -> dict:
    """``mdmem hooks install``: commit mdmem's hook folder if it is missing or differs, and
    enable it."""
    from .model.clock import resolve_now
    from .storage.gitstore import Trailers

    when = resolve_now(now)
    commit = None
    with repo.store.locked():
        head = repo.store.head()
        changes = {p: d for p, d in committed_files().items()
                   if (repo.store.read_at(p, head) if head else None) != d}
        if changes:
            message = ("hooks: mdmem's git hooks and view merge driver\n\n"
                       + Trailers("hooks", as_user, "system:hooks").render())
            commit = repo.store.commit(changes, message, actor=as_user, when=when)
        for rel in EXECUTABLE:
            (repo.root / rel).chmod(0o755)
    configure(repo.root, python)
    return {"committed": commit, "hooks_path": HOOKS_DIR, "files": sorted(committed_files())}


# --- what the hooks run ----------------------------------------------------------------

@dataclass
class HookReport:
    problems: list[str] = field(default_factory=list)  # "path: field: reason"
    regenerated: list[str] = field(default_factory=list)
    commit: str | None = None


def _views(store, config, root: Path, flags=None):
    from .views.fresh import Views
    from .views.render import MetaCache, RootEntries

    meta = MetaCache(root / ".mdmem" / "viewmeta.sqlite")
    return Views(store, RootEntries(store, meta), config, flags=flags), meta


def _flags_at(root: Path):
    """rev -> notes trust flags at that commit (views leave them out)."""
    def flags(rev: str) -> set[str]:
        from .repo import MemoryRepo

        with MemoryRepo(root) as repo:
            return set(repo.trust.flags(rev))
    return flags


def _staged_flags(root: Path, config, head: str | None, touched: list[str]) -> set[str]:
    """The notes a commit being made will leave untrusted: HEAD's flags for notes it does not
    touch; a note it touches is trusted when the person committing may write its root."""
    from .policy.access import Access

    flagged = _flags_at(root)(head) if head else set()
    user = config.committer(hook_git.user_email(root))
    writers = Access(config.teams, config.erasers)
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
    tree = hook_git.staged_tree(root, env)
    head = hook_git.head_commit(root)
    touched = hook_git.touched_paths(root, head, tree, env)
    store = GitStore(root)
    for path in sorted(touched):
        if not is_note_path(path):
            continue
        data = read_in(store, tree, path)
        if data is None:
            continue  # deleted
        report.problems += [f"{path}: {name}: {reason}" for name, reason in note_problems(path, data, config.contracts)]
    if report.problems:
        return report
    flagged = _staged_flags(root, config, head, touched)
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
    from .storage.gitstore import GitStore, Trailers
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
