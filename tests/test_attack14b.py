"""Attack 14b (a helper on attack 14's fix: locks.Lock's own flock with fork handling and a
regular-file-only lock path; gitstore.stage). Each test failed on the code attacked; its
docstring says what broke and why it mattered. Fixed: a descriptor is registered as it opens
and a fork closes every one in the child (held or waited on); the lock files live in
.git/mdmem-locks, beside the disposable cache folder, not in it; Lock._open remakes its folder;
the daemon's lock folder is made by lock_folder."""
import os
import signal
import subprocess
import sys
import textwrap


from conftest import team_fact

# A server process: a worker thread is *waiting* for the repo's write lock (another process
# writes) when the main thread forks a long-lived worker; the waiting thread then gets the
# lock, and the server dies mid-write.
WAIT_FORK_THEN_DIE = textwrap.dedent("""
    import multiprocessing as mp, os, signal, sys, threading, time
    from mdmem import MemoryRepo
    repo = MemoryRepo.open(sys.argv[1])
    got = threading.Event()
    def write():
        with repo.store.locked(timeout=60):   # waits: another process holds the lock
            got.set()
            time.sleep(120)
    threading.Thread(target=write, daemon=True).start()
    time.sleep(1.0)                 # the writer thread is inside Lock.acquire, polling flock
    worker = mp.get_context("fork").Process(target=time.sleep, args=(120,))
    worker.start()
    print(worker.pid, flush=True)
    sys.stdin.readline()            # the other process has let go
    got.wait(30)
    print("got", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)   # the server dies mid-write
""")


def test_a_writer_forked_while_a_thread_waits_for_the_lock_does_not_keep_it_after_the_parent_dies(repo, monkeypatch):
    """Attack 14's fix closes, in a forked child, the descriptors of Locks that are *held*
    (locks._HELD, filled at locks.py:75-77 only once acquire has the flock). But the
    descriptor a waiting acquire has open (locks.py:67 `fd = self._open()`, polled in _wait)
    is in no list: a child forked while another thread waits for the lock inherits it and keeps
    it open. An flock belongs to the open file, which both share, so when the waiting thread
    then gets the lock in the parent and the parent dies mid-write (OOM killer, kill -9), the
    forked worker still holds the repo's write lock for as long as it lives: every writer of
    every process fails with LockTimeout. A thread waiting for the write lock while the main
    thread forks a worker is the common case of a busy server (the lock is contended exactly
    when writes are frequent)."""
    from mdmem.storage import locking
    from mdmem.storage.locks import Lock, lock_folder

    other = Lock(str(lock_folder(repo.store.lock_dir) / "write.lock")).acquire(timeout=5)
    proc = subprocess.Popen([sys.executable, "-c", WAIT_FORK_THEN_DIE, str(repo.root)], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True)
    worker = int(proc.stdout.readline())
    try:
        other.release()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "got"
        proc.stdout.close()
        assert proc.wait(timeout=60) == -signal.SIGKILL
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 3.0)
        result = team_fact(repo, "the next writer proceeds once the dead writer's lock is gone")
        assert result.status == "committed"
    finally:
        os.kill(worker, signal.SIGKILL)


# N processes take the repo's write lock in a loop; inside it each makes a marker file with
# O_EXCL (fails if another holder is inside too), waits a moment, removes it. A third party
# removes `target` (under .git/mdmem, the cache folder) in a tight loop meanwhile.
EXCLUSION = textwrap.dedent("""
    import os, sys, time
    from mdmem.storage.gitstore import GitStore
    store = GitStore(sys.argv[1])
    marker = os.path.join(sys.argv[1], ".git", "inside")
    both = crashes = 0
    for _ in range(int(sys.argv[2])):
        try:
            with store.locked(timeout=30):
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    both += 1
                    continue
                time.sleep(0.002)
                os.close(fd)
                os.unlink(marker)
        except Exception as exc:
            from mdmem.errors import MdmemError
            if not isinstance(exc, MdmemError):
                crashes += 1
                print("crash", type(exc).__name__, exc, file=sys.stderr, flush=True)
    print(both, crashes, flush=True)
""")

REMOVER = textwrap.dedent("""
    import os, shutil, sys, time
    target = sys.argv[1]
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.unlink(target)
            except OSError:
                pass
        time.sleep(0.0005)
""")


def _contend(repo, target, writers=3, rounds=150):
    remover = subprocess.Popen([sys.executable, "-c", REMOVER, str(target)])
    try:
        procs = [subprocess.Popen([sys.executable, "-c", EXCLUSION, str(repo.root), str(rounds)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(writers)]
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        remover.kill()
        remover.wait()
    both = sum(int(out.split()[0]) for out, _ in outs)
    crashes = sum(int(out.split()[1]) for out, _ in outs)
    return both, crashes, "".join(err for _, err in outs)[:2000]


def test_two_writers_never_hold_the_write_lock_at_once_while_the_cache_folder_is_cleared(repo):
    """(Now: the lock files are out of the cache folder; clearing it in a loop lets no second
    writer in.) The write lock was an flock on .git/mdmem/locks/write.lock, a path in the cache folder
    that mdmem itself calls disposable (locks.lock_folder's docstring; a person or a cleanup
    tool may clear it). An flock belongs to the inode, not the name: once the file a holder
    locked is unlinked (or the folder holding it removed), the next writer's open
    (locks.py:97, O_CREAT) makes a new file, locks it without waiting, and `_still_ours`
    (locks.py:120) agrees -- it only guards the window while waiting. Two processes are then
    inside GitStore.locked() together: measured here with a marker file made O_EXCL inside the
    lock, and in real writes as BranchMoved failures and a raw FileNotFoundError on the shared
    journal file (.git/mdmem-pending.json.tmp renamed by two writers), i.e. writes failing and
    the journal of one writer's unfinished commit overwritten/removed by the other. Attack 14
    claimed "two writers must lock the same file"; the lock's identity has to be something a
    cache cleanup cannot replace (flock the git folder itself, or re-check after locking AND
    keep a lock on a non-disposable path such as .git/ or the repo's commondir)."""
    from mdmem.storage.gitdir import cache_dir

    both, crashes, err = _contend(repo, cache_dir(repo.root))  # the cache folder cleared meanwhile
    assert both == 0, f"{both} times two processes were inside the write lock at once\n{err}"


def test_removing_the_lock_folder_never_crashes_a_writer_with_a_raw_oserror(repo):
    """GitStore.locked makes the lock folder (locks.lock_folder) and then Lock._open opens
    write.lock in it: if the folder is removed in between (a cache cleanup, `rm -rf
    .git/mdmem` while an agent writes), os.open raises FileNotFoundError (ENOENT), which
    Lock._open (locks.py:97-99) does not handle -- it handles ELOOP/EISDIR/ENXIO/ENOTDIR only
    -- and lock_folder's own unlink/mkdir race the same way. The writer crashes with a raw
    OSError, not an mdmem error (exit code and MCP error mapping assume MdmemError).
    _open should make the folder again on ENOENT (it already loops _OPEN_TRIES times)."""
    both, crashes, err = _contend(repo, repo.store.lock_dir)
    assert crashes == 0, err


def test_a_file_where_the_lock_folder_belongs_is_handled_not_a_raw_oserror(tmp_path):
    """Lock._open catches ENOTDIR (locks.py:99: a file where a folder on the lock's path
    belongs) and then calls _remove(self.lock_file), which unlinks `<file>/write.lock`:
    that raises NotADirectoryError, which _remove does not catch (it catches only
    FileNotFoundError, locks.py:157) -- the very case the code means to handle crashes with
    a raw OSError. Reached by any Lock whose folder is replaced by a file after lock_folder
    ran (GitStore.locked, note_index.index_lock), and always by the daemon's lock
    (cli/daemon.py:_lock makes the folder with Path.mkdir, not lock_folder). The fix: remove
    the file standing in for the folder (the first non-folder ancestor under the cache
    folder) and make the folder, or raise LockTimeout."""
    from mdmem.errors import MdmemError
    from mdmem.storage.locks import Lock

    (tmp_path / "locks").write_text("not a folder")
    lock = Lock(tmp_path / "locks" / "write.lock")
    try:
        lock.acquire(timeout=1)
    except MdmemError:
        return
    lock.release()


def test_the_daemon_lock_survives_a_file_where_the_lock_folder_belongs(repo):
    """Everything under .git/mdmem is a disposable cache and the write and index locks make
    their folder through locks.lock_folder, which removes a file standing where the folder
    belongs. The daemon's lock does not (cli/daemon.py:346 `_lock`: Path.mkdir(parents=True,
    exist_ok=True)), so with a file at .git/mdmem/locks `daemon.starting(root)` -- asked by
    every read-only CLI call that would autostart or use a daemon -- and `daemon.run` raise a
    raw FileExistsError; `mdmem daemon start` exits 1 with "locks: File exists" instead of
    starting. Fix: `_lock` should use lock_folder(cache_dir(root) / "locks")."""
    from mdmem.cli import daemon

    repo.close()
    locks = repo.store.lock_dir
    if locks.is_dir():
        import shutil
        shutil.rmtree(locks)
    locks.write_text("not a folder")
    assert daemon.starting(repo.root) is False
