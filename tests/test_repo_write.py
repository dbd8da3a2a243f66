import subprocess

from conftest import T0, T1, git_status, run_cli, team_fact

from mdmem import MemoryRepo


def test_remember_is_one_commit_with_trailers_and_a_clean_work_tree(repo):
    before = repo.store.head()
    r = team_fact(repo, "Billing deploys only on Tuesdays")
    assert r.status == "committed" and r.superseded is None
    assert (repo.root / r.path).read_text().endswith("Billing deploys only on Tuesdays\n")
    assert git_status(repo.root) == ""
    log = subprocess.run(["git", "-C", str(repo.root), "log", "-1", "--format=%P%n%an%n%aI%n%B"],
                         capture_output=True, text=True).stdout.splitlines()
    assert log[0] == before and log[1] == "bob" and log[2].startswith("2026-10-01T09:00:00")
    assert "Memory-Op: create" in log and "Memory-Actor: bob" in log and "Memory-Source: user" in log


def test_same_key_supersedes_the_same_file_and_keeps_the_id(repo):
    first = team_fact(repo, "Billing deploys only on Tuesdays")
    second = team_fact(repo, "Billing deploys any weekday before 3pm", now=T1)
    assert second.path == first.path and second.superseded == first.version
    assert second.note_id == first.note_id
    got = repo.get(as_user="dana", subject="service:billing", kind="fact", key="deploy.window", now=T1)
    assert got.note.text == "Billing deploys any weekday before 3pm"
    msg = subprocess.run(["git", "-C", str(repo.root), "log", "-1", "--format=%B"], capture_output=True, text=True).stdout
    assert "Memory-Op: supersede" in msg


def test_episodes_append_and_a_second_write_is_refused(repo):
    import pytest
    from mdmem import Refused
    a = repo.remember("Deploy failed", as_user="ali", kind="event", subject="service:billing", now=T0)
    b = repo.remember("Deploy failed", as_user="ali", kind="episode", subject="service:billing", now=T0)
    assert a.path != b.path and "/episode/2026-10/" in a.path
    repo.remember("Freeze", as_user="ali", kind="episode", subject="service:billing", key="freeze", now=T0)
    with pytest.raises(Refused) as err:
        repo.remember("Freeze again", as_user="ali", kind="episode", subject="service:billing", key="freeze", now=T0)
    assert "append-only" in str(err.value)


def test_working_notes_get_the_default_ttl_and_expire_at_read_time(repo):
    import pytest
    from mdmem import NotFound
    repo.remember("On branch fix-1", as_user="ali", kind="scratch", subject="task:current", key="branch", source="agent", now=T0)
    got = repo.get(as_user="ali", subject="task:current", kind="working", key="branch", now="2026-10-01T09:59:00Z")
    assert got.note.expires_at.isoformat() == "2026-10-01T10:00:00+00:00"
    with pytest.raises(NotFound):
        repo.get(as_user="ali", subject="task:current", kind="working", key="branch", now="2026-10-01T10:00:01Z")


def test_sweep_removes_expired_notes_in_one_commit(repo):
    repo.remember("a", as_user="ali", kind="working", subject="task:x", key="a", source="agent", now=T0)
    repo.remember("b", as_user="ali", kind="working", subject="task:x", key="b", source="agent", new_key=True, ttl="3h", now=T0)
    out = repo.sweep(as_user="ali", now="2026-10-01T11:00:00Z")
    assert [p.rsplit("/", 1)[-1] for p in out.removed] == ["a.md"]
    assert not (repo.root / out.removed[0]).exists() and git_status(repo.root) == ""
    assert repo.sweep(as_user="ali", now="2026-10-01T11:00:00Z").commit is None


def test_retire_sets_valid_until_and_hides_the_note(repo):
    import pytest
    from mdmem import NotFound
    r = team_fact(repo, "Billing deploys only on Tuesdays")
    repo.retire(as_user="bob", path=r.path, now=T1)
    with pytest.raises(NotFound):
        repo.get(as_user="bob", path=r.path, now=T1)
    assert repo.get(as_user="bob", path=r.path, now="2026-10-02T00:00:00Z").note.valid_until is not None


def test_init_refuses_an_existing_memory_repo(repo):
    import pytest
    from mdmem import BadInput
    with pytest.raises(BadInput) as err:
        MemoryRepo.init(repo.root, teams={}, as_user="mdmem")
    assert "already a memory repo" in str(err.value)


def test_init_lays_down_the_template(repo):
    for name in ("README.md", "MEMORY.md", "mdmem.toml", ".gitignore"):
        assert (repo.root / name).exists(), name
    for hook in ("pre-commit", "post-merge", "post-rewrite"):  # installed from mdmem's package, never committed
        assert (repo.root / ".git" / "hooks" / hook).stat().st_mode & 0o111
        assert not repo.store.git("ls-tree", "-r", "HEAD", "--name-only").count(hook)
    assert repo.store.git("config", "--get", "core.hooksPath", check=False).strip() == ""
    assert repo.config.teams["payments"] == {"alice", "bob", "dana"}
    assert git_status(repo.root) == ""


def test_consolidate_builds_a_per_scope_digest_with_its_inputs(repo):
    a = team_fact(repo, "Billing deploys any weekday before 3pm")
    repo.remember("Only Mondays for me", as_user="alice", kind="fact", subject="service:billing", key="deploy.window", now=T0)
    r = repo.consolidate(as_user="bob", subject="service:billing", team="payments", now=T1)
    digest = repo.get(as_user="dana", path=r.path, now=T1)
    assert digest.note.derived_from == (a.note_id,)
    assert "Billing deploys any weekday" in digest.note.text and "Mondays" not in digest.note.text


def test_the_on_disk_index_is_version_4_and_status_stays_clean(repo):
    """Every write rewrites the on-disk index; version 4 makes that file a third smaller."""
    import subprocess

    from conftest import team_fact

    team_fact(repo, "Billing deploys any weekday before 3pm")
    header = (repo.root / ".git" / "index").read_bytes()[:8]
    assert header[:4] == b"DIRC" and int.from_bytes(header[4:8], "big") == 4
    team_fact(repo, "Billing deploys on weekdays only")
    assert subprocess.run(["git", "-C", str(repo.root), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""


def test_a_write_dated_in_the_future_is_refused_and_history_stays_in_order(repo):
    """Attack m6: --now 2030 wrote a version dated after its successor."""
    import pytest
    from mdmem.errors import BadInput

    with pytest.raises(BadInput, match="now: 2030-01-01T00:00:00Z is after the clock"):
        team_fact(repo, "Billing deploys on Fridays", now="2030-01-01T00:00:00Z")
    r = run_cli("remember", "Billing deploys on Fridays", "--kind", "fact", "--subject", "service:billing",
                "--key", "deploy.window", "--scope", "team", "--team", "payments", "--as", "bob",
                "--now", "2030-01-01T00:00:00Z", "--repo", str(repo.root))
    assert r.returncode == 2 and "valid_from" in r.stderr
    assert repo.recall("deploy", as_user="bob", now="2030-01-01T00:00:00Z") is not None  # reading then is fine
