"""The write side of speed: what a write leaves for the next recall is done without a pass
over every note (verify's flags move on with the notes a write changed) — and the answers
equal a whole pass."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import T1, team_fact

from mdmem import MemoryRepo
from mdmem.policy.verify import Verifier
from mdmem.search import note_index
from mdmem.storage.tree_watch import INotify
from mdmem.storage.gitdir import cache_dir


def plain_commit(root: Path, path: str, text: str, *, email: str) -> None:
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    subprocess.run(["git", "-C", str(root), "add", path], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=x", "-c", f"user.email={email}", "commit", "-q",
                    "--no-verify", "-m", "by hand"], check=True)


def whole_pass(repo) -> dict:
    fresh = Verifier(repo)
    fresh.path = cache_dir(repo.root) / "verify-fresh.json"  # not the cache under test
    return fresh.flags()


def test_flags_moved_on_by_writes_equal_a_whole_pass(repo):
    team_fact(repo, "Billing deploys before 3pm", key="deploy.window", new_key=True)
    assert repo.trust.flags() == whole_pass(repo) == {}
    # mdmem's own writes (moved on without git), then a planted note by someone who may not
    # write the root, then a permitted person's hand commit fixing another note, then more writes.
    team_fact(repo, "Refunds within 30 days", key="refund.window", new_key=True)
    team_fact(repo, "Billing deploys before 4pm", key="deploy.window", now=T1)
    assert repo.trust.flags() == whole_pass(repo) == {}
    planted = repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window")
    text = (repo.root / planted.path).read_text().replace("30 days", "300 days")
    plain_commit(repo.root, planted.path, text, email="mallory@example.com")
    flags = repo.trust.flags()
    assert list(flags) == [planted.path] and "mallory@example.com" in flags[planted.path].detail
    assert flags == whole_pass(repo)
    team_fact(repo, "Search indexes nightly", key="index.schedule", subject="service:search", new_key=True)
    team_fact(repo, "Search indexes hourly", key="index.schedule", subject="service:search", now=T1)
    assert repo.trust.flags() == whole_pass(repo) and planted.path in repo.trust.flags()
    # A permitted writer commits the planted note again: trusted from then on.
    plain_commit(repo.root, planted.path, text.replace("300 days", "31 days"), email="dana@mdmem.invalid")
    team_fact(repo, "Payouts run at 6am", key="payout.time", subject="service:payouts", new_key=True)
    assert repo.trust.flags() == whole_pass(repo) == {}


# --- the in-memory segment: a write is searchable without touching the index on disk -------
needs_inotify = pytest.mark.skipif(INotify is None, reason="the in-memory path follows inotify's events (Linux)")


def settled(repo):
    """The repo after the two calls that walk the tree (see test_freshness): from here on a
    catch-up of a few notes goes to the in-memory segment."""
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    team_fact(repo, "Billing deploys any weekday before 3pm", new_key=True)
    repo.recall("refunds", as_user="bob", now=T1)
    repo.recall("refunds", as_user="bob", now=T1)
    return repo


def on_disk(repo) -> tuple[bytes, list[str]]:
    folder = cache_dir(repo.root) / "fulltext"
    return (cache_dir(repo.root) / "state.json").read_bytes(), sorted(os.listdir(folder))


@needs_inotify
def test_a_write_is_found_from_memory_and_its_old_version_is_not(repo):
    r = settled(repo)
    before = on_disk(repo)
    team_fact(repo, "Refunds are allowed within 45 days", key="refund.window", now=T1)
    team_fact(repo, "Payouts settle at 6am", key="payout.time", subject="service:payouts", new_key=True, now=T1)
    hits = r.recall("refunds days", as_user="bob", now=T1)
    assert [h.text for h in hits if "Refunds" in h.text] == ["Refunds are allowed within 45 days"]
    assert r.recall("payouts settle", as_user="bob", now=T1)[0].text == "Payouts settle at 6am"
    assert on_disk(repo) == before  # nothing written to the index on disk
    # A note deleted by hand leaves memory and disk alike.
    payout = repo.root / repo.get(as_user="bob", subject="service:payouts", kind="fact", key="payout.time").path
    deploy = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window").path
    payout.unlink()
    deploy.unlink()
    assert r.recall("payouts settle", as_user="bob", now=T1) == []
    assert r.recall("billing deploys weekday", as_user="bob", now=T1) == []


@needs_inotify
def test_more_than_memory_holds_goes_to_disk_with_the_hand_edits_it_held(repo, monkeypatch):
    r = settled(repo)
    monkeypatch.setattr(note_index, "RECENT_MAX", 3)
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    note.write_text(note.read_text().replace("30 days", "60 days"))  # by hand: into memory
    assert "60 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    state, _ = on_disk(repo)
    for i in range(4):  # past what memory holds: one catch-up to disk
        team_fact(repo, f"Ledger closes at {i}pm", key=f"ledger.close{i}", subject="service:ledger", new_key=True)
    assert len(r.recall("ledger closes", as_user="bob", now=T1, k=10)) == 4
    assert on_disk(repo)[0] != state
    assert list(repo.index.dirty_state()) == [str(note.relative_to(repo.root))]
    assert "60 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    fresh = MemoryRepo.open(repo.root)  # reads only the disk index (its first call walks: nothing new)
    assert "60 days" in fresh.recall("refund window", as_user="bob", now=T1)[0].text
    assert fresh.index.dirty_state() == repo.index.dirty_state() and list(repo.index.dirty_state()) == [
        str(note.relative_to(repo.root))]


@needs_inotify
def test_another_process_moving_the_disk_index_on_replaces_memory(repo):
    r = settled(repo)
    team_fact(repo, "Refunds are allowed within 45 days", key="refund.window", now=T1)
    assert "45 days" in r.recall("refund window", as_user="bob", now=T1)[0].text  # from memory
    other = MemoryRepo.open(repo.root)
    team_fact(other, "Refunds are allowed within 90 days", key="refund.window", now=T1)
    team_fact(other, "Payouts settle at 6am", key="payout.time", subject="service:payouts", new_key=True, now=T1)
    other.recall("refund window", as_user="bob", now=T1)  # its first call: a catch-up on disk
    other.close()
    texts = [h.text for h in r.recall("refunds days", as_user="bob", now=T1)]
    assert "Refunds are allowed within 90 days" in texts and not any("45" in t or "30" in t for t in texts)
    assert r.recall("payouts settle", as_user="bob", now=T1)[0].text == "Payouts settle at 6am"


KILLED_HOLDER = r"""
import os, signal, sys
from mdmem import MemoryRepo
repo = MemoryRepo.open(sys.argv[1])
for _ in range(2):
    repo.recall("refunds", as_user="bob", now="2026-10-15T09:00:00Z")
repo.remember("Refunds are allowed within 120 days", as_user="bob", kind="fact", subject="service:billing",
              key="refund.window", scope="team", team="payments", now="2026-10-15T09:00:00Z")
repo.remember("Payouts settle at 6am", as_user="bob", kind="fact", subject="service:payouts",
              key="payout.time", scope="team", team="payments", new_key=True, now="2026-10-15T09:00:00Z")
assert "120 days" in repo.recall("refund window", as_user="bob", now="2026-10-15T09:00:00Z")[0].text
os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_inotify
def test_a_process_killed_while_holding_notes_in_memory_loses_nothing(repo):
    settled(repo)
    repo.close()
    before = on_disk(repo)
    proc = subprocess.run([sys.executable, "-c", KILLED_HOLDER, str(repo.root)],
                                        env={**os.environ, "MDMEM_EMBEDDER": "none"}, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert on_disk(repo) == before  # it had written nothing to the index on disk
    fresh = MemoryRepo.open(repo.root)
    assert "120 days" in fresh.recall("refund window", as_user="bob", now=T1)[0].text
    assert fresh.recall("payouts settle", as_user="bob", now=T1)[0].text == "Payouts settle at 6am"
    assert not any("30 days" in h.text for h in fresh.recall("refunds days", as_user="bob", now=T1))



# --- git's index written after a burst of writes (the MCP server's setting) -------------------
DEFERRED_WRITER = r"""
import os, signal, sys
from mdmem import MemoryRepo
from mdmem.storage.gitindex import INDEX_DELAY_SECONDS
repo = MemoryRepo.open(sys.argv[1])
repo.store.index_delay = 60 if sys.argv[2] == "kill" else INDEX_DELAY_SECONDS
for i in range(3):
    repo.remember(f"Ledger closes at {i}pm", as_user="bob", kind="fact", subject="service:ledger",
                  key=f"ledger.close{i}", scope="team", team="payments", new_key=True, now="2026-10-01T09:00:00Z")
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
# "exit": leaves without closing the repo; the entries are written at exit
"""


def deferred_writer(root, how):
    return subprocess.run([sys.executable, "-c", DEFERRED_WRITER, str(root), how], capture_output=True, text=True,
                          env={**os.environ, "MDMEM_EMBEDDER": "none"})


def git_status(root) -> str:
    return subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True).stdout


def test_deferred_index_entries_are_written_soon_and_on_close(repo):
    from mdmem.storage.gitindex import INDEX_DELAY_SECONDS

    repo.store.index_delay = INDEX_DELAY_SECONDS
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    assert repo.store.pending_path.exists()  # the journal holds the entry until it is written
    deadline = time.monotonic() + 10
    while repo.store.pending_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert git_status(repo.root) == "" and not repo.store.pending_path.exists()
    repo.store.index_delay = 60  # no timer in reach: close writes them
    team_fact(repo, "Refunds are allowed within 45 days", key="refund.window", now=T1)
    assert git_status(repo.root) != ""
    repo.close()
    assert git_status(repo.root) == "" and not repo.store.pending_path.exists()


def test_a_person_editing_before_the_entries_are_written_keeps_the_edit_unstaged(repo):
    repo.store.index_delay = 60
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    path = repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    full = repo.root / path
    full.write_text(full.read_text().replace("30 days", "31 days"))
    repo.store.flush_index()
    assert git_status(repo.root) == f" M {path}\n"  # HEAD == index; only the person's edit shows
    diff = subprocess.run(["git", "-C", str(repo.root), "diff", "--cached", "--stat"], capture_output=True,
                          text=True).stdout
    assert diff == ""


@pytest.mark.parametrize("how", ["kill", "exit"])
def test_deferred_entries_survive_a_kill_and_an_exit_without_close(repo, how):
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    proc = deferred_writer(repo.root, how)
    assert proc.returncode == (-signal.SIGKILL if how == "kill" else 0), proc.stderr
    if how == "kill":
        assert git_status(repo.root) != ""  # three commits whose index entries were never written
    reopened = MemoryRepo.open(repo.root)  # repairs from the journal
    assert git_status(repo.root) == "" and not reopened.store.pending_path.exists()
    assert len(reopened.recall("ledger closes", as_user="bob", now=T1, k=5)) == 3


def test_another_writer_meanwhile_keeps_both_sets_of_entries(repo):
    repo.store.index_delay = 60
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    other = MemoryRepo.open(repo.root)  # per-commit index (the default), its own journal entries
    team_fact(other, "Payouts settle at 6am", key="payout.time", subject="service:payouts", new_key=True)
    team_fact(repo, "Billing deploys before 3pm", key="deploy.window", new_key=True)
    repo.close()
    other.close()
    assert git_status(repo.root) == "" and not repo.store.pending_path.exists()


@pytest.mark.parametrize("how", ["as-is", "all"])
def test_a_person_committing_while_entries_are_due_does_not_revert_mdmems_notes(repo, how):
    """The deferred index's window: git's index still holds the versions before mdmem's last
    commits when a person runs `git commit`. mdmem's pre-commit hook puts HEAD's entries in
    (without it, a plain commit of some other file committed a revert of mdmem's notes)."""
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    repo.store.index_delay = 60  # entries stay due while the person commits
    team_fact(repo, "Refunds are allowed within 45 days", key="refund.window", now=T1)
    team_fact(repo, "Payouts settle at 6am", key="payout.time", subject="service:payouts", new_key=True, now=T1)
    assert "M " in git_status(repo.root)  # staged as reverted: the window
    before = subprocess.run(["git", "-C", str(repo.root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    (repo.root / "todo.txt").write_text("a person's own file\n")
    subprocess.run(["git", "-C", str(repo.root), "add", "todo.txt"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid",
                    "commit", "-q", *(["-a"] if how == "all" else []), "-m", "my todo"], check=True)
    changed = subprocess.run(["git", "-C", str(repo.root), "diff", "--name-only", before, "HEAD"],
                             capture_output=True, text=True).stdout.split()
    assert changed == ["todo.txt"]
    assert git_status(repo.root) == ""
    repo.close()
    assert git_status(repo.root) == "" and not repo.store.pending_path.exists()
    fresh = MemoryRepo.open(repo.root)
    assert "45 days" in fresh.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").note.text


def test_a_forget_keeps_the_deferral_and_does_not_wait_for_itself(repo):
    """A forget remakes the repo's GitStore while holding the write lock: the MCP server's
    index_delay was dropped there (carrying it over stalled the forget: the new store's flush
    waited for the lock its own thread held through the old store)."""
    repo.store.index_delay = 60  # entries stay due: the new store must flush them itself
    repo.remember("My locker code is 4711", as_user="bob", kind="fact", subject="person:bob", key="locker",
                  scope="private")
    team_fact(repo, "Billing deploys on Tuesdays", key="deploy.window", new_key=True)
    started = time.monotonic()
    repo.forget(as_user="bob", texts=["My locker code is 4711"], force=True)
    assert time.monotonic() - started < 30
    assert repo.store.index_delay == 60
    team_fact(repo, "Billing deploys on Wednesdays", key="deploy.window")
    repo.close()
    assert git_status(repo.root) == "" and not repo.store.pending_path.exists()


def test_a_write_reads_each_folder_tree_once(repo, monkeypatch):
    """A write reads the note's folders to check its version, to edit them and to journal the
    paths: the big subject folder (57 KB at 100k notes, ~0.6 ms to read; libgit2 keeps no tree
    over 4 KB) was read three times a write. Now once."""
    import pygit2

    for i in range(3):
        team_fact(repo, f"Billing fact number {i} for the folder", key=f"fold.k{i}", subject=f"service:s{i}")
    repo.store.index_delay = 0.2  # the MCP server's way: the journal runs on every write
    folder = str(repo.store.repo.revparse_single("HEAD:team/payments/service").id)
    looked_up: list[str] = []
    real = pygit2.Repository.__getitem__

    def counting(self, key):
        looked_up.append(str(key))
        return real(self, key)

    monkeypatch.setattr(pygit2.Repository, "__getitem__", counting)
    result = team_fact(repo, "Billing fact written with the folder read once", key="fold.once", subject="service:s1",
                       new_key=True)
    monkeypatch.undo()
    assert result.status == "committed" and looked_up.count(folder) == 1


def test_deferred_index_entries_wait_longer_where_git_index_is_slow_to_write(repo):
    """A rewrite of git's index holds the write lock (~50 ms at 100k notes): flushes 0.2 s apart
    held it a fifth of the time and writes queued behind them. The next flush waits 50 times
    what the last one took (at most 5 s for that), and still comes."""
    from mdmem.storage.gitindex import INDEX_DELAY_SECONDS

    repo.store.index_delay = INDEX_DELAY_SECONDS
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    repo.store.flush_index()
    assert 0 < repo.store.flush_seconds < 0.02  # this small repository's index: a quick rewrite
    repo.store.flush_seconds = 0.03  # as if it had taken 30 ms: the next waits 1.5 s
    started = time.monotonic()
    team_fact(repo, "Refunds are allowed within 45 days", key="refund.window", now=T1)
    time.sleep(0.8)
    assert repo.store.pending_path.exists() and git_status(repo.root) != ""
    while repo.store.pending_path.exists() and time.monotonic() < started + 10:
        time.sleep(0.05)
    assert 1.4 < time.monotonic() - started < 5 and git_status(repo.root) == ""


def test_looking_up_paths_a_tree_does_not_hold_keeps_no_memory(repo):
    """pygit2 keeps a reference to the string a tree lookup is given when it misses or goes
    through folders: each write's lookups of new paths lived for ever in a long-lived server.
    Every lookup goes through storage.objects.tree_entry, which hands over one interned string
    per name."""
    import tracemalloc

    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    store = repo.store
    for i in range(50):  # the first calls' own allocations (caches, interned names) first
        store.blob_id(f"team/payments/service/billing/fact/missing{i % 5}.md")
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(3000):
            # fresh strings for the same few paths, as each write builds them
            store.blob_id("/".join(["team", "payments", "service", "billing", "fact", f"missing{i % 5}.md"]))
            store.blob_id("/".join(["team", "payments", f"nowhere{i % 5}", "x.md"]))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, grown  # before: ~53 bytes per lookup, ~300 KB here


def test_libgit2_keeps_a_bounded_cache_of_parsed_objects(repo):
    """libgit2's object cache holds up to 256 MB by default, and a long-lived server parses new
    trees with every write: mdmem bounds it when the store is loaded, small (the cache counts
    raw sizes; at 16 MB a server's heap was still filling it after 10 minutes of writes)."""
    import pygit2

    from mdmem.storage.gitstore import LIBGIT2_CACHE_BYTES

    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    used, limit = pygit2.settings.cached_memory
    assert limit == LIBGIT2_CACHE_BYTES <= 4 * 1024 * 1024 and used <= limit


@pytest.mark.skipif(INotify is None, reason="the in-memory path follows inotify's events (Linux)")
def test_a_catch_up_that_read_head_before_writes_does_not_judge_every_note_again(repo, monkeypatch):
    """A server's recall reads HEAD, then writes commit and tell the verifier: the catch-up
    asks the verifier about HEAD, not the head it read (a head behind the verifier's cache was
    judged from the first commit again: 1.2 s at 10k notes, every recall waiting behind it)."""
    team_fact(repo, "Billing deploys before 3pm", key="deploy.window", new_key=True)
    for _ in range(2):  # the calls that walk the tree; from here a write's catch-up is in memory
        repo.recall("billing deploys", as_user="bob", now=T1)
    team_fact(repo, "Refunds take 30 days", key="refund.window", new_key=True)
    read_before = repo.store.head()
    team_fact(repo, "Refunds take 45 days", key="refund.window")  # each told the verifier at once
    team_fact(repo, "Payouts settle at 6am", key="payout.time", new_key=True)
    real_head, asked = repo.store.head, []
    answers = iter([read_before])
    monkeypatch.setattr(repo.store, "head", lambda: next(answers, None) or real_head())
    real_log = repo.store.changes_by_commit
    monkeypatch.setattr(repo.store, "changes_by_commit",
                        lambda head, since, *a, **k: asked.append(since) or real_log(head, since, *a, **k))
    repo.index.sync()
    assert None not in asked  # never the whole history
    assert "45 days" in repo.recall("refund window", as_user="bob", now=T1)[0].text
