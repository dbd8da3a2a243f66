"""Writing commits: edited trees from the branch tip, the commit, the branch moved by compare-and-swap."""
from __future__ import annotations

import datetime as _dt
import time


import pygit2

from ..errors import BranchMoved, LockTimeout
from .objects import REF_READ_TRIES, mode_of, tree_entry
from .signatures import COMMITTER, signature


# A ref update that finds the ref locked (git pack-refs, gc, a person's git) retries this long.
REF_LOCK_RETRY_SECONDS = 10.0


_OBJECT_WRITE_TRIES = 5


class CommitWriting:
    """GitStore's commits methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

    # --- writing --------------------------------------------------------------------
    def _edit_tree(self, tree: pygit2.Tree | None,
                   edits: dict[tuple[str, ...], tuple[pygit2.Oid, int] | None]) -> pygit2.Oid | None:
        """A copy of ``tree`` with each path set to its (blob, mode) (or removed), every changed
        tree written once; None if the tree ends up empty."""
        builder = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        groups: dict[str, dict[tuple[str, ...], tuple[pygit2.Oid, int] | None]] = {}
        for parts, blob in edits.items():
            name = parts[0]
            if len(parts) == 1:
                if blob is None:
                    if tree is not None and tree_entry(tree, name) is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, *blob)
            else:
                groups.setdefault(name, {})[parts[1:]] = blob
        for name, sub_edits in groups.items():
            existing = tree_entry(tree, name) if tree is not None else None
            sub = self._tree(existing.id) if existing is not None and existing.type_str == "tree" else None
            new_sub = self._edit_tree(sub, sub_edits)
            if new_sub is None:
                if existing is not None:
                    builder.remove(name)
            else:
                builder.insert(name, new_sub, pygit2.GIT_FILEMODE_TREE)
        if len(builder) == 0:
            return None
        return builder.write()

    def _tree_with(self, base: pygit2.Tree | None, changes: dict[str, bytes | None]) -> pygit2.Oid:
        edits = {tuple(path.split("/")): ((self.repo.create_blob(data), mode_of(data)) if data is not None else None)
                 for path, data in changes.items()}
        oid = self._edit_tree(base, edits)
        return oid if oid is not None else self.repo.TreeBuilder().write()

    def commit(self, changes: dict[str, bytes | None], message: str, *, actor: str,
               when: _dt.datetime, branch: str | None = None, worktree: bool = True,
               author: tuple[str, str] | None = None, merge_parent: str | None = None,
               expect_tip: str | None = None) -> str:
        """One commit of ``changes`` (path -> bytes, or None to delete) on ``branch``.

        The author is ``author`` (name, email) when given (a person's own git identity),
        else the acting user's identity from ``[people]``. ``merge_parent`` makes it a merge
        commit (its tree is still the tip's tree with ``changes``); ``expect_tip`` refuses
        (BranchMoved) unless the branch is still there.

        Call under :meth:`locked`. The branch moves by compare-and-swap; if it moved
        since we read its tip, :class:`BranchMoved` is raised and nothing was changed.
        """
        ref_name = branch or self.branch_ref()
        ref = self._lookup_ref(ref_name)
        parent = self.repo[ref.target] if ref is not None else None
        if expect_tip is not None and (parent is None or str(parent.id) != expect_tip):
            raise BranchMoved(f"{ref_name} moved since {expect_tip[:10]}; nothing was written")
        author_sig = signature(*(author or self.identity(actor)), when)
        committer = signature(*COMMITTER, when)
        for attempt in range(_OBJECT_WRITE_TRIES):
            try:
                tree = self._tree_with(parent.tree if parent is not None else None, changes)
                parents = [parent.id] if parent is not None else []
                if merge_parent is not None:
                    parents.append(pygit2.Oid(hex=merge_parent))
                if self.signing_key:
                    oid = self.signed_commit(author_sig, committer, message, tree, parents)
                else:
                    oid = self.repo.create_commit(None, author_sig, committer, message, tree, parents)
                break
            except OSError:
                # A person's `git gc` (prune-packed) removes an empty objects/xx folder
                # between libgit2 making it and renaming an object into it: write again.
                if attempt == _OBJECT_WRITE_TRIES - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        to_worktree = worktree and ref_name == self.branch_ref()
        if to_worktree:
            self._journal(changes, parent)
        self._move_ref(ref, ref_name, oid, message)
        # The branch has moved: the write is acknowledged. Nothing below may raise; what
        # fails here stays in the journal and is repaired before the next write or open.
        if to_worktree:
            try:
                if self.index_delay is None:
                    self._sync_worktree(changes)
                    self._unjournal(changes)  # another process's deferred entries stay listed
                else:
                    self._write_files(changes)
            except Exception as exc:  # noqa: BLE001 -- anything: the commit stands
                self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return str(oid)

    def _write_files(self, changes: dict[str, bytes | None]) -> None:
        """The work tree now; git's index entries later (flush_index), the journal keeping them."""
        folders: set[str] = set()
        for path, data in changes.items():
            self._write_file(path, data, folders)
            self._index_due.add(path)
        if self._index_timer is None:
            self._flush_failures = 0
            self._arm_flush(self.flush_delay())

    def _lookup_ref(self, name: str):
        """The reference, or None if it does not exist (read again if pack-refs hid it)."""
        for attempt in range(REF_READ_TRIES):
            try:
                return self.repo.lookup_reference(name)
            except (KeyError, pygit2.GitError):
                if name != self.branch_ref() and name not in self.repo.references:
                    return None
                if name == self.branch_ref() and self.repo.head_is_unborn:
                    return None
                time.sleep(0.002 * (attempt + 1))
        return self.repo.lookup_reference(name)

    def _move_ref(self, ref, ref_name: str, oid, message: str) -> None:
        """Compare-and-swap the branch to ``oid``. A ref locked by someone else (pack-refs,
        gc, a person's git) is waited for, and a dead writer's lock recovered; a ref that
        moved raises BranchMoved (nothing was written)."""
        deadline = time.monotonic() + REF_LOCK_RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                if ref is None:
                    self.repo.references.create(ref_name, oid)
                else:
                    ref.set_target(oid, f"mdmem: {message.splitlines()[0]}")
                return
            except OSError as exc:  # libgit2: "failed to lock file ... for writing"
                if time.monotonic() > deadline:
                    raise LockTimeout(f"{ref_name}: locked by another git process for "
                                   f"{REF_LOCK_RETRY_SECONDS:.0f}s; nothing was written ({exc})") from None
                self.recover_stale_locks()
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            except (pygit2.GitError, ValueError) as exc:
                raise BranchMoved(f"{ref_name} moved while writing; nothing was written ({exc})") from None

    def fast_forward(self, target: str, *, expect_tip: str, why: str = "fast-forward") -> dict[str, bytes | None]:
        """Move the branch from ``expect_tip`` to ``target`` (compare-and-swap; its descendant, or
        with ``why`` another history that replaces it) and bring the changed paths of the work
        tree and index along. Returns the changes."""
        ref_name = self.branch_ref()
        ref = self._lookup_ref(ref_name)
        if ref is None or str(ref.target) != expect_tip:
            raise BranchMoved(f"{ref_name} moved since {expect_tip[:10]}; nothing was changed")
        changes = self.tree_changes(expect_tip, target)
        self._journal(changes, self.repo[expect_tip].peel(pygit2.Commit))
        self._move_ref(ref, ref_name, pygit2.Oid(hex=target), f"{why} to {target[:10]}")
        try:
            self._sync_worktree(changes)
            self._unjournal(changes)
        except Exception as exc:  # noqa: BLE001 -- the branch moved; repair finishes the work tree
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return changes

    def amend_head(self, changes: dict[str, bytes | None], reflog: str) -> str:
        """Replace the branch tip by a commit with the same parents, authors and message and
        ``changes`` applied (a merge commit whose views must be regenerated). Call under
        :meth:`locked`; the branch moves by compare-and-swap like :meth:`commit`."""
        ref_name = self.branch_ref()
        ref = self._lookup_ref(ref_name)
        head = self.repo[ref.target].peel(pygit2.Commit)
        tree = self._tree_with(head.tree, changes)
        oid = self.repo.create_commit(None, head.author, head.committer, head.message, tree, head.parent_ids)
        self._journal(changes, head)
        self._move_ref(ref, ref_name, oid, reflog)
        try:
            self._sync_worktree(changes)
            self._unjournal(changes)
        except Exception as exc:  # noqa: BLE001 -- the commit stands; repair finishes the work tree
            self.last_repair_error = f"{type(exc).__name__}: {exc}"
        return str(oid)

    def delete_branch(self, name: str) -> None:
        branch = self.repo.branches.local.get(name)
        if branch is not None:
            branch.delete()
