"""Writers at once: two processes writing lose nothing, a stale or forked lock never stalls the
repository, and a person's hand commit landing during a write leaves fresh views and is found."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import T0, git_status, lock_held_by_another_thread, team_fact

from mdmem import MemoryRepo

WRITER = textwrap.dedent("""
    import sys
    from mdmem import MemoryRepo
    repo = MemoryRepo.open(sys.argv[1])
    who = sys.argv[2]
    for i in range(int(sys.argv[3])):
        repo.remember(f"{who} note {i}", as_user=who, kind="fact", subject="service:load",
                      key=f"{who}.{i}", scope="team", team="payments", new_key=True)
""")


def test_two_processes_writing_at_once_lose_nothing(repo):
    n = 25
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(repo.root), who, str(n)]) for who in ("bob", "dana")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    keys = {k.key for k in repo.keys(as_user="alice", subject="service:load", kind="fact")}
    assert keys == {f"{w}.{i}" for w in ("bob", "dana") for i in range(n)}
    commits = repo.store.git("log", "--format=%s", "--", "team/payments/service/load").splitlines()
    assert len(commits) == 2 * n
    assert git_status(repo.root) == ""


def test_a_stale_index_lock_does_not_block_the_repo_for_ever(repo):
    import os
    import time

    from conftest import team_fact
    lock = repo.root / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert team_fact(repo, "still writable").status == "committed"
    assert not lock.exists()


def test_a_store_made_while_its_thread_holds_the_lock_does_not_wait_for_it(repo):
    """The write lock is held by a thread, whichever GitStore took it: an erasure reloads its
    repo (a new store) while holding the lock, and that store's deferred flush of git's index
    waited for the lock its own thread held (found making the deferred index the default)."""
    from mdmem.storage.gitstore import GitStore

    with repo.store.locked():
        other = GitStore(repo.root)
        assert other.holds_lock()
        with other.locked(timeout=2):  # LockTimeout after 2 s before
            pass
        assert repo.store.holds_lock() and other.holds_lock()
    assert not repo.store.holds_lock() and not other.holds_lock()
    with other.locked(timeout=2):
        assert repo.store.holds_lock()  # taken through the other store: held all the same


FORK_CHILD = textwrap.dedent("""
    import os, sys
    from mdmem.errors import LockTimeout
    from mdmem.storage.gitstore import GitStore
    s1, s2 = GitStore(sys.argv[1]), GitStore(sys.argv[1])
    with s1.locked():
        pid = os.fork()
        if pid == 0 and GitStore(sys.argv[1]).holds_lock():
            os._exit(4)  # a store made in the child believed it held the parent's write lock
    if pid == 0:  # the child, out of the write it was forked in
        try:
            with s2.locked(timeout=2):
                pass
        except LockTimeout:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_a_child_forked_under_the_lock_neither_inherits_nor_stalls_other_stores(repo):
    """Forked inside a write: a store made in the child does not think it holds the parent's
    lock (exit 4), and another store of the child takes the lock once the write is left,
    instead of waiting out its timeout on a thread lock nobody holds (exit 3)."""
    proc = subprocess.run([sys.executable, "-c", FORK_CHILD, str(repo.root)], timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize("how", ["symlink", "dotdot"])
def test_a_store_reaching_the_repo_another_way_sees_the_lock_its_thread_holds(repo, tmp_path, how):
    """The lock is recorded by the lock folder's real path."""
    from mdmem.storage.gitstore import GitStore

    if how == "symlink":
        other_path = tmp_path / "link"
        other_path.symlink_to(repo.root)
    else:
        (tmp_path / "sub").mkdir()
        other_path = tmp_path / "sub" / ".." / repo.root.name
    with repo.store.locked():
        other = GitStore(other_path)
        assert other.holds_lock()
        with other.locked(timeout=2):
            pass


ROOT = "team/payments"


BIN = str(Path(sys.executable).parent)


def person_commits(repo_root: Path, key: str, text: str, *, ident: str = "01M8QDE4Q4HC4RW10BA82MM999") -> None:
    """A person adds a team note with plain git (mdmem's pre-commit hook regenerates the view),
    as bob, a permitted writer: the note belongs in the team view."""
    src = repo_root / ROOT / "service/billing/fact/deploy.window.md"
    data = src.read_text()
    first_id = data.split("id: ", 1)[1].split("\n", 1)[0]
    data = data.replace("key: deploy.window", f"key: {key}").replace(first_id, ident)
    data = data.rsplit("---\n", 1)[0] + f"---\n\n{text}\n"
    dst = repo_root / ROOT / f"service/billing/fact/{key}.md"
    dst.write_text(data)
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    for args in (["add", str(dst.relative_to(repo_root))],
                 ["-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-q", "-m", f"hand {key}"]):
        r = subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def stale_views(root: Path) -> list[str]:
    """stale_views as a new process sees it (no kept per-root state)."""
    other = MemoryRepo.open(root)
    try:
        return other.stale_views()
    finally:
        other.close()


def write_while_a_person_commits(repo, text: str) -> bool:
    """A remember during which a person's `git commit` of ``text`` (key hand.key) lands right
    before mdmem's own commit; whether the person's commit was made."""
    store = repo.store
    original = store.commit
    fired = []

    def commit_after_a_person(*args, **kwargs):
        if not fired:
            fired.append(1)
            person_commits(repo.root, "hand.key", text)
        return original(*args, **kwargs)

    store.commit = commit_after_a_person
    try:
        team_fact(repo, "Rollbacks need a second reviewer", key="rollback.review", new_key=True, now=T0)
    finally:
        del store.commit
    return bool(fired)


def test_a_hand_commit_landing_during_a_write_does_not_leave_a_stale_view(repo):
    """A person commits a team note with git (the pre-commit hook does not take mdmem's write
    lock) while an agent's remember is between rendering its views and moving the branch.
    store.commit reads the branch tip again and commits on the person's commit, but with the
    team view rendered from the tip before it: the committed view lacks the person's note.
    Expected: BranchMoved-and-retry (commit_changes passing expect_tip=the head it rendered
    from), so the committed view lists both notes."""
    team_fact(repo, "Deploys before 3pm", now=T0)
    assert write_while_a_person_commits(repo, "Hand written fact")
    view = (repo.root / ROOT / "MEMORY.md").read_text()
    assert "hand.key" in view and "rollback.review" in view, view
    assert stale_views(repo.root) == []


def test_the_kept_state_is_not_promoted_for_a_commit_made_on_another_parent(repo):
    """Same race; then the SAME process keeps writing. committed(rev, parent, ...) is told the
    head read before store.commit, not the commit's real parent, so the patched state (no
    person's note) is promoted as the new commit's state: every later view this process
    commits for the root omits the person's note, and this process's own stale_views() (which
    renders from the same kept state) says [] while a fresh process says the view is stale."""
    team_fact(repo, "Deploys before 3pm", now=T0)
    write_while_a_person_commits(repo, "Hand written fact")
    # Later writes of this long-lived process (an MCP server) to the same root.
    team_fact(repo, "Freeze on Fridays", key="freeze", new_key=True, now=T0)
    view = (repo.root / ROOT / "MEMORY.md").read_text()
    assert "hand.key" in view, view
    assert repo.stale_views() == stale_views(repo.root) == []


def test_a_hand_commit_landing_during_a_write_is_still_found_by_recall(repo):
    """Same race, seen by the search index: repo.committed() tells NoteIndex that the new
    commit is its parent (the head read BEFORE store.commit) plus the write's own paths, so
    the index catches up along that hint and records the new commit as indexed without the
    person's note. The note is then missing from recall in this process and in every later
    one (state.json claims a commit the index lacks) until something rewrites that note.
    (A new process that catches up first diffs trees and finds it: the lie is the hint's.)"""
    team_fact(repo, "Deploys before 3pm", now=T0)
    assert repo.recall("deploys", as_user="bob")  # the index is at HEAD
    write_while_a_person_commits(repo, "Zebra giraffe hand written fact")
    wanted = f"{ROOT}/service/billing/fact/hand.key.md"
    # The same long-lived process (an MCP server) recalls next: it catches up along the hint.
    same = [h.path for h in repo.recall("zebra giraffe", as_user="bob")]
    repo.close()
    later = MemoryRepo.open(repo.root)
    try:
        hits = [h.path for h in later.recall("zebra giraffe", as_user="bob")]
    finally:
        later.close()
    assert wanted in same and wanted in hits, (same, hits)


def test_a_process_forked_while_another_thread_writes_can_still_write(repo):
    """A program using the Python API forks (multiprocessing's default start method on Linux
    before 3.14, a preloading server) while one of its threads is inside a write. The child
    inherits GitStore._threads_lock LOCKED, held by a thread that does not exist in the child:
    every write of the child waits LOCK_TIMEOUT_SECONDS and fails with "another thread of this
    process held this lock", forever. Before 178aa41 (file lock only) the child waited for the
    parent's write and went on. Expected: the child can take the lock once the parent let go
    (e.g. os.register_at_fork(after_in_child=...) giving the store a fresh thread lock)."""
    team_fact(repo, "Deploys before 3pm", now=T0)
    with lock_held_by_another_thread(repo):  # the parent's write ends right after the fork
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only this thread exists
            os.close(r)
            status = b"?"
            try:
                with repo.store.locked(timeout=3):
                    team_fact(repo, "Written by the forked child", key="child", new_key=True, now=T0)
                status = b"ok"
            except BaseException as exc:  # noqa: BLE001 -- reported to the parent
                status = f"{type(exc).__name__}: {exc}".encode()
            finally:
                os.write(w, status)
                os._exit(0)
        os.close(w)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert out == b"ok", out.decode()
    assert git_status(repo.root) == ""
