"""Attack 15: the erasure's per-worktree write locks (commit e3b2753, GitStore.locked_with_worktrees).

Real processes, real git, real `git worktree add`. Each test failed on e3b2753; its docstring
says what broke, why it matters and where. Fixed by the erasure gate (gitdir.erasure_lock_path:
every writer holds it shared, an erasure alone; no list of worktrees to miss one or follow a
link), the linked-worktree refusal before any lock (erasure/forget.require_main_worktree), and
GitStore.follow_erasures (a process seeing another's erasure end opens the repository anew and
drops its views' and trust's state)."""
import os
import subprocess
import sys
import time

import pytest
from conftest import git, hold_write_lock, start_python, stop, T1

from mdmem import MemoryRepo
from mdmem.errors import Conflict
from mdmem.storage import locking



def _add_worktree_later_and_hold(repo, wt2, delay: float, seconds: float) -> subprocess.Popen:
    """After ``delay``: `git worktree add` a new worktree, open it and hold its write lock."""
    return start_python(f"""
        import subprocess, time
        time.sleep({delay})
        subprocess.run(["git", "-C", {str(repo.root)!r}, "worktree", "add", "-q", {str(wt2)!r}, "-b", "side2"],
                       check=True)
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(wt2)!r}, finish_erasure=False)
        with r.store.locked():
            print("held", time.time(), flush=True)
            time.sleep({seconds})
            print("released", time.time(), flush=True)
    """)


# --- D1: the worktree list is read once, before waiting ----------------------------------------------

def test_a_worktree_added_while_forget_waits_is_not_locked(with_worktree, monkeypatch, tmp_path):
    """D1. forget waits for a write in progress in worktree `wt`; meanwhile `git worktree add wt2`
    and a process there starts a write (holds wt2's write lock, as every write does). When `wt`'s
    writer lets go, forget goes on and rewrites + prunes the history *while wt2's writer is
    mid-write*: the exclusion the change promises does not hold for wt2.

    Cause: GitStore.locked_with_worktrees (mdmem/storage/gitstore.py:241) iterates
    gitdir.worktree_locks_dirs(self.root) (gitdir.py:67-74), a list read once before the first
    wait; a worktree made during the wait (up to LOCK_TIMEOUT_SECONDS = 60 s) is never locked. The
    list must be read again once every lock is held (until no new worktree appears).
    Expected: wt2's write never overlaps the erasure. With the erasure gate and its turnstile,
    the erasure (waiting for wt's writer) holds the turnstile, so wt2's writer waits there and
    writes only once the erasure has ended."""
    repo, wt = with_worktree
    wt2 = tmp_path / "wt2"
    monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 8.0)
    holder = hold_write_lock(wt, 3.0)  # a write in progress in wt: forget waits ~3 s for it
    late = _add_worktree_later_and_hold(repo, wt2, delay=1.0, seconds=30)  # wt2 appears during that wait
    try:
        repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
        ended = time.time()
        first = late.stdout.readline().split()
        assert first and first[0] == "held", late.stderr.read()
    finally:
        stop(holder, late)
    assert float(first[1]) >= ended - 0.05, "wt2's writer held its lock while the erasure ran"
    assert "XYZZY" not in git(repo.root, "log", "-p", "--all").stdout


def test_writes_in_a_worktree_added_while_forget_waits_corrupt_the_repository(with_worktree, monkeypatch, tmp_path):
    """D1, the damage. Same race as above with a real writer: a worktree added while forget waits
    for `wt`'s writer, and an agent there remembering notes in a loop (each acknowledged).
    Observed on e3b2753 (every run): either `git gc --prune=now` deletes a commit the writer had just
    written, its branch then points at a missing object (`git fsck`: "refs/heads/side2: invalid sha1
    pointer", `git log --all` fatal, every later write in wt2 a raw KeyError, acknowledged notes gone),
    or git-filter-repo fails half way ("cannot lock ref refs/heads/side2: is at X but expected Y")
    and leaves an erasure journal that every later command trips on.
    Cause: gitstore.py:241 (worktree_locks_dirs read once, before waiting), as above."""
    repo, wt = with_worktree
    wt2 = tmp_path / "wt2"
    holder = hold_write_lock(wt, 2.0)
    writer = start_python(f"""
        import subprocess, time
        time.sleep(0.7)
        subprocess.run(["git", "-C", {str(repo.root)!r}, "worktree", "add", "-q", {str(wt2)!r}, "-b", "side2"],
                       check=True)
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(wt2)!r}, finish_erasure=False)
        t, i = time.monotonic(), 0
        while time.monotonic() - t < 6:
            try:
                r.remember(f"Writer fact {{i}} says hello", as_user="bob", kind="fact", subject="service:billing",
                           key=f"w{{i}}", scope="team", team="payments", new_key=True)
                print("ok", i, flush=True)
            except Exception as e:
                print("err", i, type(e).__name__, str(e).replace(chr(10), " "), flush=True)
            i += 1
            time.sleep(0.01)
    """)
    error = None
    try:
        try:
            repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"
        out, err = writer.communicate(timeout=120)
    finally:
        stop(holder, writer)
    acked = [line.split()[1] for line in out.splitlines() if line.startswith("ok ")]
    failures = [line for line in out.splitlines() if line.startswith("err ")]
    fsck = git(repo.root, "fsck", check=False)
    tree = git(repo.root, "ls-tree", "-r", "--name-only", "side2", check=False).stdout
    lost = [k for k in acked if f"fact/w{k}.md" not in tree]
    assert error is None, f"forget failed half way: {error}"
    assert fsck.returncode == 0, fsck.stderr[:600]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes in wt2 lost"
    assert not failures, failures[:3]


# --- D2: a forget from a linked worktree takes every lock before it refuses ----------------------

def test_forget_from_a_linked_worktree_refuses_at_once_not_after_the_main_writers(with_worktree, monkeypatch):
    """D2. `forget` run in a linked worktree must be refused ("run the erasure in the main
    worktree"). It is, but only after it has taken its own worktree's write lock and then waited
    for the main worktree's: with a writer busy in the main worktree it sits there (up to 60 s,
    measured 20 s with a 20 s writer via the CLI), blocking every writer of its own worktree the
    whole time, and then fails with LockTimeout ("try again") instead of the refusal -- trying
    again can never succeed.

    Cause: MemoryRepo.forget (mdmem/repo.py:318) enters store.locked_with_worktrees() before
    erasure/forget.py:49 (_refuse_in_linked_worktree) runs; same for finish_erasure (repo.py:329,
    refusal at forget.py:129). The docstring of locked_with_worktrees (gitstore.py:235-236)
    relies on "only from the main worktree (it refuses to run in a linked one)" -- the refusal
    comes too late to make that true."""
    repo, wt = with_worktree
    monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 6.0)
    holder = hold_write_lock(repo.root, 30)  # a long write in the main worktree
    linked = MemoryRepo.open(wt)
    try:
        t = time.monotonic()
        with pytest.raises(Conflict) as caught:
            linked.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
        waited = time.monotonic() - t
    finally:
        linked.close()
        stop(holder)
    assert "linked worktree" in str(caught.value), f"{type(caught.value).__name__}: {caught.value}"
    assert waited < 3.0, f"the refusal waited {waited:.1f}s for the main worktree's writer"


def test_forget_in_main_and_forget_in_a_linked_worktree_deadlock(with_worktree, monkeypatch):
    """D2, the deadlock. A forget in the main worktree held the main lock and wanted the linked
    worktree's; a forget (or an open with an interrupted erasure pending, or `forget --resume`) in
    the linked worktree held the linked lock and wanted the main one. Neither could go on: the real
    erasure failed with LockTimeout after LOCK_TIMEOUT_SECONDS (60 s), though the linked one was
    going to be refused anyway.
    Here the main erasure holds its locks (the gate alone and its write lock) while the linked
    `mdmem forget` CLI starts: it must be refused at once, and the main forget then succeeds."""
    repo, wt = with_worktree
    monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 4.0)
    env = {**os.environ, "MDMEM_USER": "alice", "MDMEM_DAEMON_AUTOSTART": "0"}
    with repo.store.locked(erasure=True):  # the main erasure has its locks
        t = time.monotonic()
        other = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "forget", "--owner", "alice",
                                "--subject", "user:alice"], cwd=wt, env=env, capture_output=True, text=True,
                               timeout=120)
        waited = time.monotonic() - t
        repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
    assert other.returncode == 5 and "linked worktree" in other.stderr, other.stderr
    assert waited < 3.5, f"the linked forget waited {waited:.1f}s before its refusal"
    assert "XYZZY" not in git(repo.root, "log", "-p", "--all").stdout


# --- D3: a symlink at a worktree's lock folder makes the erasure skip that worktree ----------------

def test_a_symlinked_worktree_lock_folder_is_skipped_not_locked(with_worktree):
    """D3. A linked worktree whose `.git/worktrees/wt/mdmem-locks` is a symlink to the main
    worktree's lock folder: locked_with_worktrees compares `os.path.realpath(folder)` with its own
    lock folder (gitstore.py:242), finds them equal and skips the worktree ("this store's own: held
    above"). But a writer in that worktree never follows that link: storage/locks.py (Lock._open,
    O_NOFOLLOW, lock_folder) removes it and locks `.../worktrees/wt/mdmem-locks/write.lock` in a
    real folder -- so during the erasure that writer gets its lock at once and writes under the
    rewrite (the loss commit e3b2753 was made to prevent).
    Cause: the realpath comparison at mdmem/storage/gitstore.py:242 follows a link the lock
    itself refuses to follow; it should compare the unresolved path (or lstat identity)."""
    repo, wt = with_worktree
    admin_locks = repo.root / ".git" / "worktrees" / "wt" / "mdmem-locks"
    if admin_locks.exists() and not admin_locks.is_symlink():
        import shutil
        shutil.rmtree(admin_locks)
    os.symlink(repo.root / ".git" / "mdmem-locks", admin_locks)
    with repo.store.locked(erasure=True):
        p = start_python(f"""
            from mdmem import MemoryRepo
            from mdmem.errors import LockTimeout
            r = MemoryRepo.open({str(wt)!r}, finish_erasure=False)
            try:
                with r.store.locked(timeout=1.5):
                    print("wrote during the erasure", flush=True)
            except LockTimeout:
                print("waited", flush=True)
        """)
        out, err = p.communicate(timeout=60)
    assert out.strip() == "waited", out + err


# --- D4: a linked-worktree writer that waited for the erasure fails every later write ------------------

def test_a_linked_worktree_writer_that_waited_for_the_erasure_can_write_again(with_worktree, tmp_path):
    """D4. A long-running process in a linked worktree (an agent's open MemoryRepo) writing while
    the main worktree runs forget: the change now makes its write wait for the erasure (good), but
    when it gets the lock its in-memory view state still names the pre-erasure tip of its branch,
    a commit the erasure rewrote and `git gc --prune=now` deleted. That write and *every later
    one* fails with a raw `_pygit2.NotFoundError: object not found - no match for id (<old tip>)`
    (hundreds in a row, measured; never recovers until the process restarts) instead of
    succeeding or raising an mdmem error. The same loop in the main worktree recovers (0 errors).
    Cause: views/render.py:600-602 (RootEntries._base) trusts `store.has_object(known[0])` for the
    old tip (libgit2 still lists it in this process) and diffs from it (storage/queries.py:166);
    nothing tells a process outside the eraser that history was rewritten (only the daemon checks
    erasure/journal.done_stamp, cli/daemon.py:163) -- e3b2753 made linked-worktree writers wait
    through the erasure without making them drop what it invalidated (ops/state.py reset_caches)."""
    repo, wt = with_worktree
    done = tmp_path / "erasure-done"
    writer = start_python(f"""
        import os, time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(wt)!r}, finish_erasure=False)
        print("open", flush=True)
        i, after = 0, None
        t = time.monotonic()
        while time.monotonic() - t < 60:
            if after is None and os.path.exists({str(done)!r}):
                after = i
            if after is not None and i >= after + 5:
                break
            try:
                r.remember(f"Writer fact {{i}} says hello", as_user="bob", kind="fact", subject="service:billing",
                           key=f"w{{i}}", scope="team", team="payments", new_key=True)
                print("ok", i, flush=True)
            except Exception as e:
                print("err", i, type(e).__name__, str(e).replace(chr(10), " ")[:200], flush=True)
            i += 1
    """)
    try:
        assert writer.stdout.readline().strip() == "open", writer.stderr.read()
        time.sleep(0.5)  # it writes in a loop: blocked in a write when the erasure ends
        repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
        done.write_text("1")
        out, err = writer.communicate(timeout=120)
    finally:
        stop(writer)
    failures = [line for line in out.splitlines() if line.startswith("err ")]
    assert not failures, f"{len(failures)} writes failed after the erasure, first: {failures[0]}"
    assert git(repo.root, "fsck", check=False).returncode == 0
