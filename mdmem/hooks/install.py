"""mdmem's git hooks: where they are installed from, and what they run.

git runs hooks from the clone's own ``.git/hooks`` folder, and mdmem installs its three hooks
there from its own package, never from the work tree: a hook is code that runs on every
commit, so nothing a teammate commits may become one (a committed ``.githooks/`` folder that
``core.hooksPath`` pointed at ran whatever the last pull brought). Any mdmem
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
from pathlib import Path
from typing import Any

from ..storage import hook_git
from ..template import read_template

HOOK_NAMES = ("pre-commit", "post-merge", "post-rewrite")
LEGACY_HOOKS_DIR = ".githooks"  # where repos made before 2026-11-30 committed them; never run now
ATTRIBUTES = ".gitattributes"
DRIVER = "mdmem-view"
# The driver keeps our side only for a MEMORY view (the hooks regenerate it); any other path is a
# normal three-way merge (git merge-file: a conflict stays a conflict). Which paths reach the
# driver is the committed .gitattributes, which anyone may change: `*.md merge=mdmem-view` once
# made every concurrent note edit silently keep one side. %P is the path.
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
    every note unreadable in every clone."""
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


def _problems(root: Path, python: str, cfg: Any = None) -> tuple[list[str], list[str]]:
    """(hooks to (re)write, notices) for this clone; ``cfg``: its git config, if already read."""
    folder = hook_git.hooks_dir(root)
    cfg = cfg if cfg is not None else hook_git.local_config(root)
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
    cfg = hook_git.local_config(root)  # read once: every command (and each call a daemon answers) comes here
    legacy = "core.hooksPath" in cfg and cfg["core.hooksPath"] == LEGACY_HOOKS_DIR
    stale, notices = _problems(root, python, cfg)
    if stale or legacy:
        configure(root, python)
        return INSTALLED_NOTICE + (" (git no longer runs the committed .githooks folder)" if legacy else "")
    return notices[0] if notices else None


def install(repo, *, as_user: str, python: str, now=None) -> dict:
    """``mdmem hooks install``: install mdmem's hooks into .git/hooks, and commit the
    attributes naming the view merge driver if they are missing or differ."""
    from ..model.clock import resolve_now
    from ..storage.trailers import Trailers

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
