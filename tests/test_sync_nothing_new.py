"""A sync with nothing new on either side asks the remote which tips it has (no fetch) and does
nothing after: no fetch, no re-render, no dropped caches. Anything new on either side since the
last sync settled -- a teammate's push, a local commit, a hold made here or there -- takes the
whole sync, and the answer of a quiet sync is the one a whole sync gives (untrusted notes per
reader included)."""
import json

from conftest import ENV, T0, git, run_cli, shared_remote

from mdmem import MemoryRepo
from mdmem.remote import sync


def setup(billing_team, tmp_path):
    """dana's repo on a shared remote, and bob's clone of it (both synced once)."""
    remote = shared_remote(billing_team.root, tmp_path, "dana")
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(tmp_path / "bob"))
    bob = MemoryRepo.open(tmp_path / "bob", embedder="none")
    sync(bob, as_user="bob", push=True)
    dana = MemoryRepo.open(billing_team.root, embedder="none")
    sync(dana, as_user="dana")
    return remote, dana, bob


def test_a_sync_with_nothing_new_fetches_nothing_and_keeps_the_caches(billing_team, tmp_path):
    remote, dana, bob = setup(billing_team, tmp_path)
    fetch_head = dana.root / ".git" / "FETCH_HEAD"
    fetch_head.unlink(missing_ok=True)
    index = dana.index
    before = git(dana.root, "for-each-ref").stdout
    out = sync(dana, as_user="dana")
    assert out["status"] == "up to date" and out["conflicts"] == [] and out["rendered"] == []
    assert not fetch_head.exists()  # git fetch writes it, even when nothing comes
    assert dana.index is index  # the search index was not dropped and reopened
    assert git(dana.root, "for-each-ref").stdout == before
    # with --push and nothing to push, the same
    assert sync(dana, as_user="dana", push=True)["push"] == "pushed"
    assert not fetch_head.exists()


def test_after_a_quiet_sync_a_teammates_note_and_a_local_write_still_travel(billing_team, tmp_path):
    remote, dana, bob = setup(billing_team, tmp_path)
    sync(dana, as_user="dana")
    bob.remember("Refunds close after 30 days", as_user="bob", kind="fact", subject="service:refunds", key="window",
                 scope="team", team="payments", now=T0)
    assert sync(bob, as_user="bob", push=True)["push"] == "pushed"
    assert sync(dana, as_user="dana")["status"] == "fast-forwarded"
    assert dana.get(as_user="dana", subject="service:refunds", kind="fact", key="window").note.text.startswith("Refunds")
    sync(dana, as_user="dana")  # quiet again
    dana.remember("Refunds need a ticket", as_user="dana", kind="fact", subject="service:tickets", key="refunds",
                  scope="team", team="payments", now=T0)
    assert sync(dana, as_user="dana", push=True)["push"] == "pushed"
    assert git(remote, "rev-parse", "main").stdout.strip() == dana.store.head()
    assert sync(bob, as_user="bob")["status"] == "fast-forwarded"


def test_a_hold_made_since_the_last_sync_travels_both_ways(billing_team, tmp_path):
    remote, dana, bob = setup(billing_team, tmp_path)
    sync(bob, as_user="bob", push=True)  # quiet
    r = run_cli("remember", "p99 is 180ms", "--kind", "fact", "--subject", "service:billing", "--key", "latency",
                "--new-key", "--scope", "team", "--team", "payments", "--source", "tool:grafana", "--as", "bob",
                "--json", env=ENV, cwd=bob.root)
    assert r.returncode == 4, r.stderr
    held = json.loads(r.stdout)["review_id"]
    assert sync(bob, as_user="bob", push=True)["holds"]["pushed"] == [held]  # main did not move; the hold did
    assert f"refs/heads/review/{held}" in git(remote, "for-each-ref").stdout
    assert sync(dana, as_user="dana")["holds"]["fetched"] == [held]
    assert held in [item.review_id for item in dana.review_list(as_user="dana")]


def test_a_quiet_sync_reports_the_untrusted_notes_each_reader_may_see(billing_team, tmp_path):
    remote, dana, bob = setup(billing_team, tmp_path)
    done = bob.remember("Deploys need two approvals", as_user="bob", kind="fact", subject="service:deploys",
                        key="approvals", scope="team", team="payments", now=T0)
    sync(bob, as_user="bob", push=True)
    note = bob.root / done.path
    note.write_text(note.read_text().replace("two", "no"))
    git(bob.root, "-c", "user.email=mallory@example.com", "-c", "user.name=Mallory", "commit", "-qam", "edit",
        "--no-verify")
    git(bob.root, "push", "-q", "origin", "main")
    first = sync(dana, as_user="dana")
    assert first["status"] == "fast-forwarded" and done.path in {u["path"] for u in first["untrusted"]}
    again = sync(dana, as_user="dana")  # ahead: the render that kept the edit out of the view is not pushed
    assert again["status"] == "ahead" and again["untrusted"] == first["untrusted"]
    # carol reads no team/payments note: the same quiet sync names none of them to her
    assert done.path not in {u["path"] for u in sync(dana, as_user="carol")["untrusted"]}


def test_a_merge_written_on_this_sides_tree_is_gits_whole_merge(tmp_path):
    """The merge tree is written from this side's tree and the paths either side changed: the
    same tree git's whole merge gives, with a rename on one side and an edit on the other."""
    from mdmem.storage import sync_ops
    from mdmem.storage.gitstore import GitStore

    root = tmp_path / "r"
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    for i in range(30):
        (root / f"d{i % 3}").mkdir(exist_ok=True)
        (root / f"d{i % 3}" / f"f{i}.txt").write_text("\n".join(f"line {j} of {i}" for j in range(20)) + "\n")
    git(root, "add", "-A")
    git(root, "-c", "user.email=a@x", "-c", "user.name=a", "commit", "-qm", "base")
    git(root, "checkout", "-qb", "theirs")
    git(root, "mv", "d0/f0.txt", "d2/moved.txt")  # renamed there
    (root / "d1" / "f1.txt").write_text((root / "d1" / "f1.txt").read_text().replace("line 1 of", "THEIR line 1 of"))
    git(root, "rm", "-q", "d0/f3.txt")
    git(root, "add", "-A")
    git(root, "-c", "user.email=a@x", "-c", "user.name=a", "commit", "-qm", "theirs")
    git(root, "checkout", "-q", "main")
    (root / "d0" / "f0.txt").write_text((root / "d0" / "f0.txt").read_text().replace("line 19 of", "OUR line 19 of"))
    (root / "d1" / "f1.txt").write_text((root / "d1" / "f1.txt").read_text().replace("line 18 of", "OUR line 18 of"))
    (root / "d1" / "new.txt").write_text("ours only\n")
    git(root, "add", "-A")
    git(root, "-c", "user.email=a@x", "-c", "user.name=a", "commit", "-qm", "ours")
    store = GitStore(root, lambda user: (user, f"{user}@x"))
    ours, theirs = store.head(), git(root, "rev-parse", "theirs").stdout.strip()
    base = git(root, "merge-base", ours, theirs).stdout.strip()
    whole, left = sync_ops.merged_tree(store, ours, theirs, {})
    assert left == []
    changed = set(store.tree_changes(base, ours)) | set(store.tree_changes(base, theirs))
    assert sync_ops.merged_tree(store, ours, theirs, {}, changed=changed) == (whole, [])
    moved = store.file_in(whole, "d2/moved.txt").decode()
    assert "OUR line 19" in moved and store.file_in(whole, "d0/f0.txt") is None  # the rename carried our edit


def test_a_forged_sync_stamp_naming_the_remotes_new_tip_does_not_skip_taking_it(billing_team, tmp_path):
    """sync.json lies in .git, where any local process may write it: a stamp that names the
    remote's branch as it is now, though this clone never took that commit, must not make the
    sync skip the fetch (the remote's tip must be in this clone, and an ancestor of its own)."""
    remote, dana, bob = setup(billing_team, tmp_path)
    bob.remember("Refunds close after 30 days", as_user="bob", kind="fact", subject="service:refunds", key="window",
                 scope="team", team="payments", now=T0)
    assert sync(bob, as_user="bob", push=True)["push"] == "pushed"
    stamp_file = dana.store.cache_dir / "sync.json"
    stamps = json.loads(stamp_file.read_text())
    stamps["origin"]["remote"]["main"] = git(remote, "rev-parse", "main").stdout.strip()
    stamp_file.write_text(json.dumps(stamps))
    assert sync(dana, as_user="dana")["status"] == "fast-forwarded"
    assert dana.get(as_user="dana", subject="service:refunds", kind="fact", key="window").note.text.startswith("Refunds")
