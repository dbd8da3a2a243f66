"""remember_many and `mdmem import`: one commit per batch through the gate, held items held,
refused ones reported with their line, searchable when the call returns."""
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import ENV, T0, T1, git, git_status, run_cli, team_fact

from mdmem import MemoryRepo


def items(n, **kw):
    return [dict(text=f"Service {i} pages the on-call after {i + 3} failed health checks", kind="fact",
                 subject=f"service:svc{i % 7}", key=f"pager.{i}", scope="team", team="payments", **kw)
            for i in range(n)]


def commits(repo):
    return int(subprocess.run(["git", "-C", str(repo.root), "rev-list", "--count", "HEAD"],
                              capture_output=True, text=True).stdout)


def test_one_commit_per_batch_and_searchable_on_return(repo):
    before = commits(repo)
    result = repo.remember_many(items(25, new_key=True), as_user="bob", batch_size=10, now=T0)
    assert len(result.committed) == 25 and not result.refused and not result.held
    assert commits(repo) - before == 3 == len(result.commits)
    repo.index.worktree_check_seconds = 3600
    hits = repo.recall("after 20 failed health checks", as_user="dana", now=T0)
    assert "team/payments/service/svc3/fact/pager.17.md" in [h.path for h in hits]
    assert git_status(repo.root) == ""
    # The view was rendered in the batch's commit, listing the imported notes.
    assert "pager.24" in (repo.root / "team/payments/MEMORY.md").read_text()


def test_held_and_refused_items_are_reported_with_their_line_and_the_rest_written(repo):
    batch = items(4, new_key=True)
    batch[1]["source"] = "web:https://example.com"  # untrusted: held for review
    batch[2]["scope"], batch[2]["team"] = "team", "search"  # bob is not in search: refused
    batch[3].pop("key")  # keyed kind without a key: refused
    batch.append({"text": "x", "kind": "fact", "subject": "service:a", "colour": "red"})  # unknown field
    result = repo.remember_many(batch, as_user="bob", now=T0)
    assert [c["line"] for c in result.committed] == [1]
    assert [h["line"] for h in result.held] == [2] and result.held[0]["review_id"]
    assert sorted(r["line"] for r in result.refused) == [3, 4, 5]
    assert all(r["reason"] for r in result.refused)
    held = repo.review_list(as_user="bob")
    assert [i.path for i in held] == [result.held[0]["path"]]
    assert all("example" not in h.text for h in repo.recall("health checks", as_user="bob", k=10, now=T0))


def test_the_key_gate_counts_notes_earlier_in_the_same_batch(repo):
    team_fact(repo, "Billing deploys any weekday before 3pm")
    result = repo.remember_many(items(1) + [dict(text="Billing deploys on Fridays too", kind="fact",
                                                subject="service:billing", key="deploy.days", scope="team",
                                                team="payments")], as_user="bob", now=T0)
    # pager.0 is new in an empty folder: fine; deploy.days is a new key beside deploy.window: refused
    assert [c["line"] for c in result.committed] == [1]
    assert result.refused[0]["line"] == 2 and "deploy.window" in result.refused[0]["reason"]
    same = [dict(text=f"note {i}", kind="fact", subject="service:new", key=f"k{i}", scope="team",
                 team="payments") for i in range(2)]
    result = repo.remember_many(same, as_user="bob", now=T0)
    assert [c["line"] for c in result.committed] == [1] and result.refused[0]["line"] == 2


def test_a_new_key_item_counts_for_a_later_item_of_the_batch_in_its_folder(repo):
    """The batch's own keys count even when the folder was never read (the first item said
    new_key, so nothing needed the folder's live keys until the second)."""
    batch = [dict(text="Refunds go out within 5 days", kind="fact", subject="service:refunds", key="refund.days",
                  scope="team", team="payments", new_key=True),
             dict(text="Refunds go out in a week", kind="fact", subject="service:refunds", key="refund.week",
                  scope="team", team="payments")]
    result = repo.remember_many(batch, as_user="bob", now=T0)
    assert [c["line"] for c in result.committed] == [1]
    assert result.refused[0]["line"] == 2 and "refund.days" in result.refused[0]["reason"]


def test_the_batch_checks_each_path_against_head_and_the_work_tree(repo):
    """Looked up for the whole batch at once: a note in HEAD is superseded (its version is the
    one replaced), a person's uncommitted edit is not overwritten, a stale expect_version is
    refused; the other items are written."""
    old = team_fact(repo, "Billing deploys any weekday before 3pm")
    edited = team_fact(repo, "Checkout deploys on Mondays", subject="service:checkout")
    (repo.root / edited.path).write_text((repo.root / edited.path).read_text() + "\nedited by hand\n")
    stale = team_fact(repo, "Search reindexes nightly", subject="service:search", key="reindex")
    team_fact(repo, "Search reindexes hourly", subject="service:search", key="reindex")
    current = team_fact(repo, "Ledger closes at midnight", subject="service:ledger", key="close")
    batch = [dict(text="Billing deploys before 4pm", kind="fact", subject="service:billing", key="deploy.window",
                  scope="team", team="payments"),
             dict(text="Checkout deploys on Tuesdays", kind="fact", subject="service:checkout", key="deploy.window",
                  scope="team", team="payments"),
             dict(text="Search reindexes weekly", kind="fact", subject="service:search", key="reindex",
                  scope="team", team="payments", expect_version=stale.version),
             dict(text="Fraud checks run on every order", kind="fact", subject="service:fraud", key="checks",
                  scope="team", team="payments"),
             dict(text="Ledger closes at 1am", kind="fact", subject="service:ledger", key="close",
                  scope="team", team="payments", expect_version=current.version)]
    result = repo.remember_many(batch, as_user="bob", now=T1)
    assert [(c["line"], c["op"]) for c in result.committed] == [(1, "supersede"), (4, "create"), (5, "supersede")]
    assert sorted(r["line"] for r in result.refused) == [2, 3]
    reasons = {r["line"]: r["reason"] for r in result.refused}
    assert "uncommitted edits" in reasons[2] and "changed since version" in reasons[3]
    assert "edited by hand" in (repo.root / edited.path).read_text()
    [version] = [v for v in repo.history(as_user="bob", subject="service:billing", kind="fact", key="deploy.window")
                 if v.note.text == "Billing deploys any weekday before 3pm"]
    assert version.version == old.version


def test_a_path_twice_keeps_both_versions_in_history(repo):
    two = [dict(text=f"Deploys close at {h}pm", kind="fact", subject="service:billing", key="deploy.window",
                scope="team", team="payments") for h in (3, 4)]
    result = repo.remember_many(two, as_user="bob", now=T1)
    assert len(result.commits) == 2 and [c["op"] for c in result.committed] == ["create", "supersede"]
    versions = repo.history(as_user="bob", subject="service:billing", kind="fact", key="deploy.window")
    assert [v.note.text for v in versions] == ["Deploys close at 4pm", "Deploys close at 3pm"]


def test_cli_import_jsonl_with_a_broken_line(repo, tmp_path):
    src = tmp_path / "notes.jsonl"
    rows = [json.dumps(i) for i in items(3)]
    rows.insert(1, "{not json")
    rows.append(json.dumps([1, 2]))
    src.write_text("\n".join(rows) + "\n\n")
    proc = run_cli("import", str(src), "--as", "bob", "--repo", str(repo.root), "--new-key", "--json",
                   env={"MDMEM_EMBEDDER": "none"})
    assert proc.returncode == 10, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["committed"]) == 3 and [r["line"] for r in out["refused"]] == [2, 5]
    assert "not JSON" in out["refused"][0]["reason"]
    fresh = MemoryRepo.open(repo.root)
    assert "pager.1" in [h.key for h in fresh.recall("after 4 failed health checks", as_user="dana")]


def test_cli_import_markdown_folder(repo, tmp_path):
    folder = tmp_path / "vault"
    (folder / "ops").mkdir(parents=True)
    (folder / "ops" / "backups.md").write_text("---\ntags: [ops]\nsubject: service:db\n---\nBackups run nightly at 2am\n")
    (folder / "plain.md").write_text("The staging database is Postgres 16\n")
    (folder / "bomb.md").write_text("---\na: &a [x, x]\nb: *a\n---\nboom\n")
    (folder / "link.md").symlink_to(folder / "plain.md")
    (folder / "notes.txt").write_text("not markdown")
    proc = run_cli("import", str(folder), "--as", "bob", "--repo", str(repo.root), "--kind", "fact",
                   "--subject", "service:infra", "--scope", "team", "--team", "payments", "--new-key", "--json",
                   env={"MDMEM_EMBEDDER": "none"})
    assert proc.returncode == 10, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["committed"]) == 2
    assert {r["line"] for r in out["refused"]} == {"bomb.md", "link.md"}
    assert any("aliases" in r["reason"] for r in out["refused"])
    fresh = MemoryRepo.open(repo.root)
    hit = fresh.recall("when do backups run?", as_user="dana")[0]
    assert hit.path == "team/payments/service/db/fact/backups.md"
    assert git_status(repo.root) == ""


def test_cli_import_of_a_missing_source_is_bad_input(repo, tmp_path):
    proc = run_cli("import", str(tmp_path / "nope.jsonl"), "--as", "bob", "--repo", str(repo.root))
    assert proc.returncode == 2 and "nope.jsonl" in proc.stderr


KILLED_IMPORT = r"""
import os, signal, sys
from mdmem import MemoryRepo
from mdmem.storage import gitstore
root, point = sys.argv[1], sys.argv[2]
items = [dict(text=f"Service {i} pages the on-call after {i + 3} failed health checks", kind="fact",
              subject=f"service:svc{i % 7}", key=f"pager.{i}", scope="team", team="payments", new_key=True)
         for i in range(40)]
commits = []
if point == "inside":  # inside the third batch's commit: the branch moved, the work tree not yet
    original = gitstore.GitStore._sync_worktree
    def die(self, changes):
        commits.append(1)
        if len(commits) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, changes)
    gitstore.GitStore._sync_worktree = die
def progress(done, total, what):
    if point == "between" and what == "writing notes" and done >= 20:  # after the second batch
        os.kill(os.getpid(), signal.SIGKILL)
MemoryRepo.open(root).remember_many(items, as_user="bob", batch_size=10, progress=progress,
                                    now="2026-10-01T09:00:00Z")
"""


def killed_import(repo, point):
    proc = subprocess.run([sys.executable, "-c", KILLED_IMPORT, str(repo.root), point], capture_output=True,
                          text=True, env={**os.environ, "MDMEM_EMBEDDER": "none"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("point, written", [("between", 20), ("inside", 30)])
def test_an_import_killed_keeps_whole_batches_and_a_rerun_finishes(repo, point, written):
    team_fact(repo, "Billing deploys any weekday before 3pm", new_key=True)
    repo.recall("health checks", as_user="dana", now=T0)  # an index on disk to be caught up
    repo.close()
    before = commits(repo)
    killed_import(repo, point)
    # Whole batches only: each committed batch is in HEAD, the work tree and git's index
    # (repaired on open when the kill came inside a commit); nothing of the later ones.
    reopened = MemoryRepo.open(repo.root)
    assert commits(reopened) - before == written // 10
    keys = {k.key for s in range(7) for k in reopened.keys(as_user="dana", subject=f"service:svc{s}", kind="fact",
                                                          now=T0)}
    assert keys == {f"pager.{i}" for i in range(written)}
    assert git_status(repo.root) == ""
    # The index agrees with the notes: the last written note is found, an unwritten one is not.
    hits = reopened.recall(f"after {written + 2} failed health checks", as_user="dana", now=T0, k=3)
    assert hits and hits[0].path.endswith(f"pager.{written - 1}.md")
    assert not any(h.path.endswith(f"pager.{written}.md") for h in
                   reopened.recall(f"after {written + 3} failed health checks", as_user="dana", now=T0, k=10))
    # Run again: the written notes are written again (a new version each), the rest for the first time.
    result = reopened.remember_many(items(40, new_key=True), as_user="bob", batch_size=10, now=T1)
    assert len(result.committed) == 40 and not result.refused and not result.held
    assert sum(c["op"] == "supersede" for c in result.committed) == written
    hits = reopened.recall("after 42 failed health checks", as_user="dana", now=T1, k=3)
    assert hits[0].path.endswith("pager.39.md")
    assert git_status(repo.root) == ""


def test_an_import_that_writes_nothing_says_so_in_its_exit_code(repo, tmp_path):
    """Exit 10 ("wrote some items...") came back when every item was refused."""
    team_fact_key = {"text": "Deploys close at 3pm", "kind": "fact", "subject": "service:billing",
                     "key": "deploy.window", "scope": "team", "team": "payments"}
    repo.remember(**{**team_fact_key, "text": "Deploys close at 2pm"}, as_user="bob")
    src = tmp_path / "refused.jsonl"
    src.write_text(json.dumps({**team_fact_key, "key": "other.window"}) + "\n")  # a new key without --new-key
    proc = run_cli("import", str(src), "--as", "bob", "--repo", str(repo.root), env={"MDMEM_EMBEDDER": "none"})
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({**team_fact_key, "source": "tool:grafana"}) + "\n")
    proc = run_cli("import", str(held), "--as", "bob", "--repo", str(repo.root), env={"MDMEM_EMBEDDER": "none"})
    assert proc.returncode == 4, (proc.stdout, proc.stderr)


# `mdmem import ./vault` dropped the vault's editor fields (tags, aliases), so `--tag`
# found nothing; they are kept now, like fields added by hand. mdmem's own fields cannot be
# smuggled in that way.
def test_import_keeps_a_vaults_editor_fields(billing_team):
    root = billing_team.root
    vault = root.parent / "vault"
    vault.mkdir()
    (vault / "chargebacks.md").write_text("---\ntags: [billing]\naliases: [cb]\ncreated: 2024-01-02\nid: x1\n---\n"
                                          "Chargebacks are disputed within 10 days\n")
    r = run_cli("import", str(vault), "--as", "bob", "--kind", "fact", "--subject", "service:billing", "--scope",
                "team", "--team", "payments", "--new-key", env=ENV, cwd=root)
    assert r.returncode == 0, (r.stdout, r.stderr)
    text = (root / "team/payments/service/billing/fact/chargebacks.md").read_text()
    assert "billing" in text and "cb" in text and "2024-01-02" in text and "x1" not in text
    r = run_cli("recall", "Chargebacks are disputed", "--tag", "billing", "--as", "bob", env=ENV, cwd=root)
    assert "within 10 days" in r.stdout, r.stdout
    with MemoryRepo(root, embedder="none") as repo:
        out = repo.remember_many([{"text": "t", "kind": "fact", "subject": "service:x", "key": "k", "scope": "team",
                                   "team": "payments", "extra": {"owner": "alice"}},
                                  {"text": "t", "kind": "fact", "subject": "service:x", "key": "k2", "scope": "team",
                                   "team": "payments", "extra": {"tags": [{"deep": 1}]}}],
                                 as_user="bob", new_key=True, now=T0)
    assert len(out.refused) == 2 and "owner" in out.refused[0]["reason"] and "tags" in out.refused[1]["reason"]


# A JSONL import refused `context` and `tags` (a conversation history could carry neither).
def test_jsonl_import_carries_context_and_tags(billing_team, tmp_path):
    lines = tmp_path / "turns.jsonl"
    lines.write_text('{"text": "Yes, last Tuesday!", "kind": "fact", "subject": "service:billing", "key": "t1", '
                     '"scope": "team", "team": "payments", "context": "Caroline: when did billing deploy?", '
                     '"tags": ["deploys"]}\n')
    r = run_cli("import", str(lines), "--as", "bob", "--new-key", env=ENV, cwd=billing_team.root)
    assert r.returncode == 0, (r.stdout, r.stderr)
    text = (billing_team.root / "team/payments/service/billing/fact/t1.md").read_text()
    assert "when did billing deploy?" in text and "deploys" in text
    r = run_cli("recall", "when did billing deploy", "--tag", "deploys", "--as", "bob", env=ENV, cwd=billing_team.root)
    assert "last Tuesday" in r.stdout, r.stdout


def test_an_import_that_held_one_item_and_refused_another_does_not_exit_as_if_nothing_was_held(repo, tmp_path):
    """README: exit 10 when an import "wrote some items and held or refused others"; 3 = "refused
    ...; nothing written". An import with one held item and one refused item makes a hold (a
    review branch) and exits 3, the same as an import where everything was refused: a script
    that retries on 3 makes the same hold again (two review ids for one note)."""
    items = tmp_path / "notes.jsonl"
    items.write_text(
        '{"text": "p99 is 180ms", "kind": "fact", "subject": "service:billing", "key": "latency", '
        '"scope": "team", "team": "payments", "source": "tool:grafana"}\n'
        '{"text": "bad", "kind": "nope", "subject": "service:billing", "key": "x", "scope": "team", '
        '"team": "payments"}\n')
    r = run_cli("import", str(items), "--as", "bob", "--new-key", "--repo", str(repo.root))
    held = [b for b in git(repo.root, "branch", "--list", "review/*").stdout.split() if b.startswith("review/")]
    assert len(held) == 1
    assert r.returncode != 3, (r.returncode, r.stdout)
