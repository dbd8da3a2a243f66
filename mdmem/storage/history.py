"""Reading history: the branch tip, trees and blobs at a commit, the log with its trailers, who wrote what."""
from __future__ import annotations

import datetime as _dt
import stat
import threading
import time
from dataclasses import dataclass


import pygit2

from ..errors import Conflict
from .queries import blob_hash, worktree_version
from .objects import REF_READ_TRIES, tree_blob_ids, tree_entry, with_mode
from .trailers import parse_trailers


@dataclass(frozen=True)
class LogEntry:
    commit: str
    time: _dt.datetime
    author: str
    message: str
    blob: str | None  # the path's blob at this commit, None if deleted there
    email: str = ""  # the author's e-mail: who made the commit, as git records it

    @property
    def trailers(self) -> dict[str, str]:
        return parse_trailers(self.message)


class HistoryReading:
    """GitStore's history methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

    # --- reading --------------------------------------------------------------------
    def branch_ref(self) -> str:
        """The branch HEAD names (refs/heads/main). mdmem writes to a branch only: on a
        detached HEAD (someone looking at an old state) every write is refused up front."""
        if self.repo.head_is_detached:
            raise Conflict(f"{self.root}: HEAD is detached (at {str(self.repo.head.target)[:10]}); mdmem writes "
                           "to a branch: check out your branch first (git checkout main)")
        return self.repo.lookup_reference("HEAD").target  # symbolic: refs/heads/main

    def head(self) -> str | None:
        """The branch tip, None before the first commit. git pack-refs moving the ref from
        its loose file into packed-refs can make one read miss it: read again then."""
        for attempt in range(REF_READ_TRIES):
            try:
                return str(self.repo.head.target)
            except pygit2.GitError:
                if self.repo.head_is_unborn:
                    return None
                time.sleep(0.002 * (attempt + 1))
        return str(self.repo.head.target)

    def blob_id(self, path: str, rev: str | None = None) -> str | None:
        commit = (self.repo.revparse_single(rev) if rev else self.repo[self.head()]).peel(pygit2.Commit)
        entry = self._entry(commit.tree, path)
        return str(entry.id) if entry is not None and entry.type_str == "blob" else None  # a folder: none

    def _tree(self, oid: pygit2.Oid) -> pygit2.Tree:
        """The tree ``oid``; read once per write by the thread holding the write lock (trees
        never change under an id: what is kept is only ever reused, and dropped with the lock)."""
        memo = self._trees
        if memo is None or self._holder != threading.get_ident():
            return self.repo[oid]
        tree = memo.get(oid)
        if tree is None:
            tree = memo[oid] = self.repo[oid]
        return tree

    def _entry(self, tree: pygit2.Tree, path: str):
        """The entry at ``path`` under ``tree`` (a file or folder), None if absent; each folder
        on the way through :meth:`_tree`."""
        *folders, base = path.split("/")
        for name in folders:
            entry = tree_entry(tree, name)
            if entry is None or entry.type_str != "tree":
                return None
            tree = self._tree(entry.id)
        return tree_entry(tree, base)

    def blob_ids(self, paths, rev: str | None = None) -> dict[str, str | None]:
        """:meth:`blob_id` for many paths at once, each folder's tree read once. A batch of
        1,000 new notes looked up one by one re-read the big subject folders' trees every
        time (libgit2 caches no tree over 4 KB): ~2 ms a path at 10k notes."""
        head = rev or self.head()
        if head is None:
            return dict.fromkeys(paths)
        return tree_blob_ids(self.repo.revparse_single(head).peel(pygit2.Tree), paths, load=self._tree)

    def file_in(self, rev: str, path: str) -> bytes | None:
        """A file's bytes in the tree of ``rev`` (a commit or a tree id), None if absent."""
        entry = tree_entry(self.repo[rev].peel(pygit2.Tree), path)
        return self.repo[entry.id].data if entry is not None and entry.type_str == "blob" else None

    def is_link_in(self, rev: str, path: str) -> bool:
        """Whether ``path`` in the tree of ``rev`` is a symbolic link (its blob is the target)."""
        entry = tree_entry(self.repo[rev].peel(pygit2.Tree), path)
        return entry is not None and entry.filemode == pygit2.GIT_FILEMODE_LINK

    def folders_in(self, rev: str, folder: str) -> list[str]:
        """Names of the sub-folders of ``folder`` in the tree of ``rev`` (commit or tree id)."""
        entry = tree_entry(self.repo[rev].peel(pygit2.Tree), folder)
        if entry is None or entry.type_str != "tree":
            return []
        return [e.name for e in self.repo[entry.id] if e.type_str == "tree"]

    def read_blob(self, oid: str) -> bytes:
        return self.repo[oid].data

    def read_at(self, path: str, rev: str) -> bytes | None:
        oid = self.blob_id(path, rev)
        return None if oid is None else self.read_blob(oid)

    def worktree_blob_id(self, path: str, expect: str | None = None) -> str | None:
        """The blob id of the regular file at ``path``; None if there is none; a marker that
        matches no blob for a symlink, folder or device (never followed or read). ``expect``:
        the blob it is compared with; a file whose very bytes are that blob is it (a note
        committed with CRLF on every line counted as its LF version, an edit nobody made)."""
        full = self.root / path
        try:
            mode = full.lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(mode):
            return "not-a-file"
        data = full.read_bytes()
        if expect is not None and blob_hash(data) == expect:
            return expect
        return worktree_version(data)

    def last_change(self, rev: str, path: str) -> tuple[str, str] | None:
        """(commit, author e-mail) of the newest commit in ``rev``'s history that changed ``path``
        (git log's history simplification: a merge that took one parent's version is skipped)."""
        out = self.git("log", "-1", "--format=%H%x1f%ae", rev, "--", path, check=False).strip()
        commit, sep, email = out.partition("\x1f")
        return (commit, email) if sep else None

    def parents(self, commit: str) -> list[str]:
        return [str(p) for p in self.repo[commit].parent_ids]

    def writers(self, base: str, tip: str, prefixes: tuple[str, ...]) -> dict[str, list[tuple[str, str, str | None]]]:
        """For the commits in ``tip``'s history that ``base``'s does not hold: path -> [(commit,
        author e-mail, the blob id it wrote or None for a deletion)], newest first (topological
        order). A merge counts only for paths whose version differs from every parent's (git's
        combined diff: what the merge itself made, not what it took). One git call answers for
        every path (a `git log -1` per path: a merge of 1,000 notes took 18-20 s at load ~17)."""
        out = self.git("log", "--topo-order", "-c", "--raw", "--no-abbrev", "--no-renames", "--format=%x1e%H%x1f%ae",
                       f"{base}..{tip}", "--", *prefixes, check=False)
        found: dict[str, list[tuple[str, str, str | None]]] = {}
        for record in out.split("\x1e"):
            lines = record.strip("\n").splitlines()
            if not lines or "\x1f" not in lines[0]:
                continue
            commit, email = lines[0].split("\x1f", 1)
            for line in lines[1:]:
                meta, tab, path = line.partition("\t")
                if not meta.startswith(":") or not tab:
                    continue
                blob = meta.split()[-2]  # the version this commit made: the last id before the status
                found.setdefault(path, []).append((commit, email, None if blob.strip("0") == "" else blob))
        return found

    def log(self, path: str | None = None, rev: str = "HEAD") -> list[LogEntry]:
        """Commits touching ``path`` newest first, with the path's blob at each."""
        if rev == "HEAD" and self.head() is None:
            return []  # no commit yet: no history (git log would fail)
        fmt = "%H%x1f%at%x1f%an%x1f%ae%x1f%B%x1e"
        # --full-history: a merge that kept one side's version must not hide the other
        # side's (sync keeps the superseded version of a conflicting pair in history).
        args = ["log", "--full-history", f"--format={fmt}", rev]
        if path:
            args += ["--", path]
        out = self.git(*args)  # a failing git is GitFailed, never "no history"
        entries = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, ts, author, email, message = record.split("\x1f", 4)
            when = _dt.datetime.fromtimestamp(int(ts), _dt.timezone.utc)
            blob = self.blob_id(path, sha) if path else None
            entries.append(LogEntry(sha, when, author, message.strip(), blob, email))
        return entries

    def changes_by_commit(self, rev: str, since: str | None = None, prefixes: tuple[str, ...] = ("team", "private"),
                          ) -> list[tuple[str, str, list[tuple[str, str]], list[str]]]:
        """(commit, author e-mail, [(status, path)], its parents) for each commit on
        ``rev``'s first-parent line after ``since`` (all of history without it), oldest first.
        Merges count as changes against their first parent (what the merge made current here;
        verify asks who wrote each such version)."""
        rng = f"{since}..{rev}" if since else rev
        out = self.git("log", "--first-parent", "-m", "--reverse", "--no-renames", "--name-status",
                       "--format=%x1e%H%x1f%ae%x1f%P", rng, "--", *prefixes, check=False)
        result = []
        for record in out.split("\x1e"):
            lines = record.strip("\n").splitlines()
            if not lines:
                continue
            commit, email, parents = lines[0].split("\x1f", 2)
            files = []
            for line in lines[1:]:
                status, _, path = line.partition("\t")
                if path:
                    files.append((status[:1], path))
            result.append((commit, email, files, parents.split()))
        return result

    def is_ancestor(self, older: str, newer: str) -> bool:
        """False also when either commit is gone (an erasure in another process rewrote
        history; this handle may still list the pruned objects until they are read)."""
        try:
            if older not in self.repo or newer not in self.repo:
                return False
            return older == newer or self.repo.descendant_of(newer, older)
        except pygit2.GitError:
            return False

    def branches(self, prefix: str) -> list[str]:
        return sorted(name for name in self.repo.branches.local if name.startswith(prefix))

    def tree_changes(self, old: str | None, new: str) -> dict[str, bytes | None]:
        """path -> bytes (None: deleted) taking the tree of ``old`` to that of ``new``
        (commit or tree ids)."""
        new_tree = self.repo[new].peel(pygit2.Tree)
        old_tree = self.repo[old].peel(pygit2.Tree) if old else None
        diff = self.repo.diff(old_tree, new_tree) if old_tree is not None else new_tree.diff_to_tree(swap=True)
        out: dict[str, bytes | None] = {}
        for delta in diff.deltas:
            if delta.status_char() == "D":
                out[delta.old_file.path] = None
            else:
                if delta.old_file.path != delta.new_file.path:
                    out[delta.old_file.path] = None
                out[delta.new_file.path] = with_mode(self.repo[delta.new_file.id].data, delta.new_file.mode)
        return out
