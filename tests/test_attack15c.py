"""Attack 15c: the erasure gate's turnstile and dirty notes told from HEAD (commits 054b8bd, c5b5390,
f6d547d: GitStore._enter_gate/_leave_turnstile, locks.pass_turnstile, queries.dirty_note_paths and
refresh_stat_if_moved without a flush, erasure/forget.finish_interrupted).

Real processes, real git. Each test failed on f6d547d; its docstring says what broke, why it matters
and where. Fixed: GitStore.git flushes git's index first only for commands that read it (not log,
show, rev-list...: a reader never waits for the write lock that way); a flush that fails (git's own
index.lock) keeps its entries and is tried again later (FLUSH_RETRIES)."""
import subprocess
import time

from conftest import deferring_reader, forget_stalls_beside, git, stop, team_fact

from mdmem import MemoryRepo
from mdmem.storage import gitindex



# --- C1: the index lock and the gate, through trust's catch-up --------------------------------------

def test_forget_deadlocks_with_a_reader_whose_trust_catches_up_under_the_index_lock(with_secret):
    """C1. B2's deadlock (attack 15b) is still there by another road. A long-lived process with
    deferred index entries (store.index_delay, as the MCP server; 30 s here so the window is
    certain -- at 0.2 s it is a recall within 0.2 s of a remember, or any time after the timer's
    flush itself timed out) has recalled once and remembered once; another process then commits
    (any agent or person), a forget starts, and the first process recalls again. Its catch-up takes
    the search index lock (search/note_index.py:200), sees HEAD moved and asks trust for flags
    there (note_index.py:215 -> policy/verify.py:463 flags -> :144 _current -> store.changes_by_commit
    -> gitstore.py:515 git() -> flush_index:719 -> locked() -> pass_turnstile, locks.py:192): it
    waits for the erasure's turnstile while holding the index lock, and the forget, holding the gate,
    waits for that index lock in purge_caches (erasure/forget.py:351, 120 s). Neither moves until
    the reader's flush times out (LOCK_TIMEOUT_SECONDS, 60 s; flush_index swallows it and the
    entries stay due, so each further git() under the lock waits again): forget stalls a minute or
    more, or fails half way once the reader's waits pass the index lock's 120 s. 054b8bd took the
    flush out of dirty_note_paths only; every store.git() with flush=True under the index lock
    (trust's catch-up here, VersionsIndex.ensure -> commits_with_note_paths, search/versions.py:68)
    still takes the write lock. A normal forget here takes ~1-3 s; it must finish within 25 s.
    (Observed stack of the reader: note_index._sync:215 -> verify.flags:463 -> _current:144 ->
    changes_by_commit -> git:515 -> flush_index:719 -> locked:230 -> _enter_gate:273 ->
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


# --- C2: a copied repository: git's stat refresh runs beside this process's own deferred flush ------

def test_a_copied_repos_first_recall_loses_the_deferred_index_flush(repo, tmp_path):
    """C2. In a copied (or restored, or moved) repository, a long-lived process (store.index_delay,
    as the MCP server: 0.2 s) writes a note and recalls at once: the recall's walk runs
    refresh_stat_if_moved (storage/queries.py:221-248), which now runs `git update-index --refresh`
    WITHOUT flushing this process's deferred entries first (queries.py:239, flush=False, 054b8bd) and
    outside the write lock. Meanwhile the entries' timer fires (gitstore.py:707 _flush_later ->
    flush_index:712) and libgit2 finds git's index.lock held by that update-index: index.write()
    fails ("the index is locked", gitstore.py:743), flush_index swallows it (:745-746) AFTER taking
    the paths out of self._index_due (:720) -- so nothing in the process flushes them again. `git
    status` then shows the new note as a staged deletion plus an untracked file, and the scope's
    MEMORY.md as modified both ways, until some later write repairs the journal; the process's
    last_repair_error says "GitError: the index is locked". Before 054b8bd the refresh flushed first
    (synchronously), so the timer had nothing left to do. A refresh of a big work tree takes
    seconds (measured here with 30k tracked files copied by `cp -a`: update-index 1.5-2 s on a
    loaded machine; the race then hit 1 run in 3 with the real 0.2 s delay, no hook); here a
    core.fsmonitor hook that answers after 1.5 s stands in for the big tree, so the window is
    certain (git runs it while holding index.lock, as it hashes files then)."""
    kw = dict(as_user="bob", kind="fact", subject="service:billing", scope="team", team="payments")
    repo.remember("Deploys on Tuesday walrus", key="k0", new_key=True, **kw)
    repo.recall("walrus", as_user="bob")
    repo.close()
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo.root), str(copy)], check=True)
    hook = tmp_path / "fsmonitor-hook"
    hook.write_text("#!/bin/sh\nsleep 1.5\nexit 1\n")  # a slow watcher (a big tree): git scans itself
    hook.chmod(0o755)
    git(copy, "config", "core.fsmonitor", str(hook))
    moved = MemoryRepo.open(copy)
    try:
        moved.store.index_delay = gitindex.INDEX_DELAY_SECONDS  # as `mdmem serve` (cli/cmd_serve.py:27)
        moved.remember("Pager rota is weekly narwhal", key="k1", new_key=True, **kw)
        moved.recall("narwhal", as_user="bob")
        time.sleep(2 * gitindex.INDEX_DELAY_SECONDS + 0.5)  # the deferred entries' time is long past
        status = git(copy, "status", "--porcelain").stdout
        error = moved.store.last_repair_error
    finally:
        moved.close()
    assert status == "", f"git status after the deferred flush's time ({error}):\n{status}"
