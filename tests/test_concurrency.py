import subprocess
import sys
import textwrap

import pytest

from conftest import git_status

WRITER = textwrap.dedent("""
    import sys
    from mdmem import MemoryRepo
    repo = MemoryRepo.open(sys.argv[1])
    who = sys.argv[2]
    for i in range(int(sys.argv[3])):
        repo.remember(f"{who} note {i}", as_user=who, kind="fact", subject="service:load",
                      key=f"{who}.{i}", scope="team", team="payments", new_key=True)
""")


def test_two_processes_writing_at_once_lose_nothing(repo):
    n = 25
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(repo.root), who, str(n)]) for who in ("bob", "dana")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    keys = {k.key for k in repo.keys(as_user="alice", subject="service:load", kind="fact")}
    assert keys == {f"{w}.{i}" for w in ("bob", "dana") for i in range(n)}
    commits = repo.store.git("log", "--format=%s", "--", "team/payments/service/load").splitlines()
    assert len(commits) == 2 * n
    assert git_status(repo.root) == ""


def test_a_stale_index_lock_does_not_block_the_repo_for_ever(repo):
    import os
    import time
    from conftest import team_fact
    lock = repo.root / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert team_fact(repo, "still writable").status == "committed"
    assert not lock.exists()


def test_a_store_made_while_its_thread_holds_the_lock_does_not_wait_for_it(repo):
    """The write lock is held by a thread, whichever GitStore took it: an erasure reloads its
    repo (a new store) while holding the lock, and that store's deferred flush of git's index
    waited for the lock its own thread held (found making the deferred index the default)."""
    from mdmem.storage.gitstore import GitStore

    with repo.store.locked():
        other = GitStore(repo.root)
        assert other.holds_lock()
        with other.locked(timeout=2):  # LockTimeout after 2 s before
            pass
        assert repo.store.holds_lock() and other.holds_lock()
    assert not repo.store.holds_lock() and not other.holds_lock()
    with other.locked(timeout=2):
        assert repo.store.holds_lock()  # taken through the other store: held all the same


FORK_CHILD = textwrap.dedent("""
    import os, sys
    from mdmem.errors import LockTimeout
    from mdmem.storage.gitstore import GitStore
    s1, s2 = GitStore(sys.argv[1]), GitStore(sys.argv[1])
    with s1.locked():
        pid = os.fork()
        if pid == 0 and GitStore(sys.argv[1]).holds_lock():
            os._exit(4)  # a store made in the child believed it held the parent's write lock
    if pid == 0:  # the child, out of the write it was forked in
        try:
            with s2.locked(timeout=2):
                pass
        except LockTimeout:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_a_child_forked_under_the_lock_neither_inherits_nor_stalls_other_stores(repo):
    """Forked inside a write: a store made in the child does not think it holds the parent's
    lock (exit 4), and another store of the child takes the lock once the write is left,
    instead of waiting out its timeout on a thread lock nobody holds (exit 3) (attack 9, F3/F4)."""
    proc = subprocess.run([sys.executable, "-c", FORK_CHILD, str(repo.root)], timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize("how", ["symlink", "dotdot"])
def test_a_store_reaching_the_repo_another_way_sees_the_lock_its_thread_holds(repo, tmp_path, how):
    """The lock is recorded by the lock folder's real path (attack 9, F5)."""
    from mdmem.storage.gitstore import GitStore

    if how == "symlink":
        other_path = tmp_path / "link"
        other_path.symlink_to(repo.root)
    else:
        (tmp_path / "sub").mkdir()
        other_path = tmp_path / "sub" / ".." / repo.root.name
    with repo.store.locked():
        other = GitStore(other_path)
        assert other.holds_lock()
        with other.locked(timeout=2):
            pass
