"""An erasure excludes writers in every worktree, not only the main one's.
Each linked worktree's writers serialise on their own write lock (.git/worktrees/<id>/mdmem-locks/
write.lock); forget held only the main one's, so a write in a linked worktree ran during
git-filter-repo's rewrite and the prune after it, and could be lost. Now every writer holds the
erasure gate (.git/mdmem-locks/erasure.lock) shared and an erasure holds it alone. Real processes
and a real `git worktree add`."""
import os
import subprocess
import sys
import time

import pytest
from conftest import LOCKER_SECRET as SECRET
from conftest import T1, git, hold_write_lock, start_python, stop, team_fact

from mdmem import MemoryRepo
from mdmem.errors import Conflict, LockTimeout
from mdmem.storage import locking


def test_forget_waits_for_a_write_in_progress_in_a_linked_worktree(with_worktree, monkeypatch):
    """A process holding the linked worktree's write lock (a write in progress there): forget
    must not rewrite under it. Without the fix forget ran at once and succeeded."""
    repo, wt = with_worktree
    holder = hold_write_lock(wt, 30)
    try:
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 1.0)
        with pytest.raises(LockTimeout, match="erasure.lock: writers"):
            repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
    finally:
        holder.kill()
        holder.wait()
    assert SECRET in git(repo.root, "log", "-p", "--all").stdout  # nothing was rewritten half way
    receipt = repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)  # its writer is gone
    assert receipt.counts
    assert "XYZZY" not in git(repo.root, "log", "-p", "--all").stdout


def test_a_write_in_a_linked_worktree_waits_for_the_erasure_and_lands_after_it(with_worktree):
    """While an erasure holds its locks, a linked worktree's remember blocks; when the erasure
    lets go, the write commits on the rewritten branch and nothing erased comes back."""
    repo, wt = with_worktree
    writer = start_python(f"""
        import sys, time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(wt)!r}, finish_erasure=False)
        print("open", flush=True)
        sys.stdin = None
        time.sleep(0.8)  # the erasure holds the locks by now
        t = time.monotonic()
        r.remember("Release freeze starts on Friday", as_user="bob", kind="fact", subject="service:billing",
                   key="freeze", scope="team", team="payments", new_key=True)
        print(round(time.monotonic() - t, 2), flush=True)
    """)
    assert writer.stdout.readline().strip() == "open", writer.stderr.read()
    with repo.store.locked(erasure=True):
        time.sleep(2.5)
        assert "freeze" not in git(wt, "log", "--format=%s", "side").stdout  # it waits
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert float(out.strip()) >= 1.0  # it waited for the locks
    assert "Release freeze" in git(wt, "show", "side:team/payments/service/billing/fact/freeze.md").stdout


def test_the_erasure_gate_is_one_for_every_worktree(with_worktree):
    """The gate is the repository's, from any worktree: taken alone through a store opened on a
    linked worktree, it keeps the main worktree's writers out too, and the waiting writer is told
    an erasure holds it."""
    repo, wt = with_worktree
    linked = MemoryRepo.open(wt)
    try:
        with linked.store.locked(erasure=True), pytest.raises(LockTimeout, match="an erasure held it"):
            with repo.store.locked(timeout=0.3):
                pass
    finally:
        linked.close()


def test_an_erasure_inside_another_write_of_its_thread_is_refused(repo):
    """The gate is held shared by the write: taking it alone there could wait on itself."""
    from mdmem.errors import Conflict
    with repo.store.locked(), pytest.raises(Conflict, match="must take the repository's locks first"):
        with repo.store.locked(erasure=True):
            pass


def test_a_pruned_worktree_is_no_reason_to_wait(with_worktree, monkeypatch):
    """A linked worktree whose admin folder is gone (pruned while the erasure started) has no
    writer: forget goes on."""
    repo, wt = with_worktree
    git(repo.root, "worktree", "remove", "--force", str(wt))
    receipt = repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
    assert receipt.counts


def test_finishing_an_interrupted_erasure_waits_for_a_linked_worktrees_writer(with_worktree, monkeypatch):
    """The recovery of a killed erasure rewrites as forget does: it takes every worktree's lock."""
    import mdmem.erasure.forget as fm
    from mdmem.erasure.journal import Journal
    repo, wt = with_worktree
    monkeypatch.setattr(fm, "_run", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
    monkeypatch.undo()
    assert Journal(repo.root).exists()
    holder = hold_write_lock(wt, 30)
    try:
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 1.0)
        with pytest.raises(LockTimeout, match="erasure.lock: writers"):
            repo.finish_erasure()
        assert Journal(repo.root).exists()
    finally:
        holder.kill()
        holder.wait()
    assert repo.finish_erasure() is not None
    assert "XYZZY" not in git(repo.root, "log", "-p", "--all").stdout


def test_writers_make_no_turnstile_and_an_erasure_leaves_none(with_worktree):
    """A writer only looks for the erasure's turnstile (one failed open); an erasure makes it,
    holds it and removes it before it lets go: writers after it find none again."""
    repo, _ = with_worktree
    turnstile = repo.root / ".git" / "mdmem-locks" / "erasure-waiting.lock"
    team_fact(repo, "Deploys happen on Wednesdays now")
    assert not turnstile.exists()
    with repo.store.locked(erasure=True):
        assert turnstile.exists()
    assert not turnstile.exists()
    repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
    assert not turnstile.exists()


def test_a_killed_erasures_turnstile_does_not_stop_writers(with_worktree):
    """kill -9 of an erasure holding the turnstile leaves the file behind, unlocked: writers pass
    it at once (the flock went with the process)."""
    repo, _ = with_worktree
    eraser = start_python(f"""
        import time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(repo.root)!r})
        with r.store.locked(erasure=True):
            print("held", flush=True)
            time.sleep(60)
    """)
    try:
        assert eraser.stdout.readline().strip() == "held", eraser.stderr.read()
        with pytest.raises(LockTimeout, match="erasure"):
            with repo.store.locked(timeout=0.5):
                pass
    finally:
        eraser.kill()
        eraser.wait()
    assert (repo.root / ".git" / "mdmem-locks" / "erasure-waiting.lock").exists()
    t = time.monotonic()
    team_fact(repo, "Deploys happen on Thursdays now")
    assert time.monotonic() - t < 5


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


def test_a_worktree_added_while_forget_waits_is_not_locked(with_worktree, monkeypatch, tmp_path):
    """`forget` waits for a write in progress in worktree `wt`; meanwhile `git worktree add wt2`
    and a process there starts a write (holds wt2's write lock, as every write does). When `wt`'s
    writer lets go, forget goes on and rewrites + prunes the history *while wt2's writer is
    mid-write*: the exclusion the change promises does not hold for wt2.

    Cause: GitStore.locked_with_worktrees (mdmem/storage/locking.py) iterates
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
    """The damage: the same race as above with a real writer: a worktree added while forget waits
    for `wt`'s writer, and an agent there remembering notes in a loop (each acknowledged).
    Observed every run before the gate: either `git gc --prune=now` deletes a commit the writer had just
    written, its branch then points at a missing object (`git fsck`: "refs/heads/side2: invalid sha1
    pointer", `git log --all` fatal, every later write in wt2 a raw KeyError, acknowledged notes gone),
    or git-filter-repo fails half way ("cannot lock ref refs/heads/side2: is at X but expected Y")
    and leaves an erasure journal that every later command trips on.
    Cause: storage/ (worktree_locks_dirs read once, before waiting), as above."""
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


def test_forget_from_a_linked_worktree_refuses_at_once_not_after_the_main_writers(with_worktree, monkeypatch):
    """`forget` run in a linked worktree must be refused ("run the erasure in the main
    worktree"). It is, but only after it has taken its own worktree's write lock and then waited
    for the main worktree's: with a writer busy in the main worktree it sits there (up to 60 s,
    measured 20 s with a 20 s writer via the CLI), blocking every writer of its own worktree the
    whole time, and then fails with LockTimeout ("try again") instead of the refusal -- trying
    again can never succeed.

    Cause: MemoryRepo.forget (mdmem/repo.py:318) enters store.locked_with_worktrees() before
    erasure/forget.py:49 (_refuse_in_linked_worktree) runs; same for finish_erasure (repo.py:329,
    refusal at forget.py:129). The docstring of locked_with_worktrees (storage/)
    relies on "only from the main worktree (it refuses to run in a linked one)" -- the refusal
    comes too late to make that true."""
    repo, wt = with_worktree
    # A refusal that waited for the writer would wait out the lock timeout (then fail otherwise):
    # the bound below is half of it, wide enough for a loaded machine.
    monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 25.0)
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
    assert waited < 25.0 / 2, f"the refusal waited {waited:.1f}s for the main worktree's writer"


def test_forget_in_main_and_forget_in_a_linked_worktree_deadlock(with_worktree, monkeypatch):
    """The deadlock: a forget in the main worktree held the main lock and wanted the linked
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
    # The CLI's own lock timeout is the default (60 s): a forget that waited for the main one's
    # locks would take all of it; starting a process on a loaded machine takes a few seconds.
    assert waited < 30, f"the linked forget waited {waited:.1f}s before its refusal"
    assert "XYZZY" not in git(repo.root, "log", "-p", "--all").stdout


def test_a_symlinked_worktree_lock_folder_is_skipped_not_locked(with_worktree):
    """A linked worktree whose `.git/worktrees/wt/mdmem-locks` is a symlink to the main
    worktree's lock folder: locked_with_worktrees compares `os.path.realpath(folder)` with its own
    lock folder (storage/), finds them equal and skips the worktree ("this store's own: held
    above"). But a writer in that worktree never follows that link: storage/locks.py (Lock._open,
    O_NOFOLLOW, lock_folder) removes it and locks `.../worktrees/wt/mdmem-locks/write.lock` in a
    real folder -- so during the erasure that writer gets its lock at once and writes under the
    rewrite (the loss commit e3b2753 was made to prevent).
    Cause: the realpath comparison at mdmem/storage/locking.py follows a link the lock
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


def test_a_linked_worktree_writer_that_waited_for_the_erasure_can_write_again(with_worktree, tmp_path):
    """A long-running process in a linked worktree (an agent's open MemoryRepo) writing while
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
