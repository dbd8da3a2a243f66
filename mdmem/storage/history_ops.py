"""Named git operations for history rewriting and the clean-up around it (erasure).

Erasure reads every version of every file, rewrites history with git-filter-repo and then
clears what would keep the old objects alive (stash, worktrees, refs, reflogs) before
pruning. Every git command it needs is one function here, so storage/ stays the only code
that runs git; erasure decides what to do, these functions only do it.

Nothing here writes temporary files outside ``.git``: filter-repo keeps its state in
``.git/filter-repo`` (removed after), fast-import and gc write their packs in ``.git/objects``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitFailed
from .gitdir import common_git_dir

# History as erasure sees it: every ref but the stash (its entries are handled one by one)
# and erasure's own parking refs.
HISTORY_REFS = ("--exclude=refs/stash", "--exclude=refs/mdmem-erasure/*", "--all")
# A changed path in `git log --raw`: ":<old mode> <new mode> <old oid> <new oid> <status>\t<path>"
_ZERO = "0" * 40


def git_dir(root: Path) -> Path:
    """The repository's shared git directory (objects, refs, worktrees/), also when ``.git`` is
    a file (a linked worktree, ``--separate-git-dir``): erasure and its proof act on it whole."""
    return common_git_dir(root)


def alternates(root: Path) -> list[str]:
    """Object stores this clone borrows from (``git clone --shared``/``--reference``): objects
    there stay readable whatever a rewrite here drops."""
    path = git_dir(root) / "objects" / "info" / "alternates"
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines()
                if line.strip() and not line.startswith("#")]
    except OSError:
        return []


def commits_moved_by(root: Path, changed: set[str], refs: list[str]) -> set[str]:
    """The commits of ``refs`` that get a new id when ``changed`` are rewritten: those and
    every commit after one of them (a commit's id covers its parents')."""
    if not changed or not refs:
        return set()
    moved: set[str] = set()
    out = run_git(root, "rev-list", "--topo-order", "--reverse", "--parents", *refs)
    for line in out.splitlines():
        commit, *parents = line.split()
        if commit in changed or any(p in moved for p in parents):
            moved.add(commit)
    return moved


def run_git(root: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], input=input, capture_output=True)
    if check and proc.returncode != 0:
        raise GitFailed(f"git {' '.join(args[:3])} failed: {proc.stderr.decode(errors='replace').strip()[:300]}")
    return proc.stdout.decode("utf-8", errors="replace")


# --- reading history ----------------------------------------------------------------------

@dataclass(frozen=True)
class CommitChanges:
    commit: str
    paths: dict[str, str | None]  # path -> blob written there (None: deleted)


def commit_changes(root: Path) -> list[CommitChanges]:
    """Every commit reachable from any ref with the paths it changed (against each parent,
    root commits against nothing). Together these name every (path, blob) in history."""
    out = subprocess.run(["git", "-C", str(root), "log", *HISTORY_REFS, "--raw", "--no-renames", "--root", "-m",
                          "--no-abbrev", "-z", "--format=%x00C %H"], capture_output=True).stdout
    commits: dict[str, dict[str, str | None]] = {}
    current: dict[str, str | None] | None = None
    parts = out.split(b"\0")
    i = 0
    while i < len(parts):
        part = parts[i].strip(b"\n")
        if part.startswith(b"C "):
            current = commits.setdefault(part[2:].decode(), {})
            i += 1
            continue
        if part.startswith(b":") and current is not None and i + 1 < len(parts):
            fields = part[1:].split()
            new_oid = fields[3].decode()
            path = parts[i + 1].decode("utf-8", "surrogateescape")
            if fields[1] != b"160000":
                current[path] = None if new_oid == _ZERO else new_oid
            i += 2
            continue
        i += 1
    return [CommitChanges(c, p) for c, p in commits.items()]


def blobs_at(root: Path, keep) -> set[str]:
    """Every blob id history holds at a path ``keep(path)`` accepts (any ref, any version)."""
    return {oid for change in commit_changes(root) for path, oid in change.paths.items()
            if oid is not None and keep(path)}


def read_blobs(root: Path, oids: list[str]) -> dict[str, bytes]:
    """The contents of many blobs in one `cat-file --batch` stream."""
    if not oids:
        return {}
    proc = subprocess.run(["git", "-C", str(root), "cat-file", "--batch"],
                          input=("\n".join(oids) + "\n").encode(), capture_output=True)
    data = proc.stdout
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) < 3:  # "<oid> missing"
            continue
        size = int(header[2])
        out[header[0].decode()] = data[pos:pos + size]
        pos += size + 1
    return out


def all_objects(root: Path):
    """(oid, type, content) for every object in the repository, reachable or not, loose or packed."""
    # A proof reads every object: one git could not read (a damaged loose object or pack) must
    # stop it with the reason, not crash it on a short header or end it early as if all were read.
    with tempfile.TemporaryFile() as errors, subprocess.Popen(
            ["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch", "--unordered"],
            stdout=subprocess.PIPE, stderr=errors) as proc:
        assert proc.stdout is not None
        stream = proc.stdout
        while True:
            header = stream.readline()
            if not header:
                break
            fields = header.decode(errors="replace").split()
            if len(fields) != 3 or not fields[2].isdigit():
                proc.kill()
                raise GitFailed(f"{root}: git could not read object {' '.join(fields)}: the repository is "
                                "damaged and nothing can be proved about it (`git fsck` lists what)")
            oid, kind, size = fields
            data = stream.read(int(size))
            stream.read(1)
            yield oid, kind, data
        if proc.wait() != 0:
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip().splitlines()
            raise GitFailed(f"{root}: git could not read every object ({said[-1] if said else 'no message'}): "
                            "the repository is damaged and nothing can be proved about it (`git fsck` lists what)")


def reachable_objects(root: Path) -> set[str]:
    """Every object the history's refs reach (commits, trees, blobs; as commit_changes reads them)."""
    out = run_git(root, "rev-list", "--objects", *HISTORY_REFS)
    return {line.split(" ", 1)[0] for line in out.splitlines() if line}


def all_object_ids(root: Path) -> set[str]:
    """Every object in the repository, reachable or not (their ids only)."""
    out = run_git(root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.split())


def reachable_commits(root: Path) -> set[str]:
    return set(run_git(root, "rev-list", "--all", check=False).split())


def tree_paths(root: Path, rev: str, under: tuple[str, ...] = ()) -> dict[str, str]:
    """path -> blob id of every file in ``rev``'s tree (optionally only below ``under``)."""
    out = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "-z", rev, "--", *under],
                         capture_output=True).stdout
    paths = {}
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, path = rec.split(b"\t", 1)
        mode, kind, oid = meta.split()
        if kind == b"blob":
            paths[path.decode("utf-8", "surrogateescape")] = oid.decode()
    return paths


def commit_message(root: Path, rev: str) -> str:
    return run_git(root, "log", "-1", "--format=%B", rev, check=False)


# --- refs ---------------------------------------------------------------------------------

def list_refs(root: Path, prefix: str = "") -> list[tuple[str, str, str]]:
    """(refname, object id, object type) for every ref (below ``prefix``)."""
    args = ["for-each-ref", "--format=%(refname)%00%(objectname)%00%(objecttype)"]
    if prefix:
        args.append(prefix)
    out = []
    for line in run_git(root, *args, check=False).splitlines():
        name, oid, kind = line.split("\0")
        out.append((name, oid, kind))
    return out


def set_ref(root: Path, name: str, oid: str) -> None:
    run_git(root, "update-ref", name, oid)


def delete_ref(root: Path, name: str) -> None:
    run_git(root, "update-ref", "-d", name, check=False)


def peel_to_commit(root: Path, rev: str) -> str | None:
    out = run_git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).strip()
    return out or None


def expire_reflogs(root: Path) -> None:
    """Drop every reflog entry (HEAD's and every ref's): they name old commits."""
    run_git(root, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all", check=False)


def gc_prune(root: Path) -> None:
    """Repack and prune every unreachable object now (reflogs: expire them first). Packs marked
    ``.keep`` are repacked too: a kept pack would keep erased objects."""
    for keep in (git_dir(root) / "objects" / "pack").glob("*.keep"):
        keep.unlink(missing_ok=True)
    run_git(root, "gc", "--prune=now", "--quiet", check=False)


def scrub_git_leftovers(root: Path, needles: list[bytes]) -> list[str]:
    """Copies of erased text git keeps outside objects and refs: recorded conflict resolutions
    (``rr-cache``) are dropped, branch descriptions in the config unset. Returns what went."""
    gone = []
    rr = git_dir(root) / "rr-cache"
    if rr.is_dir():
        for entry in rr.iterdir():
            files = [f for f in entry.iterdir() if f.is_file()] if entry.is_dir() else []
            if any(n in f.read_bytes() for f in files for n in needles):
                shutil.rmtree(entry, ignore_errors=True)
                gone.append(f"rr-cache/{entry.name}")
    listing = subprocess.run(["git", "-C", str(root), "config", "--local", "--list", "-z"],
                             capture_output=True).stdout
    for item in listing.split(b"\0"):
        key, _, value = item.partition(b"\n")
        if key.endswith(b".description") and any(n in value for n in needles):
            run_git(root, "config", "--local", "--unset-all", key.decode(), check=False)
            gone.append(f"config {key.decode()}")
    return gone


# How long the recovery of a killed erasure waits for the git gc it had started.
GC_WAIT_SECONDS = 120.0


def _wait_for_gc(gd: Path, timeout: float) -> None:
    """A killed forget's `git gc` child outlives it and goes on pruning, holding git's locks:
    wait until the process named by gc.pid (on this machine) is gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid_text, _, host = (gd / "gc.pid").read_text(encoding="utf-8", errors="replace").strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return
        if host and host != socket.gethostname():
            return
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return  # a pid file a dead gc left
        except OSError:
            pass  # alive, and not ours to signal
        if time.monotonic() > deadline:
            raise GitFailed(f"{gd}: a git gc (pid {pid}) is still running in this repository; wait for it to "
                            "finish, then run the command again (nothing changed)")
        time.sleep(0.1)


def remove_stale_locks(root: Path) -> list[str]:
    """git lock files and temporary packs a killed rewrite left behind. Call only under the
    repo lock with an erasure journal present: the process that held them is gone (its git gc,
    which may outlive it, is waited for first)."""
    gd = git_dir(root)
    _wait_for_gc(gd, GC_WAIT_SECONDS)
    removed = []
    for pattern in ("*.lock", "refs/**/*.lock", "objects/pack/tmp_*", "objects/**/tmp_obj_*", "logs/**/*.lock"):
        try:
            found = list(gd.glob(pattern))
        except OSError:  # a folder vanished under the walk (a killed forget's git gc, still pruning)
            continue
        for p in found:
            if p.is_file():
                p.unlink(missing_ok=True)
                removed.append(str(p.relative_to(gd)))
    return removed


# --- stash --------------------------------------------------------------------------------

@dataclass(frozen=True)
class StashEntry:
    index: int
    commit: str
    message: str


def stash_entries(root: Path) -> list[StashEntry]:
    out = run_git(root, "stash", "list", "-z", "--format=%H%x1f%gs", check=False)
    entries = []
    for i, rec in enumerate(r for r in out.split("\0") if r):
        commit, _, message = rec.partition("\x1f")
        entries.append(StashEntry(i, commit.strip(), message))
    return entries


def stash_clear(root: Path) -> None:
    run_git(root, "stash", "clear", check=False)


def stash_store(root: Path, commit: str, message: str) -> None:
    run_git(root, "stash", "store", "-m", message, commit)


def stash_changed_paths(root: Path, commit: str) -> list[str]:
    """Paths a stash entry changes against its base (index, work tree and untracked parts)."""
    out = run_git(root, "diff", "--name-only", "-z", f"{commit}^1", commit, check=False)
    paths = [p for p in out.split("\0") if p]
    untracked = peel_to_commit(root, f"{commit}^3")
    if untracked:
        paths += list(tree_paths(root, untracked))
    return paths


# --- worktrees and the work tree ------------------------------------------------------------

@dataclass(frozen=True)
class Worktree:
    path: Path
    head: str | None
    branch: str | None  # None when detached
    locked: bool = False  # `git worktree lock`: its folder may be away (an unmounted disk) and come back


def linked_worktrees(root: Path) -> list[Worktree]:
    """The repository's other worktrees (from a linked one, the main one too). Not the shared
    git directory itself, which git names as the main worktree of a --separate-git-dir
    repository without core.worktree."""
    out = []
    current: dict = {}
    skip = {Path(root).resolve(), git_dir(root).resolve()}
    for line in run_git(root, "worktree", "list", "--porcelain", check=False).splitlines() + [""]:
        if not line:
            if current.get("worktree") and Path(current["worktree"]).resolve() not in skip:
                out.append(Worktree(Path(current["worktree"]), current.get("HEAD"), current.get("branch"),
                                    "locked" in current))
            current = {}
            continue
        key, _, value = line.partition(" ")
        current[key] = value
    return out


def _worktree_admin(root: Path, path: Path) -> Path:
    """The linked worktree's own git directory (.git/worktrees/<id>) by its folder's path."""
    worktrees = git_dir(root) / "worktrees"
    for admin in sorted(worktrees.iterdir()) if worktrees.is_dir() else ():
        try:
            points_at = Path((admin / "gitdir").read_text(encoding="utf-8", errors="replace").strip())
        except OSError:
            continue
        if points_at.parent.resolve() == Path(path).resolve():
            return admin
    raise GitFailed(f"worktree {path}: not found in {worktrees}; it could not be moved off the erased history")


def _git_in(admin: Path, *args: str) -> None:
    proc = subprocess.run(["git", "--git-dir", str(admin), *args], capture_output=True)
    if proc.returncode != 0:
        raise GitFailed(f"worktree {admin.name}: git {args[0]} failed moving it off the erased history: "
                        f"{proc.stderr.decode(errors='replace').strip()[:300]}")


def set_worktree_head(root: Path, path: Path, oid: str) -> None:
    """Point the linked worktree at ``path`` at ``oid`` (detached), through its own git directory
    in .git/worktrees/: that works while its folder is gone or unmounted, where `git -C path`
    failed silently and left it on an erased commit."""
    _git_in(_worktree_admin(root, path), "update-ref", "--no-deref", "HEAD", oid)


def reset_missing_worktree_index(root: Path, path: Path) -> None:
    """A linked worktree whose folder is gone still has its index in .git/worktrees/, and git
    keeps every object an index names: its entries are set to its (rewritten) HEAD's, so the
    erased blobs can be pruned. Its work tree, if it comes back, shows the change."""
    _git_in(_worktree_admin(root, path), "read-tree", "HEAD")


def remove_worktree(root: Path, path: Path) -> None:
    run_git(root, "worktree", "remove", "--force", "--force", str(path), check=False)
    run_git(root, "worktree", "prune", check=False)


def dirty_files(path: Path) -> list[str]:
    """Files of a work tree that differ from its HEAD: modified, staged, untracked or ignored."""
    out = run_git(path, "status", "--porcelain", "-z", "--untracked-files=all", "--ignored", "--no-renames",
                  check=False)
    return [rec[3:] for rec in out.split("\0") if len(rec) > 3]


def untracked_files(root: Path) -> list[str]:
    """Untracked and ignored files of the main work tree (relative paths)."""
    names = run_git(root, "ls-files", "--others", "-z", check=False).split("\0")
    return sorted({n for n in names if n})


def checkout_from_head(root: Path, paths: list[str]) -> None:
    """Bring these work-tree files to HEAD's version (deleting those HEAD no longer has),
    then let the index follow HEAD. Files the rewrite did not touch are left as they are."""
    head_paths = tree_paths(root, "HEAD") if peel_to_commit(root, "HEAD") else {}
    present = [p for p in paths if p in head_paths]
    for p in paths:
        if p not in head_paths:
            full = Path(root) / p
            if full.is_file() or full.is_symlink():
                full.unlink()
                _prune_empty(Path(root), full.parent)
    for i in range(0, len(present), 500):
        run_git(root, "checkout", "HEAD", "--", *present[i:i + 500], check=False)
    run_git(root, "reset", "-q", check=False)


def _prune_empty(root: Path, folder: Path) -> None:
    root = root.resolve()
    folder = folder.resolve()
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


# --- remotes --------------------------------------------------------------------------------

def remotes(root: Path) -> dict[str, str]:
    out = {}
    for name in run_git(root, "remote", check=False).split():
        out[name] = run_git(root, "remote", "get-url", name, check=False).strip()
    return out


def remote_heads(root: Path, remote: str) -> dict[str, str] | None:
    """ref -> commit of every branch on ``remote`` (None if it cannot be reached)."""
    proc = subprocess.run(["git", "-C", str(root), "ls-remote", "--heads", remote], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return {ref: oid for oid, ref in (line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)}


def remote_refs(root: Path, remote: str) -> dict[str, str]:
    """ref -> object of every ref ``remote`` advertises (branches, tags and any other namespace),
    at every URL it fetches from or pushes to (a ref at any of them; the last URL's id wins)."""
    out: dict[str, str] = {}
    for url in remote_urls(root, remote) or [remote]:
        proc = subprocess.run(["git", "-C", str(root), "ls-remote", url], capture_output=True, text=True)
        if proc.returncode != 0:
            continue
        for line in proc.stdout.splitlines():
            oid, _, ref = line.partition("\t")
            if ref and not ref.endswith("^{}") and ref != "HEAD":
                out[ref] = oid
    return out


def remote_urls(root: Path, remote: str) -> list[str]:
    """Every URL ``remote`` fetches from or pushes to (``remote.<name>.pushurl`` may name other
    repositories than the one fresh clones fetch from, and several), as git resolves them."""
    urls = run_git(root, "remote", "get-url", remote, check=False).split("\n")
    urls += run_git(root, "remote", "get-url", "--push", "--all", remote, check=False).split("\n")
    return list(dict.fromkeys(url.strip() for url in urls if url.strip()))


def contains(root: Path, ancestor: str, tip: str) -> bool:
    """``ancestor`` is a commit this clone has, reachable from ``tip``."""
    return subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", ancestor, tip],
                          capture_output=True).returncode == 0


def force_push_all(root: Path, remote: str, leases: dict[str, str] | None = None) -> tuple[bool, str]:
    """Push every branch (pruning the remote's others), tag and notes ref over ``remote``'s history. A
    branch moves only if the remote still has it where ``leases`` says (compare-and-swap:
    a teammate's push in between is never wiped)."""
    args = ["git", "-C", str(root), "push", "--prune", remote, "refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
    # The rewrite scrubbed this clone's git notes too; the remote's notes refs would otherwise
    # keep the erased text reachable for anyone fetching refs/notes/*. Named one by one (not a
    # pattern, so --prune leaves a notes ref only the remote holds: someone else's), and in this
    # same push, whose receipt is what makes a guarded remote prune.
    args += [f"+{ref}:{ref}" for ref in run_git(root, "for-each-ref", "--format=%(refname)", "refs/notes/",
                                                check=False).split()]
    args += [f"--force-with-lease={ref}:{oid}" for ref, oid in (leases or {}).items()]
    proc = subprocess.run(args, capture_output=True, text=True)
    return proc.returncode == 0, proc.stderr.strip()[:200]


# --- git-filter-repo --------------------------------------------------------------------------

def filter_repo(root: Path, refs: list[str], *, file_info=None, commit=None, tag=None) -> None:
    """Rewrite ``refs`` (only those: a partial rewrite, so filter-repo neither drops remotes nor
    gcs; the caller clears and prunes) with git-filter-repo's Python callbacks. Runs in the
    calling process; call it from a process of its own (filter-repo changes directory)."""
    import git_filter_repo as fr

    os.chdir(root)
    state = git_dir(root) / "filter-repo"
    if state.exists():  # a run killed half-way: start again (the rewrite is idempotent)
        import shutil
        shutil.rmtree(state)
    args = fr.FilteringOptions.parse_args(["--force", "--quiet", "--refs", *refs])
    kwargs = {}
    if file_info is not None:
        kwargs["file_info_callback"] = file_info
    if commit is not None:
        kwargs["commit_callback"] = commit
    if tag is not None:
        kwargs["tag_callback"] = tag
    class _KeepWorkTree(fr.RepoFilter):
        # filter-repo ends with `git reset --hard`, which throws away every uncommitted edit
        # in the work tree, erased or not. mdmem checks out only the files the rewrite changed
        # (checkout_from_head) and lets the index follow HEAD, so a person's unrelated edits stay.
        def cleanup(self, repo, repack, reset, run_quietly=False, show_debuginfo=False):
            super().cleanup(repo, repack, False, run_quietly=run_quietly, show_debuginfo=show_debuginfo)

    _KeepWorkTree(args, **kwargs).run()


def filter_repo_in_own_process(root: Path, module: str) -> None:
    """Run ``python -I -m module ROOT`` (which calls :func:`filter_repo`): filter-repo changes the
    working directory and may exit the process, so it gets one of its own. Isolated (-I): with
    the work tree as cwd, plain ``-m`` would import a ``mdmem/`` a teammate committed there
    instead of the installed package; the hooks and housekeeping do the same."""
    import sys
    proc = subprocess.run([sys.executable, "-I", "-m", module, str(root)], capture_output=True, text=True,
                          cwd=str(root))
    if proc.returncode != 0:
        raise GitFailed(f"history rewrite failed: {(proc.stderr or proc.stdout).strip()[-400:]}")


def clear_filter_repo_state(root: Path) -> None:
    import shutil
    shutil.rmtree(git_dir(root) / "filter-repo", ignore_errors=True)


def snapshot_ref(root: Path, ref: str, files: dict[str, bytes], message: str) -> str:
    """Point ``ref`` at one new parentless commit holding ``files`` (its old history becomes
    unreachable). Used for refs filter-repo passes through untouched (refs/notes/*)."""
    import pygit2

    repo = pygit2.Repository(str(root))

    def build(entries: dict[tuple[str, ...], bytes]):
        tb = repo.TreeBuilder()
        groups: dict[str, dict] = {}
        for parts, data in entries.items():
            if len(parts) == 1:
                tb.insert(parts[0], repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
            else:
                groups.setdefault(parts[0], {})[parts[1:]] = data
        for name, sub in groups.items():
            tb.insert(name, build(sub), pygit2.GIT_FILEMODE_TREE)
        return tb.write()

    tree = build({tuple(p.split("/")): d for p, d in files.items()})
    sig = pygit2.Signature("mdmem", "mdmem@localhost")
    oid = repo.create_commit(None, sig, sig, message, tree, [])
    set_ref(root, ref, str(oid))
    return str(oid)


def configured_urls(root: Path, remote: str) -> list[str]:
    """The URLs as the person configured them (``url`` and every ``pushurl``, before any
    ``insteadOf`` rewriting): they name the hosts."""
    found = run_git(root, "config", "--get-all", f"remote.{remote}.url", check=False).split("\n")
    found += run_git(root, "config", "--get-all", f"remote.{remote}.pushurl", check=False).split("\n")
    return list(dict.fromkeys(url.strip() for url in found if url.strip()))


def served_by(root: Path, remote: str, ids: list[str]) -> list[str]:
    """Which of ``ids`` (commits or blobs) ``remote`` still hands out when asked by id, asked as a
    fresh clone would ask (a scratch repository of its own, over git's own transport: no object
    of this clone can answer for the remote)."""
    urls = remote_urls(root, remote)
    if not urls or not ids:
        return []
    scratch = git_dir(root) / "mdmem-remote-check"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        served = []
        for oid in ids:
            # Each URL the push went to or clones fetch from: one still serving it is enough.
            for url in urls:
                # A scratch repository per ask: an object fetched from one URL must not answer for the next.
                shutil.rmtree(scratch, ignore_errors=True)
                subprocess.run(["git", "init", "-q", "--bare", str(scratch)], capture_output=True, check=True)
                # From the clone's folder: a relative URL means what it means to the clone.
                proc = subprocess.run(["git", f"--git-dir={scratch}", "fetch", "-q", "--no-tags", "--depth=1", url,
                                       oid], capture_output=True, text=True, cwd=str(root))
                if proc.returncode == 0:
                    served.append(oid)
                    break
        return served
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
