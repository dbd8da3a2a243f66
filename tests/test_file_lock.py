"""storage/locks.Lock: mdmem's own flock lock (filelock's cost ~0.5 ms a write). A writer killed
or forked (even while another thread waits) never keeps the lock, and a lock folder removed,
cleared with the cache, or replaced by a file or a link never lets two writers in nor fails a
write with a raw OSError. Each property is checked with real processes where it is about processes."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import team_fact

from mdmem.errors import LockTimeout
from mdmem.storage.locks import Lock, lock_folder

HOLD = textwrap.dedent("""
    import sys, time
    from mdmem.storage.locks import Lock
    lock = Lock(sys.argv[1]); lock.acquire(timeout=5)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
""")


PROBE = textwrap.dedent("""
    import sys
    from mdmem.errors import LockTimeout
    from mdmem.storage.locks import Lock
    try:
        Lock(sys.argv[1]).acquire(timeout=0)
    except LockTimeout:
        sys.exit(7)
""")


def hold_in_another_process(path, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_another_process_holds_times_out_naming_the_file_then_is_taken(tmp_path):
    path = tmp_path / "write.lock"
    proc = hold_in_another_process(path, 1.0)
    started = time.monotonic()
    with pytest.raises(LockTimeout, match="write.lock"):
        Lock(path).acquire(timeout=0.2, poll_interval=0.01)
    # It waited its timeout, and gave up well before the holder let go (1 s; load only lengthens
    # the wait, so the upper bound is wide).
    assert 0.15 < time.monotonic() - started < 5.0
    with pytest.raises(LockTimeout):
        Lock(path).acquire(timeout=0)  # one try
    lock = Lock(path, timeout=10).acquire(poll_interval=0.01)  # the default timeout: waits for the other
    assert lock.is_locked
    lock.release()
    proc.wait(10)


def test_two_locks_on_one_file_exclude_each_other_in_one_process_and_nest_on_one(tmp_path):
    path = tmp_path / "index.lock"
    first = Lock(path)
    with first:
        with first:  # the same Lock again: counted
            assert first.is_locked
        assert first.is_locked  # one release of two
        with pytest.raises(LockTimeout):
            Lock(path).acquire(timeout=0)
    assert not first.is_locked
    with Lock(path):
        pass
    first.release()  # a release too many does nothing


def test_a_child_forked_while_a_lock_is_held_never_frees_the_parents_lock(tmp_path):
    """flock belongs to the open file, which a fork shares: a child's release must not unlock
    the parent (then a third process could enter the parent's write)."""
    path = tmp_path / "write.lock"
    lock = Lock(path).acquire()
    pid = os.fork()
    if pid == 0:  # the child: lets go of its copy, then finds the lock still held (by the parent)
        code = 0
        try:
            lock.release()
            lock.release()
            if lock.is_locked:
                code = 2
            try:
                Lock(path).acquire(timeout=0)
                code = 3
            except LockTimeout:
                pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    probe = subprocess.run([sys.executable, "-c", PROBE, str(path)])
    assert probe.returncode == 7  # still the parent's
    lock.release()
    assert subprocess.run([sys.executable, "-c", "import sys; from mdmem.storage.locks import Lock; "
                           "Lock(sys.argv[1]).acquire(timeout=0)", str(path)]).returncode == 0


def test_a_killed_holder_frees_the_lock(tmp_path):
    path = tmp_path / "write.lock"
    proc = hold_in_another_process(path, 60)
    proc.kill()
    proc.wait(10)
    with Lock(path).acquire(timeout=1):
        pass


def test_whatever_is_at_the_lock_path_is_replaced_never_followed(tmp_path):
    """The lock's path is mdmem's own: a link (to a file, to a folder, dangling), a FIFO or a
    folder there is removed and a regular file locked; nothing is written through a link."""
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = tmp_path / "write.lock"
    for plant in (lambda: path.symlink_to(target), lambda: path.symlink_to(folder),
                  lambda: path.symlink_to(tmp_path / "missing" / "x"), lambda: os.mkfifo(path),
                  lambda: (path / "inner").mkdir(parents=True)):
        plant()
        with Lock(path).acquire(timeout=1):
            assert path.is_file() and not path.is_symlink()
            assert subprocess.run([sys.executable, "-c", PROBE, str(path)]).returncode == 7
        path.unlink()
    assert target.read_text() == "keep me" and list(folder.iterdir()) == []
    assert not (tmp_path / "missing").exists()


def test_a_lock_file_replaced_while_waiting_is_locked_anew(tmp_path):
    """A waiter that gets the flock of a file no longer at the path (deleted or replaced while
    it waited) opens the path again: else it would hold a lock nobody else can see, and the
    next process would lock the new file beside it (two writers at once)."""
    import threading

    path = tmp_path / "write.lock"
    holder = hold_in_another_process(path, 1.0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(Lock(path).acquire(timeout=10, poll_interval=0.01)))
    waiter.start()
    time.sleep(0.2)
    path.unlink()  # the file the waiter waits on leaves the path
    holder.wait(10)
    waiter.join(10)
    assert got and got[0].is_locked
    assert subprocess.run([sys.executable, "-c", PROBE, str(path)]).returncode == 7  # excluded by the waiter
    got[0].release()


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
    drops an flock when the last descriptor of its open file closes. Lock (locks.py) opens
    the lock file without anything closing it in a forked child: a child forked by another
    thread while a write held the lock keeps the parent's descriptor (the Lock object is only
    looked at again by the thread that is not in the child, locks.py `_forget_inherited`
    runs only on that Lock's next acquire/release). So when the parent dies mid-write, the
    forked worker keeps the repo's write lock for as long as it lives, and every writer in
    every process fails with LockTimeout after 60 s. filelock (before this change) closed
    inherited descriptors in the child at fork time: with that, the same scenario takes the
    lock at once. (The index lock, note_index.index_lock, had the same flaw.)"""
    from mdmem.storage import locking

    proc = subprocess.Popen([sys.executable, "-c", FORK_THEN_DIE, str(repo.root)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    worker = int(proc.stdout.readline())  # (the pipe stays open in the worker: read a line, not to EOF)
    proc.stdout.close()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    try:
        # Waiting for a lock the worker kept would take the whole timeout (then LockTimeout); the
        # bound is half of it, so a loaded machine does not fail the test.
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 20.0)
        started = time.monotonic()
        result = team_fact(repo, "the next writer proceeds once the dead writer's lock is gone")
        assert result.status == "committed"
        assert time.monotonic() - started < 20.0 / 2
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_link_to_a_folder_at_the_lock_path_does_not_break_every_write(repo, tmp_path):
    """Everything under .git/mdmem is a disposable cache: a file where the lock folder belongs
    is removed (locks.lock_folder), a folder where the lock file belongs is removed
    (Lock.acquire, locks.py-59). A symbolic link to a folder there (a restored backup, a
    tool that "dedups" the cache, a hostile hand) is skipped by that check (`not
    is_symlink()`), then os.open(O_RDWR|O_CREAT) of a directory raises IsADirectoryError
    (locks.py): every remember of every process crashes with an OSError (not an mdmem
    error) until a person finds and removes the link. A link to a missing folder
    (FileNotFoundError) does the same. The write lock's path is mdmem's own; a link found
    there should be dropped like the folder is. (Not a regression: filelock opened
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
    """A forked child closes the descriptors of Locks that are *held*
    (locks._HELD, filled at locks.py-77 only once acquire has the flock). But the
    descriptor a waiting acquire has open (locks.py `fd = self._open()`, polled in _wait)
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
    (locks.py, O_CREAT) makes a new file, locks it without waiting, and `_still_ours`
    (locks.py) agrees -- it only guards the window while waiting. Two processes are then
    inside GitStore.locked() together: measured here with a marker file made O_EXCL inside the
    lock, and in real writes as BranchMoved failures and a raw FileNotFoundError on the shared
    journal file (.git/mdmem-pending.json.tmp renamed by two writers), i.e. writes failing and
    the journal of one writer's unfinished commit overwritten/removed by the other. The lock
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
    Lock._open (locks.py-99) does not handle -- it handles ELOOP/EISDIR/ENXIO/ENOTDIR only
    -- and lock_folder's own unlink/mkdir race the same way. The writer crashes with a raw
    OSError, not an mdmem error (exit code and MCP error mapping assume MdmemError).
    _open should make the folder again on ENOENT (it already loops _OPEN_TRIES times)."""
    both, crashes, err = _contend(repo, repo.store.lock_dir)
    assert crashes == 0, err


def test_a_file_where_the_lock_folder_belongs_is_handled_not_a_raw_oserror(tmp_path):
    """Lock._open catches ENOTDIR (locks.py: a file where a folder on the lock's path
    belongs) and then calls _remove(self.lock_file), which unlinks `<file>/write.lock`:
    that raises NotADirectoryError, which _remove does not catch (it catches only
    FileNotFoundError, locks.py) -- the very case the code means to handle crashes with
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


def _wait_in_thread(repo, got: threading.Event, release: threading.Event, out: dict) -> threading.Thread:
    """A writer thread that waits for the repo's write lock (held elsewhere), then holds it."""
    def writer():
        try:
            with repo.store.locked(timeout=10):
                got.set()
                release.wait(10)
        except BaseException as exc:  # noqa: BLE001 -- the test names it
            out["exc"] = exc

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.5)  # the writer has opened write.lock and polls flock on it
    return thread


def test_a_lock_folder_replaced_by_a_file_while_a_writer_waits_raises_no_raw_oserror(repo):
    """A writer waiting for the write lock opened .git/mdmem-locks/write.lock; the folder is
    then replaced by a file (the case 14b says it fixed: "a removed or replaced folder crashed
    writers with raw OSErrors"). When the holder lets go, the waiter's flock succeeds and
    Lock._still_ours (mdmem/storage/locks.py-141) stats the path (:137), catching only
    FileNotFoundError: with a file where the folder was, os.stat raises NotADirectoryError,
    which escapes acquire as a raw OSError -- the write fails with a traceback-style error
    instead of reopening (Lock._open already remakes the folder on NotADirectoryError). A
    stress run (two writers, the folder swapped for a file/link/FIFO every 10 ms) hit it."""
    folder = repo.store.lock_dir
    holder = Lock(lock_folder(folder) / "write.lock").acquire(timeout=5)
    got, release, out = threading.Event(), threading.Event(), {}
    thread = _wait_in_thread(repo, got, release, out)
    try:
        shutil.rmtree(folder)
        folder.write_text("")  # a file where the lock folder belongs
        holder.release()
        assert got.wait(10) or "exc" in out
    finally:
        release.set()
        thread.join(20)
    assert "exc" not in out, f"the waiting writer crashed: {out.get('exc')!r}"
    assert folder.is_dir()


def test_a_lock_folder_replaced_by_a_link_while_a_writer_waits_never_lets_two_writers_in(repo, tmp_path):
    """Lock's docstring and lock_folder promise a link at the lock folder's path is removed,
    never followed ("a link would send the lock files elsewhere"). But only lock_folder checks
    the folder, before the open; Lock._open's O_NOFOLLOW guards the last path component only
    (mdmem/storage/locks.py) and _still_ours stats through the folder (locks.py).
    A writer waiting while .git/mdmem-locks is replaced by a link: once the holder lets go,
    _still_ours sees the path no longer names its file, _open reopens through the link and
    creates and locks <elsewhere>/write.lock, outside the repository. The next writer's
    lock_folder then unlinks the link, makes a new folder and locks a new write.lock at once:
    two writers hold "the" write lock together (the exclusion the move to mdmem-locks was for),
    and a file is written wherever the link pointed."""
    folder = repo.store.lock_dir
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    holder = Lock(lock_folder(folder) / "write.lock").acquire(timeout=5)
    got, release, out = threading.Event(), threading.Event(), {}
    thread = _wait_in_thread(repo, got, release, out)
    second = None
    try:
        shutil.rmtree(folder)
        folder.symlink_to(elsewhere)
        holder.release()
        assert got.wait(10), out.get("exc")  # the waiting writer holds the write lock now
        # Another writer, as GitStore.locked takes it: it must wait while the first holds it.
        second = Lock(lock_folder(folder) / "write.lock")
        with pytest.raises(LockTimeout):
            second.acquire(timeout=1)
    finally:
        if second is not None:
            second.release()
        release.set()
        thread.join(20)
    assert list(elsewhere.iterdir()) == [], "a lock file was made outside the repository, through the link"
