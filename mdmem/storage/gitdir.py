"""Where a work tree's git directory is, and mdmem's cache folder inside it.

The caches (search index, vectors, verify's verdicts, view metadata, the embedding graph)
live in ``<git dir>/mdmem/`` and the lock files in ``<git dir>/mdmem-locks/``, never in the
work tree: a commit can put any file in
the work tree -- a teammate committed ``.mdmem/`` (a poisoned index served fake text for a
real note; a forged ``verify.json`` turned an untrusted edit trusted in every fresh clone)
or a ``.mdmem`` symlink (every clone wrote its caches, and deleted folders, outside the
repo) -- but nothing a commit carries is ever written inside ``.git``.
A linked worktree (``.git`` is a file naming its git dir) has caches of its own.
"""
from __future__ import annotations

import os
import stat

# pathlib is imported where a Path is made, not here: the prompt hook's fast path
# (cli/launch.py) finds the daemon's socket through this module, and pathlib with what it
# imports cost each prompt ~5 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

CACHE_NAME = "mdmem"
# The lock files, beside the cache folder and not in it: a lock file deleted while held lets a
# second process lock a new file at the same path (two writers at once), and the caches are
# disposable (`rm -rf .git/mdmem` is a fair way to reset them).
LOCKS_NAME = "mdmem-locks"
ERASURE_DONE = "mdmem-erasure.done"  # in the shared git dir: see erasure_done_path
LEGACY_CACHE = ".mdmem"  # where caches lived before: a work-tree folder a commit could fill
DAEMON_LOG = "daemon.log"  # in the cache folder: the daemon's own output (cli/launch.py)


def git_dir(root: Path) -> Path:
    """The git directory of the work tree at ``root`` (``.git``, or where a ``.git`` file points)."""
    from pathlib import Path

    return Path(git_dir_path(os.fspath(root)))


def git_dir_path(root: str) -> str:
    """:func:`git_dir` as a string, with os.path only."""
    dot = os.path.join(root, ".git")
    if os.path.isfile(dot):
        try:
            with open(dot, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return dot
        if text.startswith("gitdir:"):
            target = text[len("gitdir:"):].strip()
            return target if os.path.isabs(target) else os.path.realpath(os.path.join(root, target))
    return dot


def cache_dir(root: Path) -> Path:
    """The folder of a repo's disposable caches (created by whoever writes one first)."""
    return git_dir(root) / CACHE_NAME


def clear_cache_path(cache_folder: Path) -> None:
    """A file (or a link to one) where a cache folder belongs is removed: everything there is
    disposable, and every cache inside failed on it. Checked where the locks are
    taken, which every reader and writer does first."""
    try:
        mode = os.lstat(cache_folder).st_mode  # one stat: every write comes here
        if stat.S_ISDIR(mode) or (stat.S_ISLNK(mode) and os.path.isdir(cache_folder)):
            return
        os.unlink(cache_folder)
    except FileNotFoundError:
        pass


def locks_dir(root: Path) -> Path:
    """The folder of a work tree's lock files (the write, index and daemon locks)."""
    return git_dir(root) / LOCKS_NAME


def cache_locks_dir(cache_folder: Path) -> Path:
    """:func:`locks_dir` by the work tree's cache folder (a linked worktree's, whose work tree
    may be gone)."""
    return cache_folder.parent / LOCKS_NAME


def erasure_lock_path(root: Path) -> Path:
    """The erasure gate, one for the whole repository (in the main worktree's lock folder, from
    any worktree): every writer holds it shared while it holds its own worktree's write lock, an
    erasure holds it alone. Each worktree's writers serialise on their own write lock, so an
    erasure holding only its own let a linked worktree's write run under git-filter-repo and
    `gc --prune=now`; a list of the worktrees' locks missed a worktree added while
    the erasure waited. With the gate no list is needed."""
    return common_git_dir(root) / LOCKS_NAME / "erasure.lock"


def erasure_turnstile_path(root: Path) -> Path:
    """Beside the gate: an erasure holds it alone from before it waits for the gate; a writer
    passes it (shared, let go at once) before it takes the gate. flock favours no one, so
    without it writers taking turns on the gate kept an erasure waiting for ever
    (two agents writing in a loop, every forget timed out)."""
    return common_git_dir(root) / LOCKS_NAME / "erasure-waiting.lock"


def housekeeping_lock_path(root: Path) -> Path:
    """Held alone by housekeeping (a repack, a gc) while it moves objects between files, shared
    by a proof while it reads .git's files (storage/maintenance.housekeeping_lock): a repack
    deleting packed loose objects and their folders under a proof's walk failed it with
    FileNotFoundError, and a pack being written is a file git does not list yet."""
    return common_git_dir(root) / LOCKS_NAME / "housekeeping.lock"


def erasure_done_path(root: Path) -> Path:
    """Rewritten when an erasure ends (erasure/journal.py); see :func:`file_stamp`."""
    return common_git_dir(root) / ERASURE_DONE


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is replaced (inode, mtime, size; None: no file). On the
    erasure_done_path, one stat says whether an erasure ended since: a process holding commits
    in memory that sees it move knows history was rewritten under it (GitStore.follow_erasures)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def common_git_dir(root: Path) -> Path:
    """The git directory every worktree of the repository shares (objects, refs, packed-refs,
    worktrees/): ``git_dir(root)`` itself, unless ``root`` is a linked worktree, whose own git
    directory names the shared one in its ``commondir`` file."""
    own = git_dir(root)
    try:
        text = (own / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return own
    from pathlib import Path

    common = Path(text)
    return common if common.is_absolute() else (own / common).resolve()


def cache_folders(root: Path) -> list[Path]:
    """The main worktree's cache folder, then each linked worktree's (``git worktree add``: a
    process working there keeps its own in .git/worktrees/<name>/mdmem), from any of them."""
    common = common_git_dir(root)
    worktrees = common / "worktrees"
    linked = sorted(p for p in worktrees.glob(f"*/{CACHE_NAME}") if p.is_dir()) if worktrees.is_dir() else []
    return [common / CACHE_NAME, *linked]
