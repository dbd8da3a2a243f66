"""`mdmem sync` integrates a remote's history or changes nothing: views regenerated, keyed
notes changed on both sides resolved by validity, a person's conflicts refused untouched; a
history without the config, a forged erasure receipt or a view merge driver aimed at notes stops
nothing it should not, and no conflict names a root the user cannot read."""
import json

import pytest
from conftest import ENV, T0, T1, git, git_status, run_cli, shared_remote, snapshot

from mdmem import MemoryRepo
from mdmem.errors import Conflict
from mdmem.remote import open_conflicts, sync

VIEW = "team/payments/MEMORY.md"
T2 = "2026-10-20T09:00:00Z"


@pytest.fixture
def clones(repo, tmp_path):
    """A bare remote and two clones of it (a and b), hooks enabled, identities set."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo.root, "remote", "add", "origin", str(bare))
    git(repo.root, "config", "user.name", "Bob")
    git(repo.root, "config", "user.email", "bob@example.org")
    cfg = repo.root / "mdmem.toml"  # the clones' people commit as bob (trusted for team payments)
    cfg.write_text(cfg.read_text() + '\n[people.bob]\nemails = ["bob@example.org", "a@example.org", "b@example.org"]\n')
    # committed by the repo's admin (its founder: the fixture names no erasers), so it takes effect
    git(repo.root, "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qm", "people", "--", "mdmem.toml")
    git(repo.root, "push", "-q", "origin", "main")
    out = []
    for name in ("a", "b"):
        path = tmp_path / name
        git(tmp_path, "clone", "-q", str(bare), str(path))
        git(path, "config", "user.name", f"Person {name}")
        git(path, "config", "user.email", f"{name}@example.org")
        import sys

        from mdmem.hooks.install import ensure
        ensure(path, sys.executable)
        out.append(MemoryRepo.open(path))
    return out


def fact(repo, text, key, now=T1, **kw):
    return repo.remember(text, as_user="bob", kind="fact", subject="service:billing", key=key, scope="team",
                         team="payments", now=now, new_key=True, **kw)


def no_markers(root):
    out = git(root, "grep", "-n", "-E", "^(<<<<<<<|>>>>>>>)", check=False)
    return out.stdout == ""


def assert_settled(root):
    gitdir = root / ".git"
    assert not any((gitdir / n).exists() for n in ("rebase-merge", "rebase-apply", "MERGE_HEAD"))
    assert git_status(root) == "" and no_markers(root)
    assert run_cli("check", "--repo", str(root)).returncode == 0


def test_two_clones_with_unrelated_facts_both_end_up_with_both(clones):
    a, b = clones
    fact(a, "Refunds within 30 days", "refund.window")
    assert sync(a, as_user="bob", push=True)["push"] == "pushed"
    fact(b, "Chargebacks go to finance", "chargeback", now=T2)
    out = sync(b, as_user="bob", push=True)
    assert out["status"] == "merged" and out["conflicts"] == []
    assert_settled(b.root)
    view = (b.root / VIEW).read_text()
    assert "Refunds within 30 days" in view and "Chargebacks go to finance" in view
    assert sync(a, as_user="bob")["status"] == "fast-forwarded"
    assert (a.root / VIEW).read_text() == view
    assert_settled(a.root)
    # The repo works afterwards: a write, a render that has nothing to do.
    a = MemoryRepo.open(a.root)
    assert fact(a, "Disputes within 60 days", "dispute.window", now=T2).status == "committed"
    assert a.render(as_user="bob", now=T2).commit is None


def test_the_same_keyed_note_changed_in_two_clones_resolves_by_validity(clones):
    a, b = clones
    fact(a, "Refunds within 30 days", "refund.window", now=T0)
    sync(a, as_user="bob", push=True)
    sync(b, as_user="bob")
    b = MemoryRepo.open(b.root)
    fact(a, "Refunds within 45 days", "refund.window", now=T2)  # later valid_from: must win
    sync(a, as_user="bob", push=True)
    fact(b, "Refunds within 40 days", "refund.window", now=T1)
    out = sync(b, as_user="bob", push=True)
    [pair] = out["conflicts"]
    path = "team/payments/service/billing/fact/refund.window.md"
    assert pair["path"] == path and pair["live_side"] == "remote" and pair["rule"] == "later valid_from"
    assert_settled(b.root)
    b = MemoryRepo.open(b.root)
    assert b.get(as_user="dana", path=path, now=T2).note.text == "Refunds within 45 days"
    texts = [v.note.text for v in b.history(as_user="dana", path=path) if v.note]
    assert "Refunds within 40 days" in texts and "Refunds within 45 days" in texts  # both in history
    message = git(b.root, "log", "-1", "--merges", "--format=%B").stdout
    assert f"Memory-Conflict: {path} live={pair['live']} superseded={pair['superseded']}" in message
    listed = open_conflicts(b, as_user="alice")
    assert [c["path"] for c in listed] == [path]
    assert open_conflicts(b, as_user="carol") == []  # not a reader of team/payments
    r = run_cli("review", "list", "--repo", str(b.root), "--as", "dana")
    assert path in r.stdout and "sync conflict" in r.stdout
    # A later write to the note settles it: no longer listed.
    fact(b, "Refunds within 45 days, confirmed", "refund.window", now=T2)
    assert open_conflicts(b, as_user="alice") == []


def test_hand_edits_of_one_note_on_both_sides_stop_with_the_repo_as_it_was(clones):
    a, b = clones
    fact(a, "Refunds within 30 days", "refund.window", now=T0)
    sync(a, as_user="bob", push=True)
    sync(b, as_user="bob")
    path = "team/payments/service/billing/fact/refund.window.md"
    for clone, days in ((a, "31"), (b, "32")):
        note = clone.root / path
        note.write_text(note.read_text().replace("30 days", f"{days} days"))
        git(clone.root, "commit", "-qam", f"{days} days")
    sync(a, as_user="bob", push=True)
    before = snapshot(b.root)
    r = run_cli("sync", "--repo", str(b.root), "--as", "bob")
    assert r.returncode == 5 and path in r.stderr and "by hand on both sides" in r.stderr
    assert snapshot(b.root) == before
    assert_settled(b.root)
    # The advice works as printed (the remote-tracking ref had not moved), and while
    # the person resolves, the half-merged note is invalid: check says so, recall never serves it.
    assert "git fetch origin && git merge origin/main" in r.stderr
    git(b.root, "fetch", "-q", "origin")
    assert git(b.root, "merge", "origin/main", check=False).returncode != 0
    assert "<<<<<<<" in (b.root / path).read_text()
    check = run_cli("check", "--repo", str(b.root))
    assert check.returncode == 2 and path in check.stdout + check.stderr and "conflict markers" in check.stdout + check.stderr
    b.reload()
    assert not any("<<<<<<<" in h.text for h in b.recall("refunds", as_user="bob"))


def test_a_non_note_file_changed_on_both_sides_is_a_persons_conflict(clones):
    a, b = clones
    for clone, extra in ((a, "# a\n"), (b, "# b\n")):
        cfg = clone.root / "mdmem.toml"
        cfg.write_text(cfg.read_text() + extra)
        # by the repo's admin (its founder): the hook refuses anyone else's change to mdmem.toml
        git(clone.root, "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "config")
    sync(a, as_user="bob", push=True)
    before = snapshot(b.root)
    with pytest.raises(Conflict, match="mdmem.toml"):
        sync(b, as_user="bob")
    assert snapshot(b.root) == before


def test_sync_refuses_to_run_over_a_merge_in_progress_or_clobber_edits(clones):
    a, b = clones
    fact(a, "Refunds within 30 days", "refund.window")
    sync(a, as_user="bob", push=True)
    # An untracked hand-made file where the incoming note would go: refused, file kept.
    target = b.root / "team/payments/service/billing/fact/refund.window.md"
    target.parent.mkdir(parents=True)
    target.write_text("my draft")
    before = snapshot(b.root)
    with pytest.raises(Conflict, match="refund.window.md"):
        sync(b, as_user="bob")
    assert snapshot(b.root) == before
    target.unlink()
    (b.root / ".git" / "MERGE_HEAD").write_text(git(b.root, "rev-parse", "HEAD").stdout)
    with pytest.raises(Conflict, match="a merge is in progress"):
        sync(b, as_user="bob")
    (b.root / ".git" / "MERGE_HEAD").unlink()
    assert sync(b, as_user="bob")["status"] == "fast-forwarded"


def test_hooks_a_teammate_commits_never_run_in_another_clone(clones, tmp_path):
    """Git ran whatever the committed .githooks folder held after a pull. mdmem's
    hooks come from its package into .git/hooks; a committed hook folder is plain files."""
    a, b = clones
    pwned = tmp_path / "pwned"
    evil = f"#!/bin/sh\ntouch {pwned}-$(basename $0)\n"
    (a.root / ".githooks").mkdir(exist_ok=True)
    for name in ("pre-commit", "post-merge", "reference-transaction", "post-checkout"):
        (a.root / ".githooks" / name).write_text(evil)
        (a.root / ".githooks" / name).chmod(0o755)
    git(a.root, "add", ".githooks")
    git(a.root, "commit", "-qm", "hooks", "--no-verify")
    git(a.root, "push", "-q", "origin", "main")
    git(b.root, "pull", "-q", "--ff-only", "origin", "main")  # plain git, as people do
    git(b.root, "checkout", "-q", "-b", "x")
    assert sync(b, as_user="bob")["status"] in ("up to date", "ahead", "fast-forwarded")
    fact(b, "A fact written after the pull", "after.pull")
    note = b.root / "team/payments/service/billing/fact/after.pull.md"
    note.write_text(note.read_text().replace("kind: fact", "kind: bogus"))
    out = git(b.root, "commit", "-qam", "bogus", check=False)
    assert out.returncode != 0 and "kind:" in out.stderr  # mdmem's own pre-commit still runs
    assert not list(tmp_path.glob("pwned*"))


def test_stale_views_pushed_by_someone_are_regenerated_by_sync(clones):
    a, b = clones
    fact(a, "Refunds within 30 days", "refund.window")
    note = a.root / "team/payments/service/billing/fact/refund.window.md"
    note.write_text(note.read_text().replace("30 days", "45 days"))
    git(a.root, "commit", "-qam", "no hook", "--no-verify")
    git(a.root, "push", "-q", "origin", "main")
    out = json.loads(run_cli("sync", "--repo", str(b.root), "--as", "bob", "--json").stdout)
    assert out["status"] == "fast-forwarded" and out["rendered"] == [VIEW]
    assert "45 days" in (b.root / VIEW).read_text()
    assert_settled(b.root)


@pytest.mark.parametrize("local_commit", [True, False], ids=["merge", "fast-forward"])
def test_sync_keeps_symlinks_and_executable_bits(clones, local_commit):
    """Files a team keeps beside its notes arrive as git would check them out
    (symlinks became regular files and scripts lost +x, in the merge commit and the work tree)."""
    a, b = clones
    docs = a.root / "docs"
    docs.mkdir()
    (docs / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (docs / "run.sh").chmod(0o755)
    (docs / "link.txt").symlink_to("run.sh")
    git(a.root, "add", "docs")
    git(a.root, "commit", "-qm", "docs")
    git(a.root, "push", "-q", "origin", "main")
    if local_commit:
        fact(b, "Local fact about the refunds timing", "refunds.timing")
    sync(b, as_user="bob")
    tree = git(b.root, "ls-tree", "-r", "HEAD", "docs").stdout
    assert "100755 blob" in tree.split("docs/run.sh")[0].splitlines()[-1]
    assert tree.split("docs/link.txt")[0].splitlines()[-1].startswith("120000 blob")
    assert (b.root / "docs" / "link.txt").is_symlink()
    assert (b.root / "docs" / "run.sh").stat().st_mode & 0o111
    assert git_status(b.root) == ""


def test_sync_push_that_the_remote_rejects_exits_5(clones, tmp_path):
    """A rejected push (another clone pushed first) said so but exited 0, so cron
    jobs never noticed. The remote here rejects every push, as a race would."""
    a, b = clones
    hook = tmp_path / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'rejected: fetch first' >&2\nexit 1\n")
    hook.chmod(0o755)
    fact(b, "A fact that will not be published", "unpublished")
    r = run_cli("sync", "--push", "--repo", str(b.root), "--as", "bob")
    assert r.returncode == 5 and "push refused" in r.stdout, (r.stdout, r.stderr)


def test_sync_reports_untrusted_notes_only_in_roots_the_user_may_read(clones):
    """`sync --json` listed other users' private notes (path, committer) as untrusted."""
    a, b = clones
    r = a.remember("Alice likes green tea", as_user="alice", kind="profile", subject="user:alice", key="tea", now=T1)
    sync(a, as_user="alice", push=True)
    note = a.root / r.path
    note.write_text(note.read_text().replace("green", "black"))
    # a@example.org is bob: not alice's writer (his own hook refuses it, so he skips the hook)
    git(a.root, "commit", "-qam", "bob edits alice's note by hand", "--no-verify")
    git(a.root, "push", "-q", "origin", "main")
    out = run_cli("sync", "--repo", str(b.root), "--as", "carol", "--json")
    assert out.returncode == 0, out.stderr
    assert "private/alice" not in out.stdout
    mine = json.loads(run_cli("sync", "--repo", str(b.root), "--as", "alice", "--json").stdout)
    assert r.path in {u["path"] for u in mine["untrusted"]}


def test_a_version_not_valid_yet_does_not_win_a_sync_conflict(clones):
    """The side with a far-future valid_from won "by validity" and left the note
    with no live version for everyone."""
    a, b = clones
    fact(a, "Billing deploys any weekday", "deploy.window", now=T0)
    sync(a, as_user="bob", push=True)
    sync(b, as_user="bob")
    a.remember("Billing deploys Fridays (typo in the year)", as_user="bob", kind="fact", subject="service:billing",
               key="deploy.window", scope="team", team="payments", valid_from="2099-01-01T00:00:00Z", now=T1)
    sync(a, as_user="bob", push=True)
    b.remember("Billing deploys Mon-Thu, per retro", as_user="bob", kind="fact", subject="service:billing",
               key="deploy.window", scope="team", team="payments", now=T1)
    out = sync(b, as_user="bob", now=T2)
    assert out["conflicts"] and out["conflicts"][0]["live_side"] == "local"
    assert "Mon-Thu" in b.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window",
                              now=T2).note.text


def test_sync_refuses_a_history_without_the_config(two_teams, tmp_path):
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(two_teams.root, "remote", "add", "origin", str(bare))
    assert run_cli("sync", "--push", "--as", "bob", env=ENV, cwd=two_teams.root).returncode == 0
    other = tmp_path / "carol"
    branch = git(two_teams.root, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    git(tmp_path, "clone", "-q", "--branch", branch, str(bare), str(other))
    git(other, "rm", "-q", "mdmem.toml")
    git(other, "-c", "user.name=carol", "-c", "user.email=carol@mdmem.invalid", "commit", "-qm", "cleanup",
        "--no-verify")
    git(other, "push", "-q", "origin", "HEAD")
    head = git(two_teams.root, "rev-parse", "HEAD").stdout
    r = run_cli("sync", "--as", "bob", env=ENV, cwd=two_teams.root)
    assert r.returncode == 3 and "has no mdmem.toml" in r.stderr and "carol@mdmem.invalid" in r.stderr, r.stderr
    assert git(two_teams.root, "rev-parse", "HEAD").stdout == head and (two_teams.root / "mdmem.toml").is_file()
    assert run_cli("recall", "phone", "--as", "alice", env=ENV, cwd=two_teams.root).returncode == 0


# The view merge driver kept our side for whatever path the committed .gitattributes sent
# it: one line `*.md merge=mdmem-view` by any teammate made a plain `git pull` drop every
# concurrent note edit without a conflict.
def test_the_view_merge_driver_keeps_a_side_only_for_views(two_teams, tmp_path):
    root = two_teams.root
    note = "team/payments/service/billing/fact/deploy.window.md"
    two_teams.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact", subject="service:billing",
                  key="deploy.window", scope="team", team="payments", now=T0)
    run_cli("hooks", "install", "--as", "bob", env=ENV, cwd=root)
    with open(root / ".gitattributes", "a") as f:
        f.write("*.md merge=mdmem-view\n")
    git(root, "-c", "user.email=carol@mdmem.invalid", "commit", "-qam", "attrs", "--no-verify")
    branch = git(root, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    other = tmp_path / "alice"
    git(tmp_path, "clone", "-q", "--branch", branch, str(root), str(other))
    run_cli("hooks", "install", "--as", "alice", env=ENV, cwd=other)
    for where, who, text in ((other, "alice", "5pm (alice)"), (root, "bob", "2pm (bob)")):
        path = where / note
        path.write_text(path.read_text().replace("3pm", text))
        git(where, "-c", f"user.email={who}@mdmem.invalid", "commit", "-qam", f"{who} edit", "--no-verify")
    pulled = git(root, "pull", "--no-rebase", "--no-edit", str(other), branch, check=False)
    assert pulled.returncode != 0 and "CONFLICT" in pulled.stdout + pulled.stderr
    assert "<<<<<<<" in (root / note).read_text()


# Anyone could append a fake receipt naming a shared commit: sync then called every clone,
# fresh ones too, "an old clone" and refused for good.
def test_a_forged_receipt_naming_a_live_commit_stops_no_sync(two_teams, tmp_path):
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(two_teams.root, "remote", "add", "origin", str(bare))
    assert run_cli("sync", "--push", "--as", "bob", env=ENV, cwd=two_teams.root).returncode == 0
    branch = git(two_teams.root, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    carol = tmp_path / "carol"
    git(tmp_path, "clone", "-q", "--branch", branch, str(bare), str(carol))
    shared = git(carol, "rev-parse", "HEAD~1").stdout.strip()
    (carol / "audit").mkdir(exist_ok=True)
    with open(carol / "audit" / "erasures.jsonl", "a") as f:
        f.write('{"actor": "dana", "id": "erasure-20261130T164000Z-fake01", "rewritten_commits": ["%s"], '
                '"erased_blobs": [], "targets": {"paths": "1 path(s), not recorded"}}\n' % shared)
    git(carol, "add", "audit")
    git(carol, "-c", "user.email=carol@mdmem.invalid", "commit", "-qm", "audit", "--no-verify")
    git(carol, "push", "-q", "origin", "HEAD")
    r = run_cli("sync", "--as", "bob", env=ENV, cwd=two_teams.root)
    assert r.returncode == 0, r.stderr


# `sync` named other people's private note paths in its conflicts.
def test_sync_does_not_name_conflicts_in_roots_the_user_cannot_read(billing_team, tmp_path):
    import json

    root = billing_team.root
    remote = shared_remote(root, tmp_path, "alice")
    other = tmp_path / "c"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(other))
    for where, text in ((root, "Alice phone 555-0100"), (other, "Alice phone 555-0199")):
        r = run_cli("remember", text, "--kind", "profile", "--subject", "user:alice", "--key", "phone", "--as", "alice",
                    env=ENV, cwd=where)
        assert r.returncode == 0, r.stderr
    assert run_cli("sync", "--push", "--as", "alice", env=ENV, cwd=root).returncode == 0
    r = run_cli("sync", "--as", "bob", "--json", env=ENV, cwd=other)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "merged" and out["conflicts"] == [] and "private/alice" not in r.stdout
    r = run_cli("sync", "--as", "alice", "--json", env=ENV, cwd=other)
    assert r.returncode == 0
