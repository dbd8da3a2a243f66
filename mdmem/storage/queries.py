"""Named git operations for the layers above storage/ (the one seam to git).

Everything above storage/ asks a store object these questions instead of running git or
reaching into pygit2: so a scope root can later be a repository of its own, and git's
failures become :class:`mdmem.errors.GitFailed` in one place. ``GitStore`` mixes this in;
the methods rely only on its ``repo`` (pygit2), ``root`` and ``git()``.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from ..errors import GitFailed
from ..model.layout import is_note_path
from .gitdir import cache_dir
from .objects import tree_entry

NOTE_PREFIXES = ("team", "private")


def blob_hash(data: bytes) -> str:
    """The git blob id ``data`` would have (a note's version), without writing anything."""
    return str(pygit2.hash(data))


def worktree_version(data: bytes) -> str:
    """The version of a work-tree file: the blob git would store for it. Line endings that
    git converts on checkout (core.autocrlf, ``eol=crlf``) are not edits: a file whose every
    line ends in CRLF counts as its LF blob. A file with a bare LF was not converted (git
    converts every line, and leaves a blob that holds CRs as it is), so its bytes are its
    version: a note whose text was stored with CRs below mdmem's LF frontmatter (as mdmem
    wrote them before it made text LF) is unchanged, not a hand edit."""
    if b"\r\n" in data and data.count(b"\n") == data.count(b"\r\n"):
        return blob_hash(data.replace(b"\r\n", b"\n"))
    return blob_hash(data)


def git_user_email(cwd: str | Path, env: dict[str, str]) -> str | None:
    """The e-mail a person's own `git commit` would carry from ``cwd`` (git's user.email, as
    their config and ``env`` -- the caller's environment, passed in -- say), or None."""
    proc = subprocess.run(["git", "config", "--get", "user.email"], capture_output=True, text=True,
                          cwd=str(cwd), env=dict(env))
    email = proc.stdout.strip()
    return email if proc.returncode == 0 and "@" in email else None


def is_ancestor_at(path: str | Path, ancestor: str, tip: str) -> bool:
    """In a repository that is not a memory repo's store: ``ancestor`` is in ``tip``'s history."""
    return subprocess.run(["git", "-C", str(path), "merge-base", "--is-ancestor", ancestor, tip],
                          capture_output=True).returncode == 0


def merge_base_at(path: str | Path, one: str, other: str) -> str | None:
    """In a repository that is not a memory repo's store: the best common ancestor, or None."""
    return run_git_at(path, "merge-base", one, other, check=False).strip() or None


def run_git_at(path: str | Path, *args: str, check: bool = True) -> str:
    """git in a repository that is not a memory repo's store (a bare remote the guard protects)."""
    proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitFailed(f"{path}: git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def note_blobs_only_in_at(path: str | Path, rev: str, exclude: str) -> set[str]:
    """The note versions (blob ids at note paths) ``rev``'s history holds and ``exclude``'s does
    not, in the repository at ``path`` (a clone or a bare remote). A true set difference: `rev-list
    --objects A ^B` alone is none when A and B share no commit (a rewritten history): it stops
    walking B early and lists blobs B still holds (a team note the rewrite kept as it was), which
    would then be taken for erased."""
    listing = run_git_at(path, "rev-list", "--objects", "--filter=object:type=blob", rev, f"^{exclude}", check=False)
    found = {oid for oid, _, name in (line.partition(" ") for line in listing.splitlines())
             if name and is_note_path(name)}
    if not found:
        return found
    kept = {line.split(" ", 1)[0] for line in run_git_at(path, "rev-list", "--objects", exclude,
                                                          check=False).splitlines()}
    return found - kept


def changed_paths_at(path: str | Path, old: str, new: str) -> set[str]:
    """The paths whose content differs between commits ``old`` and ``new`` (either side), read
    by git's CLI: in a pre-receive hook the pushed objects are in git's quarantine, which
    libgit2 does not read."""
    out = run_git_at(path, "diff-tree", "-r", "-z", "--name-only", "--no-renames", old, new)
    return {name for name in out.split("\0") if name}


def files_at(path: str | Path, rev: str, folders: list[str]) -> dict[str, str]:
    """path -> blob id of every file under ``folders`` in ``rev``'s tree (git's CLI, as above)."""
    if not folders:
        return {}
    out = run_git_at(path, "ls-tree", "-r", "-z", "--full-tree", rev, "--",
                     *(f":(literal){folder}" for folder in folders))
    found = {}
    for line in out.split("\0"):
        meta, _, name = line.partition("\t")
        parts = meta.split()
        if name and len(parts) == 3 and parts[1] == "blob":
            found[name] = parts[2]
    return found


def folders_at(path: str | Path, rev: str, folder: str) -> list[str]:
    """The names of the folders directly under ``folder`` in ``rev``'s tree (git's CLI, as above)."""
    out = run_git_at(path, "ls-tree", "-z", "-d", "--full-tree", rev, "--", f":(literal){folder}/", check=False)
    return sorted(line.partition("\t")[2].rsplit("/", 1)[-1] for line in out.split("\0") if "\t" in line)


def blobs_at(path: str | Path, oids: list[str]) -> dict[str, bytes]:
    """The contents of blobs ``oids`` (one `git cat-file --batch`; git's CLI, as above)."""
    if not oids:
        return {}
    unique = list(dict.fromkeys(oids))
    proc = subprocess.run(["git", "-C", str(path), "cat-file", "--batch"],
                          input="".join(o + "\n" for o in unique).encode(), capture_output=True)
    if proc.returncode != 0:
        raise GitFailed(f"{path}: git cat-file --batch failed: {proc.stderr.decode(errors='replace').strip()}")
    out, data, at = {}, proc.stdout, 0
    for oid in unique:
        end = data.index(b"\n", at)
        header = data[at:end].split()
        if len(header) != 3:  # "<oid> missing"
            raise GitFailed(f"{path}: blob {oid} is missing")
        size = int(header[2])
        out[oid] = data[end + 1:end + 1 + size]
        at = end + 1 + size + 1
    return out


@dataclass(frozen=True)
class BranchCommit:
    """A branch's tip: its commit, message, and the note paths it changed against its parent
    (with each one's blob there)."""

    commit: str
    message: str
    author_email: str
    notes: dict[str, str]


@dataclass(frozen=True)
class TreeChange:
    """A note path that changed between two commits; ``blob`` None where it was deleted."""

    path: str
    blob: str | None
    added: bool  # new at this path (added, renamed or copied here)


class GitQueries:
    """Mixed into :class:`~mdmem.storage.gitstore.GitStore`."""

    repo: pygit2.Repository
    root: Path

    if TYPE_CHECKING:  # provided by GitStore, which this class is mixed into
        def git(self, *args: str, input: bytes | None = None, check: bool = True, flush: bool | None = None) -> str: ...

        def head(self) -> str | None: ...

        def blob_ids(self, paths, rev: str | None = None) -> dict[str, str | None]: ...

        def flush_index(self) -> None: ...

    # --- objects and refs ---------------------------------------------------------------
    @property
    def hooks_dir(self) -> Path:
        return Path(self.repo.path) / "hooks"

    def has_object(self, oid: str | None) -> bool:
        return bool(oid) and oid in self.repo

    def create_branch(self, name: str, target: str) -> None:
        """A new branch ``refs/heads/<name>`` at ``target`` (refuses to move an existing one)."""
        try:
            self.repo.references.create(f"refs/heads/{name}", target)
        except (pygit2.GitError, ValueError) as exc:
            raise GitFailed(f"{self.root}: cannot create branch {name} ({exc})") from None

    def branch_commit(self, name: str) -> BranchCommit | None:
        """The tip of local branch ``name`` and the note files it changed; None if no branch."""
        branch = self.repo.branches.local.get(name)
        if branch is None:
            return None
        commit = self.repo[branch.target]
        notes: dict[str, str] = {}
        if commit.parents:
            diff = self.repo.diff(commit.parents[0].tree, commit.tree)
            for delta in diff.deltas:
                path = delta.new_file.path
                if is_note_path(path) and delta.status != pygit2.GIT_DELTA_DELETED:
                    notes[path] = str(delta.new_file.id)
        return BranchCommit(str(commit.id), commit.message, commit.author.email, notes)

    # --- trees ------------------------------------------------------------------------
    def tracked_note_paths(self, rev: str | None = None) -> list[str]:
        """Every note path in ``rev``'s tree (HEAD by default); none before the first commit."""
        rev = rev or self.head()
        if rev is None:
            return []
        out = self.git("ls-tree", "-r", "--name-only", rev, "--", *NOTE_PREFIXES)
        return [p for p in out.splitlines() if is_note_path(p)]

    def misplaced(self, rev: str) -> list[tuple[str, str]]:
        """(path, what it should be) where ``rev``'s tree (a commit or a tree) has a file where
        the layout needs a folder (``team``, ``private``, a scope root) or a folder where it
        needs a file (a root's ``MEMORY.md``). A plain-git commit can make either."""
        out: list[tuple[str, str]] = []
        tree = self.repo[rev].peel(pygit2.Tree)
        for scope in NOTE_PREFIXES:
            folder = tree_entry(tree, scope)
            if folder is None:
                continue
            if folder.type_str != "tree":
                out.append((scope, "a folder"))
                continue
            for entry in self.repo[folder.id]:
                root = f"{scope}/{entry.name}"
                if entry.type_str != "tree":
                    out.append((root, "a folder (a scope root)"))
                    continue
                view = tree_entry(self.repo[entry.id], "MEMORY.md")
                if view is not None and view.type_str != "blob":
                    out.append((f"{root}/MEMORY.md", "a file (the root's view)"))
        return out

    def note_blobs(self, rev: str, under: str) -> dict[str, str]:
        """Note path -> blob id for every note below folder ``under`` in ``rev``'s tree (none
        when ``under`` is not a folder there)."""
        out: dict[str, str] = {}
        tree = tree_entry(self.repo[rev].peel(pygit2.Tree), under)  # a commit's tree, or a tree (a hook's staged one)
        if tree is None or tree.type_str != "tree":
            return out
        stack: list[tuple[Any, str]] = [(self.repo[tree.id], under)]
        while stack:
            t, prefix = stack.pop()
            for entry in t:
                path = f"{prefix}/{entry.name}"
                if entry.type_str == "tree":
                    stack.append((self.repo[entry.id], path))
                elif is_note_path(path):
                    out[path] = str(entry.id)
        return out

    def note_changes(self, old: str | None, new: str, *, renames: bool = False,
                     under: str | None = None) -> list[TreeChange]:
        """Note paths that differ between commits ``old`` (None: the empty tree) and ``new``.
        A rename shows as its old path (deleted) and its new path (added). ``under``: only
        the folder at that path (a root): its two trees are diffed, not the whole ones (a
        root's view moved on by 8 commits diffed the whole tree, ~14 ms at 100k notes)."""
        new_tree = self._subtree(self.repo[new].peel(pygit2.Tree), under)  # commits or trees
        old_tree = self._subtree(self.repo[old].peel(pygit2.Tree), under) if old else None
        if new_tree is not None:
            diff = self.repo.diff(old_tree, new_tree) if old_tree is not None else new_tree.diff_to_tree(swap=True)
        elif old_tree is not None:
            diff = old_tree.diff_to_tree()  # the folder is gone: all of it deleted
        else:
            return []
        if renames:
            diff.find_similar()
        prefix = f"{under}/" if under else ""
        out: dict[str, TreeChange] = {}
        for delta in diff.deltas:
            old_path, new_path = prefix + delta.old_file.path, prefix + delta.new_file.path
            deleted = delta.status == pygit2.GIT_DELTA_DELETED
            if deleted or delta.status == pygit2.GIT_DELTA_RENAMED:
                out.setdefault(old_path, TreeChange(old_path, None, False))
            if not deleted:
                added = delta.status in (pygit2.GIT_DELTA_ADDED, pygit2.GIT_DELTA_RENAMED, pygit2.GIT_DELTA_COPIED)
                out[new_path] = TreeChange(new_path, str(delta.new_file.id), added)
        return [c for c in out.values() if is_note_path(c.path)]

    def _subtree(self, tree, under: str | None):
        """``tree``'s folder at ``under`` (the tree itself without one); None if there is none."""
        if not under:
            return tree
        found = tree_entry(tree, under)
        return self.repo[found.id] if found is not None and found.type_str == "tree" else None

    def commits_with_note_paths(self, revs: str) -> list[tuple[str, int, list[str]]]:
        """(commit, commit time, note paths it touched) for the commits ``revs``, oldest first."""
        out = self.git("log", "--reverse", "--format=%x1e%H %ct", "--name-only", "--no-renames", revs, "--",
                       *NOTE_PREFIXES)
        result = []
        for record in out.split("\x1e"):
            lines = [line for line in record.strip().splitlines() if line.strip()]
            if lines:
                sha, ct = lines[0].split()
                result.append((sha, int(ct), [p for p in lines[1:] if is_note_path(p)]))
        return result

    def dirty_note_paths(self) -> dict[str, str]:
        """Note files whose work-tree content differs from HEAD: path -> blob id or "deleted".

        git's status compares the work tree with git's index, which may lag HEAD (this
        process's commits whose entries are deferred, another's not flushed yet): a file whose
        content is HEAD's is not dirty. The deferred entries used to be flushed first, which
        took the write lock under the search index's lock: a reader then waited for a forget
        that waited for the index lock (a deadlock of two lock timeouts), and a
        recall paid for the rewrite of git's index (~90 ms at 100k notes)."""
        self.refresh_stat_if_moved()
        out: dict[str, str] = {}
        for path, flags in self.repo.status(untracked_files="all").items():
            if not is_note_path(path) or flags == pygit2.GIT_STATUS_IGNORED:
                continue
            full = self.root / path
            out[path] = blob_hash(full.read_bytes()) if full.exists() else "deleted"
        committed = self.blob_ids(out) if out else {}
        return {path: version for path, version in out.items() if version != (committed[path] or "deleted")}

    def refresh_stat_if_moved(self) -> None:
        """git's index keeps each file's stat data (inode, ctime, ...) to know an unchanged file
        without reading it. In a copied or restored repository every inode is new: libgit2's
        status then hashes every note on every call and never writes the index back (10k
        notes: ~0.6 s more per CLI call, measured). So when the work tree's folder is not the
        one it was (device and inode), git refreshes the stat data once: `update-index
        --refresh` records files whose content equals the index, stages nothing."""
        marker = cache_dir(self.root) / "worktree-id"
        st = os.stat(self.root)
        here = f"{st.st_dev} {st.st_ino}\n"
        try:
            if marker.read_text() == here:
                return
        except OSError:
            pass
        try:
            # Not flushed first: it refreshes the stat data of entries whatever they hold, and a
            # reader (under the search index's lock) must not wait for the write lock.
            self.git("update-index", "-q", "--refresh", flush=False)
        except GitFailed:
            return  # git's index locked (a write in progress): tried again next time
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(here)
        except OSError:
            pass  # read-only: refreshed again next time

    # --- search through history -------------------------------------------------------------
    def paths_ever_containing(self, text: str) -> list[str]:
        """Paths (of any commit on any ref) whose content ever added or removed ``text``."""
        out = self.git("log", "--all", "--format=", "--name-only", "-S", text, check=False)
        return sorted({p for p in out.splitlines() if p})

    def paths_containing(self, text: str) -> list[str]:
        """Tracked work-tree files containing ``text`` (fixed string)."""
        out = self.git("grep", "-l", "-F", text, check=False)
        return sorted({p for p in out.splitlines() if p})

    # --- remotes ------------------------------------------------------------------------
    def remotes(self) -> list[str]:
        return self.git("remote", check=False).split()

    def fetch(self, remote: str) -> None:
        self.git("fetch", "--prune", remote)

    def show_file(self, rev: str, path: str) -> str:
        """The text of ``path`` at ``rev``; "" when either does not exist."""
        return self.git("show", f"{rev}:{path}", check=False)

    def commit_ids(self, rev: str = "--all", *, exclude: str | None = None) -> set[str]:
        """The commits ``rev`` reaches, less those ``exclude`` reaches."""
        return set(self.git("rev-list", rev, *([f"^{exclude}"] if exclude else []), check=False).split())

    def merge_base(self, a: str, b: str) -> str:
        return self.git("merge-base", a, b, check=False).strip()

    def author_email_of(self, commit: str) -> str:
        return self.repo[commit].peel(pygit2.Commit).author.email

    def message_of(self, commit: str) -> str:
        return self.repo[commit].peel(pygit2.Commit).message

    def subject_of(self, commit: str) -> str:
        """A commit message's first line."""
        message = self.repo[commit].peel(pygit2.Commit).message
        return message.splitlines()[0] if message.strip() else ""

    def rev_parse(self, rev: str) -> str:
        return self.git("rev-parse", rev).strip()

    def push(self, remote: str, refspec: str) -> None:
        self.git("push", remote, refspec)

    def config_value(self, key: str) -> str:
        """git config ``key`` as git would resolve it here (repo, user, system); "" if unset."""
        return self.git("config", key, check=False).strip()
