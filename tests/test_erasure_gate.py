"""The erasure gate: an erasure waits for the writers and readers already in, lets no new writer in
until it ends, is never starved by writers in a loop nor deadlocked by a reader holding the index
lock, and a process opening the repository meanwhile is told of the erasure only once the gate is
free. Real processes, real git, real `git worktree add`."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from conftest import T1, deferring_reader, erasure_journal, forget_stalls_beside, start_python, stop, team_fact

from mdmem import MemoryRepo
from mdmem.errors import Conflict, LockTimeout
from mdmem.search.note_index import index_lock
from mdmem.storage import locking


def test_two_writers_in_a_loop_starve_forget(with_worktree, monkeypatch):
    """Two processes remembering in a loop in the same worktree (two agents, an MCP server
    and a script): `forget` in the main worktree never gets the gate and fails with LockTimeout
    ("writers in this repository's worktrees held it for 60s; try again") -- and trying again
    fails the same way for as long as they write. Measured: with LOCK_TIMEOUT_SECONDS=10 it
    failed every time while forget waited for the linked worktrees' writers; taking the write locks
    instead, the same forget succeeded in ~5 s. An erasure (a GDPR-style request) that cannot run while the memory
    is in use is a real failure.

    Cause: GitStore.locked (mdmem/storage/locking.py) takes the gate SHARED before
    waiting (up to 60 s) for its worktree's write lock: a writer queued behind another keeps the
    gate held the whole time it waits, so with two writers the gate is never free (each takes it
    again before the other lets it go). flock has no writer preference, and the eraser only
    polls LOCK_EX|LOCK_NB every 5 ms (storage/), so it
    never wins. Writers should not hold the gate while queuing (take the write lock first and
    the gate with a try, or let a waiting eraser announce itself so new writers back off)."""
    repo, _ = with_worktree
    writers = [start_python(f"""
        import time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(repo.root)!r}, finish_erasure=False)
        print("open", flush=True)
        t, i = time.monotonic(), 0
        while time.monotonic() - t < 40:
            try:
                r.remember(f"Writer {k} fact {{i}}", as_user="bob", kind="fact", subject="service:billing",
                           key=f"w{k}-{{i}}", scope="team", team="payments", new_key=True)
            except Exception as e:
                print("err", type(e).__name__, e, flush=True)
            i += 1
    """) for k in range(2)]
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "open", w.stderr.read()
        time.sleep(1.0)
        monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 10.0)
        t = time.monotonic()
        try:
            repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
            error = None
        except LockTimeout as exc:
            error = exc
        waited = time.monotonic() - t
    finally:
        stop(*writers)
    assert error is None, f"forget starved by two writers, after {waited:.1f}s: {error}"


def test_forget_deadlocks_with_a_reader_holding_the_index_lock(with_worktree):
    """A long-lived process with deferred index entries (the MCP server sets
    store.index_delay; here 30 s so the window is certain) remembers a note, then runs a
    recall that walks the work tree (its first call; also after a watch overflow or without
    inotify) while another process's forget holds the gate. The recall takes the search index
    lock (search/note_index.py:200 -> _rebuild -> _worktree_dirty:388 -> queries.py:195
    dirty_note_paths -> flush_index) and waits for the gate (storage/ -> locked); the
    forget, holding the gate, reaches purge_caches and waits for that same index lock
    (erasure/forget.py:331, folder_index_lock, 120 s). Neither moves until the reader's
    flush times out -- and flush_index swallows the LockTimeout, so the reader then waits again
    at the next self.git() (refresh_stat_if_moved): measured 2 x LOCK_TIMEOUT_SECONDS = 120 s,
    exactly the index lock's 120 s, so at the defaults forget itself may fail with LockTimeout
    half way (journal left at "cleaned", every linked worktree refused until it is resumed).
    Taking the write locks instead deadlocks the same way; the gate alone did not fix it. A normal forget here takes ~1-2 s; this one must finish within 25 s."""
    repo, _ = with_worktree
    reader = deferring_reader(repo.root)
    result: dict = {}
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
    except BaseException:
        stop(reader)
        raise
    stalled = forget_stalls_beside(repo, reader, result)  # stopping the reader frees the index lock
    assert not stalled, "forget stalled > 25 s: it holds the gate and waits for the index lock a reader " \
                        "holds while that reader waits for the gate"
    assert "error" not in result, result


def test_a_linked_worktree_opened_while_forget_runs_is_told_the_erasure_was_interrupted(with_worktree):
    """While a forget runs in the main worktree, opening the repository in a linked worktree
    (MemoryRepo.open, every `mdmem` CLI command there, starting the MCP server or the daemon
    there) fails at once with Conflict: "<wt> is a linked worktree: an interrupted erasure must be
    finished (open it there, or run `mdmem forget --resume` there) in the repository's main
    worktree ...; until then this worktree is not used". Nothing was interrupted: the erasure
    is running and ends a moment later. The user is told to run `forget --resume`, which, run
    during the live erasure, would race it. (Measured with the CLI: `mdmem recall` in the linked
    worktree exits 5 with that message; the same open in the main worktree waits and succeeds.)

    Cause: MemoryRepo.__init__ (mdmem/repo.py:82-83) calls finish_erasure when
    erasure/journal.pending() -- the journal exists from the plan to the end of every erasure,
    running or interrupted -- and MemoryRepo.finish_erasure (repo.py:330) now calls
    require_main_worktree(finishing=True) before taking any lock (d86c6c5 moved it out of the
    lock), so a running erasure is reported as an interrupted one. It should wait for the gate
    (shared) and look at the journal again: only a journal nobody's gate protects is interrupted.
    The forget is kept running by a reader holding the index lock (purge_caches waits for it),
    released after 3 s; the open must wait for the erasure and then succeed."""
    repo, wt = with_worktree
    repo.close()
    held = index_lock(repo.root)
    held.acquire(timeout=10)
    env = {**os.environ, "MDMEM_USER": "alice", "MDMEM_DAEMON_AUTOSTART": "0"}
    eraser = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "forget", "--owner", "alice",
                               "--subject", "user:alice"], cwd=repo.root, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    releaser = threading.Timer(3.0, held.release)
    try:
        t = time.monotonic()
        while not erasure_journal(repo).exists() and time.monotonic() - t < 30:
            time.sleep(0.02)
        assert erasure_journal(repo).exists(), "the forget never started"
        releaser.start()
        try:
            linked = MemoryRepo.open(wt)
            error = None
        except Conflict as exc:
            error = exc
        else:
            linked.close()
        out, err = eraser.communicate(timeout=120)
    finally:
        releaser.cancel()
        held.release()
        stop(eraser)
    assert eraser.returncode == 0, err
    assert error is None, f"opening the linked worktree during a running erasure: {error}"


def test_forget_deadlocks_with_a_reader_whose_trust_catches_up_under_the_index_lock(with_secret):
    """The deadlock of a reader holding the index lock (above) is still there by another road. A long-lived process with
    deferred index entries (store.index_delay, as the MCP server; 30 s here so the window is
    certain -- at 0.2 s it is a recall within 0.2 s of a remember, or any time after the timer's
    flush itself timed out) has recalled once and remembered once; another process then commits
    (any agent or person), a forget starts, and the first process recalls again. Its catch-up takes
    the search index lock (search/note_index.py:200), sees HEAD moved and asks trust for flags
    there (note_index.py:215 -> policy/verify.py:463 flags -> :144 _current -> store.changes_by_commit
    -> storage/ git() -> flush_index -> locked() -> pass_turnstile, locks.py): it
    waits for the erasure's turnstile while holding the index lock, and the forget, holding the gate,
    waits for that index lock in purge_caches (erasure/forget.py:351, 120 s). Neither moves until
    the reader's flush times out (LOCK_TIMEOUT_SECONDS, 60 s; flush_index swallows it and the
    entries stay due, so each further git() under the lock waits again): forget stalls a minute or
    more, or fails half way once the reader's waits pass the index lock's 120 s. 054b8bd took the
    flush out of dirty_note_paths only; every store.git() with flush=True under the index lock
    (trust's catch-up here, VersionsIndex.ensure -> commits_with_note_paths, search/versions.py:68)
    still takes the write lock. A normal forget here takes ~1-3 s; it must finish within 25 s.
    (Observed stack of the reader: note_index._sync:215 -> verify.flags:463 -> _current:144 ->
    changes_by_commit -> git:515 -> flush_index -> locked:230 -> _enter_gate:273 ->
    pass_turnstile:192.)"""
    repo = with_secret
    reader = deferring_reader(repo.root, recall_first=True, env={"MDMEM_EMBEDDER": "none"})
    result: dict = {}
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        # Another process's commit: the reader's trust state (at its own commit) must catch up.
        team_fact(repo, "Deploys happen on Wednesdays now", key="deploy.window2", new_key=True)
    except BaseException:
        stop(reader)
        raise
    stalled = forget_stalls_beside(repo, reader, result)
    assert not stalled, "forget stalled > 25 s"
    assert "error" not in result, result
