"""Attack 14c (a helper on attack 14b's fix: the lock files moved from <git dir>/mdmem/locks/ to
<git dir>/mdmem-locks/; Lock registers its descriptors; gitdir.clear_cache_path). Each test
failed on the code attacked; its docstring says what broke and why it matters. Fixed: Lock opens
its folder by itself (O_DIRECTORY|O_NOFOLLOW) and the file inside it by that descriptor, and
checks both still stand after the wait (any OSError: open again); prove-gone does not read the
names mdmem gave its cache and lock files as evidence (their contents are still read)."""
import threading
import time

from conftest import team_fact

from mdmem import MemoryRepo


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
