import subprocess
import sys
import textwrap

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
