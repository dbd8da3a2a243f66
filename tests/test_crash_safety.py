"""The commit is the acknowledgement: crashes and stale git locks on the write path.

Kills are real (a subprocess SIGKILLs itself at the named point); locks are real files,
held open by a real second process where the test needs a live writer.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import T0, git_status, team_fact

from mdmem import LockTimeout, MemoryRepo
from mdmem.storage.gitstore import GitStore


def git(root, *args, check=True):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check).stdout


def age(path, seconds=600):
    old = time.time() - seconds
    os.utime(path, (old, old))


def assert_consistent(root):
    """Work tree, git's index and HEAD agree, and a plain commit would change nothing."""
    assert git_status(root) == "", git_status(root)
    assert git(root, "diff", "--cached", "--name-status", "HEAD") == ""
    assert git(root, "ls-files", "--", "team", "private").split() == \
        git(root, "ls-tree", "-r", "--name-only", "HEAD", "--", "team", "private").split()


def test_a_fresh_stale_index_lock_never_fails_an_acknowledged_write(repo):
    lock = repo.root / ".git" / "index.lock"
    lock.write_bytes(b"")  # a writer killed a moment ago
    r = team_fact(repo, "Billing deploys any weekday before 3pm")
    assert r.status == "committed"
    assert git(repo.root, "cat-file", "-p", f"HEAD:{r.path}").endswith("Billing deploys any weekday before 3pm\n")
    assert (repo.root / r.path).is_file()  # the work tree has it at once
    age(lock)  # once it is old and nobody holds it, the next write recovers it
    team_fact(repo, "Refunds take 30 days", key="refund.window", new_key=True)
    assert not lock.exists()
    assert_consistent(repo.root)
    # A plain `git commit` now deletes nothing.
    git(repo.root, "commit", "-q", "--no-verify", "--allow-empty", "-m", "person")
    assert len(git(repo.root, "ls-tree", "-r", "--name-only", "HEAD", "--", "team/payments/service").split()) == 2


def test_a_repo_left_inconsistent_is_repaired_on_open(repo):
    lock = repo.root / ".git" / "index.lock"
    lock.write_bytes(b"")
    r = team_fact(repo, "Billing deploys any weekday before 3pm")
    assert r.path not in git(repo.root, "ls-files")  # the index write failed after the commit
    age(lock)
    MemoryRepo.open(repo.root)  # no write needed
    assert_consistent(repo.root)


def test_a_live_writers_lock_is_never_removed(repo, tmp_path):
    lock = repo.root / ".git" / "index.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        f = open({str(lock)!r}, "wb")
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        age(lock)  # old, but someone has it open: a live (slow) writer
        r = team_fact(repo, "Billing deploys any weekday before 3pm")
        assert r.status == "committed" and lock.exists()
        assert GitStore(repo.root).recover_stale_locks() == []
    finally:
        holder.kill()
        holder.wait()
    team_fact(repo, "Refunds take 30 days", key="refund.window", new_key=True)
    assert_consistent(repo.root)


def test_a_stale_ref_lock_does_not_fail_writes_forever(repo):
    lock = repo.root / ".git" / "refs" / "heads" / "main.lock"
    lock.write_bytes(b"")
    age(lock)
    r = team_fact(repo, "Billing deploys any weekday before 3pm")
    assert r.status == "committed" and not lock.exists()
    assert_consistent(repo.root)


def test_a_young_ref_lock_is_waited_for(repo):
    lock = repo.root / ".git" / "refs" / "heads" / "main.lock"
    lock.write_bytes(b"")  # dead writer, just now: stale after STALE_LOCK_SECONDS
    started = time.monotonic()
    r = team_fact(repo, "Billing deploys any weekday before 3pm")
    # Waited until the lock was stale (STALE_LOCK_SECONDS), not the write lock's whole timeout (60 s).
    assert r.status == "committed" and time.monotonic() - started < 30
    assert_consistent(repo.root)


KILL_AT = textwrap.dedent("""
    import os, signal, sys
    from mdmem import MemoryRepo
    from mdmem.storage import gitstore
    point = sys.argv[2]
    original = getattr(gitstore.GitStore, point)
    def die(self, *a, **k):
        if point == "_write_file":
            original(self, *a, **k)  # the first file written, then killed before the index
        os.kill(os.getpid(), signal.SIGKILL)
    setattr(gitstore.GitStore, point, die)
    repo = MemoryRepo.open(sys.argv[1])
    repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact",
                  subject="service:billing", key="deploy.window", scope="team", team="payments",
                  now="2026-10-01T09:00:00Z")
""")


def kill_inside_a_write(root, point):
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(root), point], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_a_kill_between_the_ref_update_and_the_work_tree_is_repaired(repo):
    team_fact(repo, "Billing deploys only on Tuesdays")
    kill_inside_a_write(repo.root, "_sync_worktree")
    # HEAD has the new version; the work tree and index still the old one.
    assert "any weekday" in git(repo.root, "show", "HEAD:team/payments/service/billing/fact/deploy.window.md")
    reopened = MemoryRepo.open(repo.root)
    got = reopened.get(as_user="alice", subject="service:billing", kind="fact", key="deploy.window", now=T0)
    assert "any weekday" in got.note.text
    assert [k.key for k in reopened.keys(as_user="alice", subject="service:billing", kind="fact", now=T0)] \
        == ["deploy.window"]
    assert "any weekday" in reopened.recall("when does billing deploy", as_user="alice", now=T0)[0].text
    assert_consistent(repo.root)


def test_a_kill_after_the_file_but_before_the_index_is_repaired(repo):
    kill_inside_a_write(repo.root, "_write_file")
    MemoryRepo.open(repo.root)
    assert_consistent(repo.root)


def test_repair_leaves_a_persons_later_edit_alone(repo):
    team_fact(repo, "Billing deploys only on Tuesdays")
    kill_inside_a_write(repo.root, "_sync_worktree")
    note = repo.root / "team/payments/service/billing/fact/deploy.window.md"
    edited = note.read_text().replace("only on Tuesdays", "on Fridays, said Dana")
    note.write_text(edited)
    MemoryRepo.open(repo.root)
    assert note.read_text() == edited  # not overwritten: a person's change wins, and shows as one
    assert git_status(repo.root) == " M team/payments/service/billing/fact/deploy.window.md\n"


def test_writes_go_on_while_git_packs_refs_and_collects_garbage(repo):
    root = str(repo.root)
    packer = subprocess.Popen(["sh", "-c", f"while true; do git -C {root} pack-refs --all; "
                               f"git -C {root} gc --quiet; done"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for i in range(40):
            r = team_fact(repo, f"fact number {i}", key=f"k{i}", new_key=True)
            assert r.status == "committed"
    finally:
        packer.kill()
        packer.wait()
    assert len(git(repo.root, "ls-tree", "-r", "--name-only", "HEAD", "--", "team/payments/service").split()) == 40
    assert_consistent(repo.root)


def test_background_housekeeping_takes_the_repo_lock(repo):
    store = GitStore(repo.root)
    with store.locked():
        proc = store.housekeep_in_background()
        time.sleep(1.0)
        assert proc.poll() is None  # waiting for our lock, not packing under our feet
    assert proc.wait(timeout=60) == 0


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="CPU priority is POSIX")
def test_background_housekeeping_runs_below_the_priority_of_the_process_that_serves_calls(repo):
    """A repack at a server's priority took both cores from its recalls (storage/background.py)."""
    from mdmem.storage.background import BACKGROUND_NICE

    store = GitStore(repo.root)
    with store.locked():  # it waits for this lock: alive while its priority is read
        proc = store.housekeep_in_background()
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(19, ours + BACKGROUND_NICE)
    assert proc.wait(timeout=60) == 0


def test_closing_a_library_store_waits_for_its_housekeeping_and_a_cli_close_lets_it_run(tmp_path):
    """A caller who closes the repo and removes its folder must not race a repack still writing
    into .git ("Directory not empty"): a library close waits for the housekeeping it started.
    A one-shot CLI call lets it run on (as git's detached gc does)."""
    import threading

    from mdmem.storage.maintenance import housekeeping_lock

    for leave in (False, True):
        mem = MemoryRepo.init(tmp_path / f"m{leave}", teams={"payments": ["alice"]}, now=T0, as_user="mdmem")
        with housekeeping_lock(mem.root, shared=True, timeout=5):  # holds the housekeeping back
            proc = mem.store.housekeep_in_background()
            closer = threading.Thread(target=mem.close, kwargs={"leave_housekeeping": leave})
            closer.start()
            closer.join(timeout=1.5)
            assert closer.is_alive() is (not leave)
            assert proc.poll() is None
        closer.join(timeout=60)
        assert not closer.is_alive()
        if not leave:
            assert proc.poll() == 0  # it had ended before close returned
        assert proc.wait(timeout=60) == 0


def test_a_close_under_the_erasure_gate_does_not_wait_for_housekeeping_that_waits_for_the_gate(tmp_path):
    """A forget closes its repo while it holds the gate alone; housekeeping started before
    it waits for that gate (as writers do), so waiting for it there sat out its 60 s lock
    timeout (a forget in CI took 60 s). The close returns at once; the housekeeping runs
    once the gate is let go, and a close after that waits for it."""
    mem = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice"]}, now=T0, as_user="mdmem")
    with mem.store.locked(erasure=True):
        proc = mem.store.housekeep_in_background()
        t = time.monotonic()
        mem.close()
        assert time.monotonic() - t < 5
        assert proc.poll() is None  # it waits for the gate this thread holds
    mem.close()
    assert proc.poll() == 0  # the close outside the locks waited for it


def test_housekeeping_packs_loose_objects_while_another_writer_holds_the_lock(repo):
    """Packing objects takes no ref lock: it must not wait for (or hold) the write lock, or a
    server's writes queue behind it for seconds."""
    from conftest import lock_held_by_another_thread

    for i in range(5):
        team_fact(repo, f"fact number {i}", key=f"k{i}", new_key=True)
    loose_before = int(git(repo.root, "count-objects").split()[0])
    assert loose_before > 0
    with lock_held_by_another_thread(repo, at_most=30) as release:
        GitStore(repo.root).pack_objects(timeout=5)
        assert not release.is_set()
    assert int(git(repo.root, "count-objects").split()[0]) == 0
    assert_consistent(repo.root)


def test_housekeeping_does_not_pack_objects_while_an_erasure_holds_the_gate(repo):
    """A repack reading an old pack while an erasure prunes could write erased objects back:
    packing waits for the erasure (here: gives up, naming the gate)."""
    team_fact(repo, "a fact", key="k0", new_key=True)
    with repo.store.locked(erasure=True):
        with pytest.raises(LockTimeout, match="erasure"):
            GitStore(repo.root).pack_objects(timeout=0.3)
