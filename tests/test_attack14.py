"""Attack 14 (a helper on session 14's changes: storage/locks.Lock replacing filelock,
GitStore._tree's per-write trees, views' cached index lines and blob-id comparison). Each test
failed on the code attacked; its docstring says what broke and why it matters. Fixed in
locks.Lock (descriptors closed in a forked child; nothing but a regular file at a lock's path)
and gitstore.stage (git's index never keeps a file and a folder at one path)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import git, git_status, team_fact

# A server process: a worker thread is inside a write (holds the repo's write lock) when the
# main thread forks a long-lived worker (multiprocessing's "fork", a preforking server, a pool),
# then the server dies (OOM killer, kill -9, a segfault in an extension) mid-write.
FORK_THEN_DIE = textwrap.dedent("""
    import multiprocessing as mp, os, signal, sys, threading, time
    from mdmem import MemoryRepo
    repo = MemoryRepo.open(sys.argv[1])
    held = threading.Event()
    def write():
        with repo.store.locked():   # a long write in a worker thread (a big import, a slow hook)
            held.set()
            time.sleep(120)
    threading.Thread(target=write, daemon=True).start()
    held.wait(30)
    worker = mp.get_context("fork").Process(target=time.sleep, args=(120,))
    worker.start()                  # forked by another thread while the write holds the lock
    print(worker.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)   # the server dies mid-write
""")


def test_a_writer_killed_mid_write_frees_the_lock_even_if_it_forked_a_worker(repo, monkeypatch):
    """A writer killed while it holds the write lock must not block the repo: the kernel
    drops an flock when the last descriptor of its open file closes. Lock (locks.py:60) opens
    the lock file without anything closing it in a forked child: a child forked by another
    thread while a write held the lock keeps the parent's descriptor (the Lock object is only
    looked at again by the thread that is not in the child, locks.py:91 `_forget_inherited`
    runs only on that Lock's next acquire/release). So when the parent dies mid-write, the
    forked worker keeps the repo's write lock for as long as it lives, and every writer in
    every process fails with LockTimeout after 60 s. filelock (before this change) closed
    inherited descriptors in the child at fork time: the same scenario at 9edb098 takes the
    lock at once. (The index lock, note_index.index_lock, had the same flaw.)"""
    from mdmem.storage import locking

    proc = subprocess.Popen([sys.executable, "-c", FORK_THEN_DIE, str(repo.root)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    worker = int(proc.stdout.readline())  # (the pipe stays open in the worker: read a line, not to EOF)
    proc.stdout.close()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    try:
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 3.0)
        started = time.monotonic()
        result = team_fact(repo, "the next writer proceeds once the dead writer's lock is gone")
        assert result.status == "committed"
        assert time.monotonic() - started < 3.0
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_link_to_a_folder_at_the_lock_path_does_not_break_every_write(repo, tmp_path):
    """Everything under .git/mdmem is a disposable cache: a file where the lock folder belongs
    is removed (locks.lock_folder), a folder where the lock file belongs is removed
    (Lock.acquire, locks.py:57-59). A symbolic link to a folder there (a restored backup, a
    tool that "dedups" the cache, a hostile hand) is skipped by that check (`not
    is_symlink()`), then os.open(O_RDWR|O_CREAT) of a directory raises IsADirectoryError
    (locks.py:60): every remember of every process crashes with an OSError (not an mdmem
    error) until a person finds and removes the link. A link to a missing folder
    (FileNotFoundError) does the same. The write lock's path is mdmem's own; a link found
    there should be dropped like the folder is. (Not a regression: at 9edb098 filelock opened
    with O_NOFOLLOW and failed on every link with ELOOP; the new Lock follows links to files,
    as designed, but still crashes on a link to a folder or into a missing folder.)"""
    lock = repo.store.lock_dir / "write.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock.unlink(missing_ok=True)
    lock.symlink_to(elsewhere)
    assert team_fact(repo, "writes go on with a link planted at the lock's path").status == "committed"
    assert list(elsewhere.iterdir()) == []  # and nothing was written through the link


def test_a_folder_committed_at_a_view_path_leaves_gits_index_consistent(repo):
    """PRE-EXISTING (fails at 9edb098 too; not one of the session-14 changes). A view path
    holding a folder in HEAD (committed by hand with --no-verify) is replaced by mdmem's next
    write with the rendered file, in the commit and the work tree, but _sync_worktree
    (gitstore.py:866-871) only `index.add`s the view's path: git's index keeps the folder's
    entries under it (`team/payments/MEMORY.md/a`). `git status` is then not clean (`AD`)
    and the next plain `git commit` of anything fails: "You have both
    team/payments/MEMORY.md and team/payments/MEMORY.md/a ... Error building trees"."""
    team_fact(repo, "first")
    root = repo.root
    git(root, "rm", "-q", "team/payments/MEMORY.md")
    (root / "team/payments/MEMORY.md").mkdir()
    (root / "team/payments/MEMORY.md/a").write_text("a folder where the view belongs\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-m", "a folder at the view's path")
    assert team_fact(repo, "second", key="other.window", new_key=True).status == "committed"
    assert git(root, "ls-tree", "HEAD", "team/payments/MEMORY.md").stdout.startswith("100644 blob")
    assert git_status(root) == ""
    (root / "unrelated.txt").write_text("x\n")
    git(root, "add", "unrelated.txt")
    git(root, "commit", "-q", "--no-verify", "-m", "a person's commit")  # fails: the index is broken
