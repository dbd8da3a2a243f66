"""An erasure excludes writers in every worktree, not only the main one's (found by attack 14c).
Each linked worktree's writers serialise on their own write lock (.git/worktrees/<id>/mdmem-locks/
write.lock); forget held only the main one's, so a write in a linked worktree ran during
git-filter-repo's rewrite and the prune after it, and could be lost. Now every writer holds the
erasure gate (.git/mdmem-locks/erasure.lock) shared and an erasure holds it alone. Real processes
and a real `git worktree add`."""
import time

import pytest
from conftest import git, hold_write_lock, LOCKER_SECRET as SECRET, start_python, T1, team_fact

from mdmem import MemoryRepo
from mdmem.errors import LockTimeout
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
