"""`recall`: current versions only, each user's scopes only, past states, read rules per kind, the
score floor, broken notes and lost caches never breaking answers, and scores that do not depend on
notes the reader may not see."""
import shutil
import subprocess
import sys

from conftest import ENV, T0, T1, git, run_cli, team_fact

from mdmem import MemoryRepo
from mdmem.storage.gitdir import cache_dir


def seed(repo):
    team_fact(repo, "Billing deploys only on Tuesdays and Thursdays")
    team_fact(repo, "Billing deploys any weekday before 3pm", now=T1)
    team_fact(repo, "Refunds are allowed within 30 days", key="refund.window", new_key=True, now=T1)
    repo.remember("My own note: I only deploy billing on Mondays", as_user="alice", kind="fact",
                  subject="service:billing", key="deploy.window", now=T1)
    repo.remember("Search ranking moves to a learned model in Q1", as_user="carol", kind="decision",
                  subject="service:search", key="ranking", scope="team", team="search", now=T1)


def test_recall_returns_the_current_version_only(repo):
    seed(repo)
    hits = repo.recall("When is billing allowed to deploy?", as_user="bob", now=T1)
    assert hits[0].text == "Billing deploys any weekday before 3pm"
    assert all("Tuesdays" not in h.text for h in hits)
    assert {"path", "kind", "subject", "key", "scope", "team", "owner", "source", "text", "score", "version",
            "valid_from"} <= set(hits[0].to_dict())


def test_each_user_sees_only_their_scopes(repo):
    seed(repo)
    alice = [h.text for h in repo.recall("when do I deploy billing", as_user="alice", k=10, now=T1)]
    bob = [h.text for h in repo.recall("when do I deploy billing", as_user="bob", k=10, now=T1)]
    carol = [h.text for h in repo.recall("deploy billing ranking", as_user="carol", k=10, now=T1)]
    assert any("Mondays" in t for t in alice) and not any("Mondays" in t for t in bob)
    assert all("Billing" not in t and "billing" not in t for t in carol)


def test_history_path_answers_what_it_was_before(repo):
    seed(repo)
    hits = repo.recall("When could billing deploy before?", as_user="bob", include_history=True, now=T1)
    assert hits[0].text == "Billing deploys only on Tuesdays and Thursdays" and not hits[0].current
    assert hits[0].commit


def test_at_gives_the_state_at_a_past_time(repo):
    seed(repo)
    hits = repo.recall("When is billing allowed to deploy?", as_user="bob", at="2026-10-05T00:00:00Z", now=T1)
    assert hits[0].text == "Billing deploys only on Tuesdays and Thursdays"
    assert all("Refunds" not in h.text for h in hits)  # written later


def test_an_expired_working_note_is_never_recalled_without_a_sweep(repo):
    repo.remember("Working branch is feature/fx-rounding-fix", as_user="ali", kind="working",
                  subject="task:current", key="branch", source="agent", now=T0)
    assert repo.recall("which branch am I on", as_user="ali", now=T0)[0].key == "branch"
    later = "2026-10-01T10:00:01Z"
    assert repo.recall("which branch am I on", as_user="ali", now=later) == []
    assert repo.recall("branch", as_user="ali", kinds=["working"], now=later) == []
    assert repo.recall("branch", as_user="ali", include_history=True, now=later)[0].current is False


def test_working_memory_is_newest_first(repo):
    repo.remember("Editing InvoiceService.cs", as_user="ali", kind="working", subject="task:current", key="a",
                  source="agent", ttl="8h", now=T0)
    repo.remember("Editing PaymentController.cs", as_user="ali", kind="working", subject="task:current", key="b",
                  source="agent", ttl="8h", new_key=True, now="2026-10-01T10:00:00Z")
    hits = repo.recall("anything", as_user="ali", kinds=["scratch"], now="2026-10-01T11:00:00Z")
    assert [h.key for h in hits] == ["b", "a"]


def test_profile_reads_are_exact_key_lookups(repo):
    repo.remember("Prefers async standups", as_user="alice", kind="preference", subject="user:alice",
                  key="standup", now=T0)
    repo.remember("Works in Europe/Istanbul", as_user="alice", kind="profile", subject="user:alice",
                  key="timezone", new_key=True, now=T0)
    hits = repo.recall("meetings", as_user="alice", kinds=["profile"], subject="user:alice", key="timezone", now=T0)
    assert [h.key for h in hits] == ["timezone"]
    assert repo.recall("x", as_user="bob", kinds=["profile"], subject="user:alice", key="timezone", now=T0) == []


def test_the_floor_keeps_unrelated_notes_out(repo):
    seed(repo)
    assert repo.recall("What colour is the office cat?", as_user="bob", now=T1) == []


def test_a_hand_edit_is_found_under_its_new_text(repo):
    seed(repo)
    r = repo.recall("refund window", as_user="bob", now=T1)[0]
    note = repo.root / r.path
    note.write_text(note.read_text().replace("within 30 days", "within 45 days for marketplace orders"))
    fresh = MemoryRepo.open(repo.root)
    assert "45 days" in fresh.recall("refund window", as_user="bob", now=T1)[0].text
    repo.index.worktree_check_seconds = 0
    assert "45 days" in repo.recall("marketplace refunds", as_user="bob", now=T1)[0].text


def test_a_broken_note_never_breaks_recall_for_the_others(repo):
    seed(repo)
    r = repo.recall("refund window", as_user="bob", now=T1)[0]
    (repo.root / r.path).write_text("---\nkind: [\n---\nbroken")
    fresh = MemoryRepo.open(repo.root)
    hits = fresh.recall("When is billing allowed to deploy?", as_user="bob", now=T1)
    assert hits[0].text == "Billing deploys any weekday before 3pm"
    assert r.path in fresh.index.broken()
    assert all(h.path != r.path for h in fresh.recall("refund", as_user="bob", now=T1))
    assert (repo.root / r.path).read_text().startswith("---\nkind: [")  # untouched


def test_deleting_the_cache_gives_the_same_answers(repo):
    seed(repo)
    before = [(h.path, h.text) for h in repo.recall("billing deploy", as_user="bob", k=5, now=T1)]
    repo.close()
    shutil.rmtree(cache_dir(repo.root))
    fresh = MemoryRepo.open(repo.root)
    assert [(h.path, h.text) for h in fresh.recall("billing deploy", as_user="bob", k=5, now=T1)] == before


def test_the_index_follows_a_pull_with_renames_and_deletions(repo):
    seed(repo)
    repo.recall("refunds", as_user="bob", now=T1)
    r = repo.recall("refunds", as_user="bob", now=T1)[0]
    new = r.path.replace("refund.window", "refund.policy")
    text = (repo.root / r.path).read_text().replace("key: refund.window", "key: refund.policy")
    (repo.root / new).write_text(text)
    (repo.root / r.path).unlink()
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qm", "rename", "--no-verify"], check=True)
    hits = repo.recall("refunds", as_user="bob", now=T1)
    assert [h.path for h in hits if "refund" in h.path] == [new]


def test_two_processes_syncing_at_once(repo):
    seed(repo)
    # Both find no index yet: one builds it (and the versions index), the other waits and uses it.
    code = ("import sys; from mdmem import MemoryRepo; r = MemoryRepo.open(sys.argv[1]); "
            "print(r.recall('billing deploy', as_user='bob', now='2026-10-15T09:00:00Z')[0].text); "
            "print(len(r.recall('billing deploy', as_user='bob', include_history=True, now='2026-10-15T09:00:00Z')))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(repo.root)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [" ".join(o[:-1]) for o in outs] == ["Billing deploys any weekday before 3pm"] * 2
    assert all(int(o[-1]) >= 2 for o in outs)  # both versions of deploy.window


def test_recall_names_the_user(repo):
    import pytest

    from mdmem import BadInput
    with pytest.raises(BadInput):
        repo.recall("x", as_user=None)


def test_cli_recall_json(repo):
    import json

    from conftest import run_cli
    seed(repo)
    r = run_cli("recall", "When is billing allowed to deploy?", "--repo", str(repo.root), "--as", "dana",
                "--json", "--now", T1)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"][0]["text"] == "Billing deploys any weekday before 3pm"


def test_a_repo_with_one_note_answers(repo):
    repo.remember("Ali now deploys straight to production", as_user="ali", kind="profile", subject="user:ali",
                  key="deploy.target", now=T0)
    assert repo.recall("where does Ali deploy", as_user="ali", now=T0)[0].key == "deploy.target"


def test_history_recall_follows_new_commits_without_a_rebuild(repo):
    seed(repo)
    assert repo.recall("billing deploy", as_user="bob", include_history=True, now=T1)
    versions_dir = cache_dir(repo.root) / "versions"
    before = {p.name for p in versions_dir.iterdir() if p.suffix == ".seg"}
    team_fact(repo, "Billing deploys only after the Friday freeze", now="2026-10-20T09:00:00Z")
    hits = repo.recall("When could billing deploy before?", as_user="bob", include_history=True,
                       now="2026-10-21T09:00:00Z")
    texts = [h.text for h in hits if h.key == "deploy.window"]
    assert texts[:3] == ["Billing deploys any weekday before 3pm", "Billing deploys only on Tuesdays and Thursdays",
                         "Billing deploys only after the Friday freeze"]
    assert [h.current for h in hits if h.key == "deploy.window"][:3] == [False, False, True]
    assert before & {p.name for p in versions_dir.iterdir()}  # caught up in place, not rebuilt
    at = repo.recall("billing deploy", as_user="bob", at="2026-10-16T00:00:00Z", now="2026-10-21T09:00:00Z")
    assert at[0].text == "Billing deploys any weekday before 3pm"


def test_cli_index_rebuild_and_recall_at(repo):
    import json

    from conftest import run_cli
    seed(repo)
    r = run_cli("index", "--rebuild", "--repo", str(repo.root), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rebuilt"] and json.loads(r.stdout)["indexed"] == 4
    r = run_cli("recall", "When is billing allowed to deploy?", "--at", "2026-10-05T00:00:00Z", "--repo",
                str(repo.root), "--as", "bob", "--json", "--now", T1)
    assert json.loads(r.stdout)["hits"][0]["text"] == "Billing deploys only on Tuesdays and Thursdays"
    r = run_cli("recall", "anything", "--repo", str(repo.root))
    assert r.returncode == 2 and "MDMEM_USER" in r.stderr


def test_a_long_lived_process_sees_what_another_process_wrote(repo):
    """An MCP server keeps its index open while the CLI writes and catches the index up."""
    team_fact(repo, "Billing deploys only on Tuesdays and Thursdays")
    assert repo.recall("refunds allowed", as_user="bob", now=T1) == []
    repo.recall("deploy before", as_user="bob", include_history=True, now=T1)
    other = (f"from mdmem import MemoryRepo\nr = MemoryRepo.open({str(repo.root)!r})\n"
             "r.remember('Refunds are allowed within 30 days', as_user='bob', kind='fact', subject='service:billing', "
             "key='refund.window', scope='team', team='payments', new_key=True, now='2026-10-05T00:00:00Z')\n"
             "r.remember('Billing deploys any weekday before 3pm', as_user='bob', kind='fact', "
             "subject='service:billing', key='deploy.window', scope='team', team='payments', now='2026-10-05T00:00:00Z')\n"
             "assert r.recall('refunds allowed', as_user='bob', now='2026-10-05T00:00:00Z')\n"
             "assert r.recall('deploy before', as_user='bob', include_history=True, now='2026-10-05T00:00:00Z')\n")
    subprocess.run([sys.executable, "-c", other], check=True)
    hits = repo.recall("refunds allowed", as_user="bob", now=T1)
    assert [h.text for h in hits][:1] == ["Refunds are allowed within 30 days"]
    history = repo.recall("deploy before", as_user="bob", include_history=True, now=T1)
    assert "Billing deploys any weekday before 3pm" in [h.text for h in history]


def test_key_is_an_exact_lookup_for_any_keyed_kind_and_refused_where_it_means_nothing(repo):
    """--key was silently ignored unless --kind profile."""
    import pytest

    from mdmem.errors import BadInput

    team_fact(repo, "Refunds within 30 days", key="refund.window")
    team_fact(repo, "Refund fee is 2 EUR", key="refund.fee", new_key=True)
    hits = repo.recall("refunds", as_user="bob", kinds=["fact"], subject="service:billing", key="refund.window")
    assert [h.key for h in hits] == ["refund.window"]
    with pytest.raises(BadInput, match="key"):
        repo.recall("refunds", as_user="bob", key="refund.window")  # no subject, no kind
    with pytest.raises(BadInput, match="keyed"):
        repo.recall("refunds", as_user="bob", kinds=["episode"], subject="service:billing", key="x")
    with pytest.raises(BadInput, match="history"):
        repo.recall("refunds", as_user="bob", kinds=["fact"], subject="service:billing", key="refund.window",
                    include_history=True)


# Recall's warning about a broken note printed a committed file name's newline raw: a
# teammate could fake extra output lines.
def test_recall_warnings_are_one_line_each(two_teams):
    folder = two_teams.root / "team" / "payments" / "service" / "billing" / "fact"
    folder.mkdir(parents=True)
    (folder / "x\nFAKE ok: all good.md").write_text("---\nkind: fact\n---\nhi\n")
    git(two_teams.root, "add", "-A")
    git(two_teams.root, "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "x", "--no-verify")
    r = run_cli("recall", "hi", "--as", "dana", env=ENV, cwd=two_teams.root)
    assert r.returncode == 0, r.stderr
    assert not any(line.startswith("FAKE") for line in r.stdout.splitlines())
    assert "x\\nFAKE ok: all good.md: " in r.stdout


def _bob_scores(tmp_path, name, private_word):
    repo = MemoryRepo.init(tmp_path / name, teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           now=T0, as_user="mdmem")
    team_fact(repo, "The vendor codename is quagga", key="codename", new_key=True)
    team_fact(repo, "The ledger tool is zorilla", key="ledger", new_key=True)
    for i in range(8):
        repo.remember(f"Alice: {private_word} deal note {i}", as_user="alice", kind="fact", subject="user:alice",
                      key=f"q{i}", scope="private", new_key=True, now=T0)
    hits = repo.recall("quagga zorilla", as_user="bob", now=T1)
    repo.close()
    return [(h.path, round(h.score, 6)) for h in hits]


def test_recall_scores_do_not_depend_on_notes_the_reader_may_not_see(tmp_path):
    """Candidates are filtered by visibility before ranking, but the BM25 statistics still count
    alice's private notes: bob's score for his own team note changes with whether alice's private
    notes contain the word he asks about -- an oracle for text he may not read (also over MCP)."""
    with_word = _bob_scores(tmp_path, "a", "quagga")
    without = _bob_scores(tmp_path, "b", "walrus")
    assert [p for p, _ in with_word] == [p for p, _ in without]
    assert with_word == without
