"""RootEntries (views/render.py): a write patches the kept state in place and keeps the undo;
an abandoned write is reverted, a reader in another thread never sees a write's patch or a
state that changes under it, and every state equals one built cold from the tree."""
import random
import threading

from conftest import T0, team_fact

from mdmem.views.render import MetaCache, RootEntries

ROOT = "team/payments"


def snap(state):
    t = state.totals
    return (dict(state.blobs), list(state.keys), [tuple(e) for e in state.entries],
            (dict(t.subjects), list(t.starts), list(t.ends), list(t.section_keys)))


def cold(repo, tmp_path, rev, overlay=None):
    """The state a fresh process builds from the tree (no kept state, its own cache)."""
    meta = MetaCache(tmp_path / f"cold-{random.random()}.sqlite")
    try:
        return snap(RootEntries(repo.store, meta).state(ROOT, rev, overlay or {}))
    finally:
        meta.close()


def notes(repo):
    return sorted(p for p in (repo.root / ROOT).rglob("*.md") if p.name != "MEMORY.md")


def edited(path, i):
    return path.read_bytes().replace(b"Fact ", f"Edited {i} fact ".encode())


def filled(repo, n=6):
    for i in range(n):
        team_fact(repo, f"Fact {i} about the billing service", key=f"k{i}", subject=f"service:s{i % 3}",
                  new_key=True, now=T0)


def test_an_abandoned_write_is_reverted_before_the_next_write(repo, tmp_path):
    filled(repo)
    entries = RootEntries(repo.store, MetaCache(tmp_path / "meta.sqlite"))
    head = repo.store.head()
    first, second = notes(repo)[:2]
    overlay = {str(first.relative_to(repo.root)): edited(first, 1), str(second.relative_to(repo.root)): None}
    with repo.store.locked():
        assert snap(entries.state(ROOT, head, overlay)) == cold(repo, tmp_path, head, overlay)
        # The write never became a commit (refused, raced): the next write starts from HEAD.
        assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head)
    assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head)


def test_a_write_that_never_became_a_commit_is_not_taken_for_the_next_one(repo, tmp_path):
    """Views made for a write that then failed (before its commit), then a commit of another
    root from the same HEAD: the failed write's patch is undone, not kept as the new state."""
    filled(repo)
    entries = repo.views.entries  # the process's own: remember tells it about its commits
    head = repo.store.head()
    path = notes(repo)[0]
    with repo.store.locked():
        entries.state(ROOT, head, {str(path.relative_to(repo.root)): edited(path, 3)})
    repo.remember("Bob keeps his own reminder", as_user="bob", kind="fact", subject="person:bob", key="r1",
                  scope="private", new_key=True, now=T0)
    head = repo.store.head()
    assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head)
    team_fact(repo, "Fact 9 about the billing service", key="k9", subject="service:s0", new_key=True, now=T0)
    assert repo.stale_views() == []  # the team view committed with it renders the real notes


def test_a_reader_in_another_thread_sees_neither_a_pending_patch_nor_a_change_under_it(repo, tmp_path):
    filled(repo)
    entries = RootEntries(repo.store, MetaCache(tmp_path / "meta.sqlite"))
    head = repo.store.head()
    before = cold(repo, tmp_path, head)
    read_first = entries.state(ROOT, head, {})  # a reader's state, taken before the write
    taken = snap(read_first)
    path = notes(repo)[0]
    overlay = {str(path.relative_to(repo.root)): edited(path, 2)}
    seen = {}
    with repo.store.locked():
        entries.state(ROOT, head, overlay)  # the write's patch, in place

        def reader():
            seen["during"] = snap(entries.state(ROOT, head, {}))

        thread = threading.Thread(target=reader)
        thread.start()
        thread.join()
    assert seen["during"] == before  # not the write's patch
    assert snap(read_first) == taken == before  # what the reader held did not change under it


def test_random_writes_abandoned_writes_and_reads_always_equal_a_cold_build(repo, tmp_path):
    """Real commits through remember (which call committed()), patches abandoned, reads with
    and without an overlay, in random order: every state equals the cold build."""
    filled(repo)
    rng = random.Random(7)
    entries = repo.views.entries  # the process's own, moved on by every remember below
    for step in range(30):
        head = repo.store.head()
        paths = notes(repo)
        what = rng.choice(["write", "abandon", "read", "preview"])
        if what == "write":
            team_fact(repo, f"Fact {step} rewritten", key=f"k{rng.randrange(8)}", subject=f"service:s{step % 3}",
                      new_key=True, now=T0)
            head = repo.store.head()
            assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head), step
            continue
        pick = rng.choice(paths)
        overlay = {str(pick.relative_to(repo.root)): rng.choice([edited(pick, step), None])}
        if what == "abandon":
            with repo.store.locked():
                assert snap(entries.state(ROOT, head, overlay)) == cold(repo, tmp_path, head, overlay), step
        elif what == "preview":  # an overlay without the write lock (repo.scope_view's)
            assert snap(entries.state(ROOT, head, overlay)) == cold(repo, tmp_path, head, overlay), step
        assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head), step


def test_superseded_versions_leave_memory_and_every_state_stays_right(repo, tmp_path):
    """Each new version's parsed metadata was kept for the life of the process, so a server's
    heap grew with every write. A version no kept state holds
    leaves memory (this process's writes and another process's alike), and the states still
    equal cold builds, an older commit's too (read back from the table)."""
    from mdmem import MemoryRepo

    filled(repo)
    entries = repo.views.entries
    first = repo.store.head()
    entries.state(ROOT, first, {})
    for i in range(40):
        team_fact(repo, f"Fact {i} supersedes the first rule", key="k0", subject="service:s0", now=T0)
    head = repo.store.head()
    assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head)
    assert entries.meta.held() <= len(notes(repo)) + 2
    other = MemoryRepo.open(repo.root, embedder="none")  # another process's writes
    for i in range(20):
        team_fact(other, f"Fact {i} from the other writer", key="k1", subject="service:s1", now=T0)
    other.close()
    head = repo.store.head()
    assert snap(entries.state(ROOT, head, {})) == cold(repo, tmp_path, head)
    assert entries.meta.held() <= len(notes(repo)) + 2
    assert snap(entries.state(ROOT, first, {})) == cold(repo, tmp_path, first)


def test_changes_under_a_root_are_the_whole_diffs_changes_in_that_root(repo):
    """A root's view moves on by the diff of that root's folder alone (the whole tree's diff cost
    ~14 ms at 100k notes): the same changes, for a root written, a root's folder made and (going
    back) gone, a prefix that is no root, and a root that never existed."""
    filled(repo)
    start = repo.store.head()
    team_fact(repo, "Fact 0 rewritten", key="k0", subject="service:s0", now=T0)
    repo.remember("I like tea", as_user="alice", kind="preference", subject="user:alice", key="drink", now=T0)
    mid = repo.store.head()
    for old, new in ((start, mid), (mid, start), (None, mid), (start, start)):
        whole = repo.store.note_changes(old, new)
        for root in (ROOT, "private/alice", "private/nobody", "team"):
            under = repo.store.note_changes(old, new, under=root)
            expected = [c for c in whole if c.path.startswith(root + "/")]
            assert sorted(under, key=str) == sorted(expected, key=str), (old, new, root)
            assert expected or root not in (ROOT, "private/alice") or old == new
