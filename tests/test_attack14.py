"""Attack 14 (a helper on session 14's changes: storage/locks.Lock replacing filelock,
GitStore._tree's per-write trees, views' cached index lines and blob-id comparison). Each test
failed on the code attacked; its docstring says what broke and why it matters. Fixed in
locks.Lock (descriptors closed in a forked child; nothing but a regular file at a lock's path)
and gitstore.stage (git's index never keeps a file and a folder at one path)."""
import textwrap

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
