"""Attack 14c (a helper on attack 14b's fix: the lock files moved from <git dir>/mdmem/locks/ to
<git dir>/mdmem-locks/; Lock registers its descriptors; gitdir.clear_cache_path). Each test
failed on the code attacked; its docstring says what broke and why it matters. Fixed: Lock opens
its folder by itself (O_DIRECTORY|O_NOFOLLOW) and the file inside it by that descriptor, and
checks both still stand after the wait (any OSError: open again); prove-gone does not read the
names mdmem gave its cache and lock files as evidence (their contents are still read)."""
import shutil
import threading
import time

import pytest
from conftest import team_fact

from mdmem import MemoryRepo
from mdmem.errors import LockTimeout
from mdmem.storage.locks import Lock, lock_folder


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
    Lock._still_ours (mdmem/storage/locks.py:134-141) stats the path (:137), catching only
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
    (mdmem/storage/locks.py:107) and _still_ours stats through the folder (locks.py:137).
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


def test_the_lock_files_names_do_not_fail_an_erasers_proof(tmp_path):
    """The eraser's proof reads every file of .git outside objects/ and the cache folder, and
    also checks every such file's *name* for the needle (mdmem/erasure/proof.py:179-183: only
    parts[0] in ("objects", CACHE_NAME) is skipped). Before the move the lock files were in
    .git/mdmem/locks/, inside the skipped cache folder; now .git/mdmem-locks/{write,index,
    daemon}.lock (and .git/worktrees/<n>/mdmem-locks/...) are named in the scan, so a proof of
    "daemon" or "lock" fails with only `file name mdmem-locks/daemon.lock` -- names mdmem chose
    itself, which no erasure can remove (forget leaves mdmem-locks be, rightly): the proof
    can never pass for those needles, and prove-gone exits 7 on a clean repository."""
    from mdmem.cli import daemon

    repo = MemoryRepo.init(tmp_path / "mem", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           as_user="alice", embedder="none")
    try:
        team_fact(repo, "Billing deploys any weekday before noon")
        repo.recall("billing", as_user="bob")  # the index lock
        daemon.starting(repo.root)  # the daemon's lock file, as every daemon start or probe makes it
        assert (repo.root / ".git" / "mdmem-locks" / "daemon.lock").is_file()
        report = repo.prove_gone(["daemon", "lock"], as_user="dana").to_dict()
    finally:
        repo.close()
    failing = {name: check["where"] for needle in report["needles"] for name, check in needle["checks"].items()
               if not check["passed"]}
    assert report["passed"], failing
