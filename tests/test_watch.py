import json
import subprocess
import sys
import time

from conftest import T0, git_status, team_fact

from mdmem.watch import Watcher


def wait_for(predicate, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_saved_note_is_reindexed_within_a_second(repo):
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    events = []
    watcher = Watcher(repo, events.append).start()
    try:
        note = repo.root / r.path
        started = time.monotonic()
        note.write_text(note.read_text().replace("30 days", "45 days for marketplace orders"))
        assert wait_for(lambda: any(e.status == "indexed" for e in events), timeout=1.0)
        elapsed = time.monotonic() - started
        repo.index.worktree_check_seconds = 3600  # the watcher, not the poll, must have done it
        hits = repo.recall("marketplace refunds", as_user="bob", now=T0)
        assert "45 days" in hits[0].text and elapsed < 1.0
    finally:
        watcher.stop()


def test_a_broken_save_is_reported_kept_out_and_left_on_disk(repo):
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    events = []
    watcher = Watcher(repo, events.append).start()
    try:
        note = repo.root / r.path
        broken = note.read_text().replace("kind: fact", "kind: gossip")
        note.write_text(broken)
        assert wait_for(lambda: any(e.status == "invalid" for e in events))
        bad = next(e for e in events if e.status == "invalid")
        assert bad.path == r.path and bad.detail.startswith("kind: ")
        assert note.read_text() == broken
        repo.index.worktree_check_seconds = 3600
        assert all(h.path != r.path for h in repo.recall("refunds", as_user="bob", now=T0))
    finally:
        watcher.stop()


def test_commit_mode_commits_valid_edits_as_the_human(repo):
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    subprocess.run(["git", "-C", str(repo.root), "config", "user.name", "Pat Person"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "config", "user.email", "pat@example.org"], check=True)
    events = []
    watcher = Watcher(repo, events.append, commit=True).start()
    try:
        note = repo.root / r.path
        note.write_text(note.read_text().replace("30 days", "60 days"))
        assert wait_for(lambda: any(e.status == "committed" for e in events))
    finally:
        watcher.stop()
    msg = repo.store.git("log", "-1", "--format=%an <%ae>%n%B")
    # The person's own git identity signs the commit (not a made-up @mdmem.invalid address).
    assert msg.startswith("Pat Person <pat@example.org>") and "Memory-Source: human:Pat-Person" in msg
    assert git_status(repo.root) == ""


def test_cli_watch_prints_json_events(repo):
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "watch", "--repo", str(repo.root), "--json",
                             "--for", "4"], stdout=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    assert first["status"] == "watching"
    note = repo.root / r.path
    note.write_text(note.read_text().replace("30 days", "31 days"))
    out, _ = proc.communicate(timeout=30)
    assert {"path": r.path, "status": "indexed", "detail": ""} in [json.loads(line) for line in out.splitlines()]


def test_reads_are_not_changes_and_an_edit_is_one_reindex(repo):
    """Issue 11: one `cat` of a note gave 38 reindexes in 6 s, one edit 74; reads must cost
    nothing, an edit exactly one event, and an idle watcher no CPU."""
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    events = []
    watcher = Watcher(repo, events.append).start()
    try:
        note = repo.root / r.path
        for _ in range(20):
            subprocess.run(["cat", str(note)], capture_output=True, check=True)
        time.sleep(1.0)
        assert events == []
        note.write_text(note.read_text().replace("30 days", "45 days"))
        assert wait_for(lambda: any(e.status == "indexed" for e in events), timeout=2.0)
        time.sleep(1.5)  # the watcher's own reads of the file must not echo
        assert [e.status for e in events] == ["indexed"]
        note.write_text(note.read_text())  # saved again unchanged: same content, no work
        time.sleep(1.0)
        assert len(events) == 1
        started = time.process_time()
        time.sleep(2.0)
        assert time.process_time() - started < 0.1  # idle: (almost) no CPU in this process
    finally:
        watcher.stop()
