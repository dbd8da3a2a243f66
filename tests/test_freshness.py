"""Hand edits count at the very next recall, found from the kernel's events (inotify)
without walking the work tree; the walk remains for the first call and when events
cannot say what changed."""
import shutil
import subprocess

import pytest
from conftest import T1, team_fact

from mdmem import MemoryRepo
from mdmem.storage.tree_watch import INotify


def watched(repo):
    """The repo after two recalls (the first walks the tree, the second starts the watch),
    with the periodic walk pushed out of reach so only events can find an edit."""
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    team_fact(repo, "Billing deploys any weekday before 3pm", new_key=True)
    repo.recall("refunds", as_user="bob", now=T1)  # walks
    repo.recall("refunds", as_user="bob", now=T1)  # starts the watch, walks once more
    repo.index.worktree_check_seconds = 3600
    return repo


pytestmark = pytest.mark.skipif(INotify is None, reason="inotify is Linux only")


def test_an_edit_is_found_at_once_without_a_walk(repo):
    r = watched(repo)
    walks = repo.index.tree_walks
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    before = 30
    for days in (45, 60, 90):  # back to back: each edit is seen by the next call
        note.write_text(note.read_text().replace(f"within {before} days", f"within {days} days"))
        before = days
        assert f"{days} days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    assert repo.index.tree_walks == walks


def test_a_new_note_in_a_new_folder_and_a_deleted_note_count_at_once(repo):
    r = watched(repo)
    walks = repo.index.tree_walks
    src = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    target = repo.root / "team/payments/service/ledger/fact/close.md"
    target.parent.mkdir(parents=True)  # two new folders at once, the file right after
    target.write_text(src.read_text().replace("service:billing", "service:ledger").replace(
        "refund.window", "close").replace("Refunds are allowed within 30 days", "The ledger closes at midnight"))
    hits = r.recall("when does the ledger close?", as_user="bob", now=T1)
    assert hits and hits[0].path == "team/payments/service/ledger/fact/close.md"
    src.unlink()
    assert all("Refunds" not in h.text for h in r.recall("refunds", as_user="bob", now=T1))
    assert repo.index.tree_walks == walks


def test_a_revert_and_a_commit_by_a_person_count_at_once(repo):
    r = watched(repo)
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    note.write_text(note.read_text().replace("30 days", "45 days"))
    assert "45 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    subprocess.run(["git", "-C", str(repo.root), "checkout", "-q", "--", str(note)], check=True)
    assert "30 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    note.write_text(note.read_text().replace("30 days", "14 days"))
    subprocess.run(["git", "-C", str(repo.root), "commit", "-q", "--no-verify", "-am", "by hand"], check=True)
    assert "14 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    assert repo.index.dirty_state() == {}  # committed: nothing is dirty any more


def test_a_folder_moved_away_whole_is_walked_once(repo, tmp_path):
    r = watched(repo)
    walks = repo.index.tree_walks
    folder = repo.root / "team/payments/service/billing"
    shutil.move(str(folder), str(tmp_path / "elsewhere"))  # one event for the folder, none per file
    assert r.recall("refunds", as_user="bob", now=T1) == []
    assert repo.index.tree_walks == walks + 1


def test_two_repos_on_one_folder_in_one_process_both_see_an_edit(repo):
    r = watched(repo)
    other = MemoryRepo.open(repo.root)
    other.recall("refunds", as_user="bob", now=T1)
    other.recall("refunds", as_user="bob", now=T1)
    other.index.worktree_check_seconds = 3600
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    note.write_text(note.read_text().replace("30 days", "45 days"))
    assert "45 days" in other.recall("refund window", as_user="bob", now=T1)[0].text
    assert "45 days" in r.recall("refund window", as_user="bob", now=T1)[0].text
    other.close()  # closing one leaves the other's watch working
    note.write_text(note.read_text().replace("45 days", "60 days"))
    assert "60 days" in r.recall("refund window", as_user="bob", now=T1)[0].text


def test_without_events_the_walk_still_finds_edits(repo):
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    repo.index.watch_tree = False
    repo.index.worktree_check_seconds = 0  # walk on every call
    repo.recall("refunds", as_user="bob", now=T1)
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    note.write_text(note.read_text().replace("30 days", "45 days"))
    assert "45 days" in repo.recall("refund window", as_user="bob", now=T1)[0].text
    assert repo.index.tree_walks >= 2


def test_a_one_call_process_watches_nothing(repo):
    """The CLI makes one call: it walks the tree and never pays for a watch per folder."""
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    fresh = MemoryRepo.open(repo.root)
    fresh.recall("refunds", as_user="bob", now=T1)
    assert fresh.index.watching is False and fresh.index.tree_walks == 1
    fresh.recall("refunds", as_user="bob", now=T1)
    assert fresh.index.watching is True


def test_a_long_lived_process_walks_the_tree_once_from_its_first_catch_up_and_then_follows_edits(repo):
    """A server's first catch-up starts the watch and walks; its clients' calls never walk
    (a one-shot process's first two calls do, see watched())."""
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True)
    repo.index.worktree_check_seconds = 3600
    repo.index.follow_tree()
    repo.index.sync()
    assert repo.index.tree_walks == 1 and repo.index.watching
    note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window").path
    note.write_text(note.read_text().replace("within 30 days", "within 45 days"))
    assert "45 days" in repo.recall("refund window", as_user="bob", now=T1)[0].text
    assert "45 days" in repo.recall("refund window", as_user="bob", now=T1)[0].text
    assert repo.index.tree_walks == 1


def test_an_edit_made_before_a_server_started_is_found_after_its_first_catch_up_failed(repo):
    """The server's first catch-up walks the tree and starts the watch; when it fails (here the
    embedding service is not up yet), the next one walks instead: an edit made while no process
    ran has no event, and was never found (until the file was written again)."""
    from embed_server import EmbedServer

    from mdmem.config import EmbedderConfig, UserConfig
    from mdmem.errors import MdmemError

    def use(r, url):
        r.config.embedder = EmbedderConfig(backend="ollama", model="nomic-embed-text")
        r.user_config = UserConfig(embedder_url=url)
        r.reset_caches()

    with EmbedServer() as server:
        use(repo, server.url)
        for i in range(3):
            team_fact(repo, f"filler note number {i} about billing", key=f"k.{i}", new_key=True)
        repo.recall("billing", as_user="bob", now=T1)
        note = repo.root / repo.get(as_user="bob", subject="service:billing", kind="fact", key="k.2").path
        repo.close()
        note.write_text(note.read_text().replace("filler note number 2 about billing", "the aardvark pager rotation"))
        server_side = MemoryRepo.open(repo.root)
        use(server_side, server.url)
        server.models = set()  # the embedding service is not ready yet
        server_side.index.follow_tree()
        with pytest.raises(MdmemError):
            server_side.index.sync()
        server.models = {"nomic-embed-text"}
        hits = server_side.recall("aardvark pager rotation", as_user="bob", now=T1)
        assert hits and hits[0].path == str(note.relative_to(repo.root))
        server_side.close()
