"""Attack 15c: the erasure gate's turnstile and dirty notes told from HEAD (commits 054b8bd, c5b5390,
f6d547d: GitStore._enter_gate/_leave_turnstile, locks.pass_turnstile, queries.dirty_note_paths and
refresh_stat_if_moved without a flush, erasure/forget.finish_interrupted).

Real processes, real git. Each test failed on f6d547d; its docstring says what broke, why it matters
and where. Fixed: GitStore.git flushes git's index first only for commands that read it (not log,
show, rev-list...: a reader never waits for the write lock that way); a flush that fails (git's own
index.lock) keeps its entries and is tried again later (FLUSH_RETRIES)."""
import subprocess
import time

from conftest import git

from mdmem import MemoryRepo
from mdmem.storage import gitstore


# --- C1: the index lock and the gate, through trust's catch-up --------------------------------------


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
        moved.store.index_delay = gitstore.INDEX_DELAY_SECONDS  # as `mdmem serve` (cli/cmd_serve.py:27)
        moved.remember("Pager rota is weekly narwhal", key="k1", new_key=True, **kw)
        moved.recall("narwhal", as_user="bob")
        time.sleep(2 * gitstore.INDEX_DELAY_SECONDS + 0.5)  # the deferred entries' time is long past
        status = git(copy, "status", "--porcelain").stdout
        error = moved.store.last_repair_error
    finally:
        moved.close()
    assert status == "", f"git status after the deferred flush's time ({error}):\n{status}"
