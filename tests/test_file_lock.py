"""storage/locks.Lock: mdmem's own flock lock (filelock's cost ~0.5 ms a write; session 14).
Each property is checked with real processes where it is about processes."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from mdmem.errors import LockTimeout
from mdmem.storage.locks import Lock

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
    assert 0.15 < time.monotonic() - started < 0.9
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
