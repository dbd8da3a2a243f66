"""The file watcher: a saved note reindexed once, a broken save reported and kept out, commit mode
committing only what the person may write, and reads costing nothing."""
import json
import subprocess
import sys
import time

from conftest import T0, git_status, team_fact

from mdmem import MemoryRepo
from mdmem.watch import Watcher


def wait_for(predicate, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_saved_note_is_reindexed_by_the_watcher(repo):
    # How soon is the machine's business (a benchmark's, not a unit test's): the bound only ends a
    # test whose watcher never reindexes.
    r = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    events = []
    watcher = Watcher(repo, events.append).start()
    try:
        note = repo.root / r.path
        note.write_text(note.read_text().replace("30 days", "45 days for marketplace orders"))
        assert wait_for(lambda: any(e.status == "indexed" for e in events), timeout=60.0)
        repo.index.worktree_check_seconds = 3600  # the watcher, not the poll, must have done it
        hits = repo.recall("marketplace refunds", as_user="bob", now=T0)
        assert "45 days" in hits[0].text
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
    # bob commits as Pat Person <pat@example.org>; the repo's admin maps that address to bob
    cfg = repo.root / "mdmem.toml"
    cfg.write_text(cfg.read_text() + '\n[people.bob]\nemails = ["pat@example.org"]\n')
    subprocess.run(["git", "-C", str(repo.root), "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "people",
                    "--no-verify"], check=True)
    repo = MemoryRepo.open(repo.root)
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
    assert msg.startswith("Pat Person <pat@example.org>") and "Memory-Source: human:bob" in msg
    assert git_status(repo.root) == ""


def test_commit_mode_commits_only_roots_the_person_may_write(repo):
    """The watcher committed bob's edits of carol's team notes and of another
    person's private notes, which verify then flagged and the views left out."""
    mine = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window")
    theirs = repo.remember("Search reindexes nightly", as_user="carol", kind="fact", subject="service:search",
                           key="reindex", scope="team", team="search", now=T0)
    subprocess.run(["git", "-C", str(repo.root), "config", "user.email", "bob@mdmem.invalid"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "config", "user.name", "bob"], check=True)
    events = []
    watcher = Watcher(repo, events.append, commit=True).start()
    try:
        for path, old, new in ((theirs.path, "nightly", "never, per bob"), (mine.path, "30 days", "60 days")):
            note = repo.root / path
            note.write_text(note.read_text().replace(old, new))
        assert wait_for(lambda: any(e.status == "committed" for e in events), timeout=5)
        assert wait_for(lambda: any(e.status == "not committed" for e in events), timeout=5)
    finally:
        watcher.stop()
    refused = [e for e in events if e.status == "not committed"]
    assert [e.path for e in refused] == [theirs.path] and "bob may not write team/search" in refused[0].detail
    committed = repo.store.git("show", "--name-only", "--format=", "HEAD").split()
    assert mine.path in committed and theirs.path not in committed
    assert repo.verify()["untrusted"] == []


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
    """One `cat` of a note gave 38 reindexes in 6 s, one edit 74; reads must cost
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


def test_commit_mode_keeps_another_root_out_of_a_scope_repository(tmp_path):
    """In the team's scope repository a file saved under private/alice/ (alice's own address in
    git's config) is a root the repository does not hold: named, never committed."""
    with MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob"]}, as_user="alice",
                         scope_root="team/payments", embedder="none") as repo:
        mine = team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", user="alice")
        subprocess.run(["git", "-C", str(repo.root), "config", "user.email", "alice@mdmem.invalid"], check=True)
        subprocess.run(["git", "-C", str(repo.root), "config", "user.name", "alice"], check=True)
        stray = repo.root / "private/alice/user/alice/fact/diary.md"
        events = []
        watcher = Watcher(repo, events.append, commit=True).start()
        try:
            stray.parent.mkdir(parents=True)
            stray.write_text((repo.root / mine.path).read_text().replace("scope: team", "scope: private")
                             .replace("team: payments\n", "").replace("subject: service:billing", "subject: user:alice")
                             .replace("key: refund.window", "key: diary"))
            assert wait_for(lambda: any(e.status == "not committed" for e in events), timeout=5), events
        finally:
            watcher.stop()
        refused = [e for e in events if e.status == "not committed"]
        assert refused and "holds only team/payments" in refused[0].detail, refused
        assert "private/alice" not in repo.store.git("log", "--all", "--name-only", "--format=")
