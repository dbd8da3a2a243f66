"""`sync --replay` keeps what it can: after someone else's erasure, a teammate's
unpushed commit quoting the erased text is replayed with the quote scrubbed, unrelated notes in
the same commit are kept, and a change to an erased note version is saved scrubbed where its
person finds it, named, with a non-zero exit code."""
import json
from pathlib import Path

from conftest import T0, TEAMS, git, run_cli, shared_remote

from mdmem import MemoryRepo

SECRET = "Secret vendor contract number ZX-99417 expires soon"
VENDOR = "team/payments/service/billing/fact/vendor.md"


def test_replay_scrubs_quotes_keeps_unrelated_notes_and_saves_what_it_cannot_keep(tmp_path):
    root = tmp_path / "dana"
    with MemoryRepo.init(root, teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember(SECRET, as_user="dana", kind="fact", subject="service:billing", key="vendor", scope="team",
                      team="payments", now=T0)
    bare = shared_remote(root, tmp_path, "dana", guard=True)
    bob = tmp_path / "bob"
    git(tmp_path, "clone", "-q", str(bare), str(bob))
    # bob's unpushed work: one import of two notes (one quotes the secret), then an edit of the secret's note.
    batch = tmp_path / "batch.jsonl"
    common = {"kind": "decision", "scope": "team", "team": "payments"}
    batch.write_text(json.dumps({**common, "text": f"Per the vendor note: {SECRET}. Renew in March.",
                                 "subject": "service:billing", "key": "vendor.renewal"}) + "\n"
                     + json.dumps({**common, "text": "The ledger database moves to Postgres 16",
                                   "subject": "service:ledger", "key": "db"}) + "\n")
    imported = run_cli("import", str(batch), "--as", "bob", "--new-key", "--repo", str(bob))
    assert imported.returncode == 0, imported.stderr
    edit = run_cli("remember", f"{SECRET}; bob owns the renewal now", "--kind", "fact", "--subject",
                   "service:billing", "--key", "vendor", "--scope", "team", "--team", "payments", "--as", "bob",
                   "--repo", str(bob))
    assert edit.returncode == 0, edit.stderr
    erase = run_cli("forget", "--path", VENDOR, "--push", "--repo", str(root), "--as", "dana")
    assert erase.returncode == 0, erase.stdout + erase.stderr

    out = run_cli("sync", "--replay", "--push", "--repo", str(bob), "--as", "bob", "--json")
    assert out.returncode == 10, out.stdout + out.stderr
    report = json.loads(out.stdout)
    # The import is replayed whole: the unrelated decision as written, the quote scrubbed.
    [replayed] = report["replayed"]
    assert replayed["scrubbed"] == ["team/payments/service/billing/decision/vendor.renewal.md"]
    ledger = git(bare, "show", "main:team/payments/service/ledger/decision/db.md").stdout
    assert "Postgres 16" in ledger
    renewal = git(bare, "show", "main:team/payments/service/billing/decision/vendor.renewal.md").stdout
    assert "Renew in March" in renewal and "[removed]" in renewal and "ZX-99417" not in renewal
    # The edit of the erased note cannot be re-applied: saved scrubbed, named, nothing lost silently.
    [left] = report["left_out"]
    assert left["paths"] == [VENDOR] and len(left["saved"]) == 1
    saved = (bob / left["saved"][0]).read_text()
    assert "bob owns the renewal now" in saved and "ZX-99417" not in saved
    text = run_cli("sync", "--repo", str(bob), "--as", "bob")
    assert text.returncode == 0
    for where in (bob, bare):
        assert "ZX-99417" not in git(where, "log", "--all", "-p").stdout
    assert not any("ZX-99417" in p.read_text(errors="replace") for p in Path(bob).rglob("*.md"))


def test_replay_after_a_person_erasure_keeps_quotes_of_notes_the_erasure_left_alone(tmp_path):
    """Only what the old history held and the new one does not is erased: a team note the rewrite
    kept unchanged (its blob is in both histories) is no erased version, so a teammate's note
    quoting it is replayed as written."""
    root = tmp_path / "dana"
    with MemoryRepo.init(root, teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember("Alice prefers async standups", as_user="alice", kind="profile", subject="user:alice",
                      key="standup", now=T0)
        repo.remember("Escalations after hours: call the desk at 555-0142", as_user="bob", kind="fact",
                      subject="service:billing", key="escalation", scope="team", team="payments", now=T0)
    bare = shared_remote(root, tmp_path, "dana", guard=True)
    bob = tmp_path / "bob"
    git(tmp_path, "clone", "-q", str(bare), str(bob))
    wrote = run_cli("remember", "Runbook: escalations after hours call the desk at 555-0142 then page on-call",
                    "--kind", "fact", "--subject", "service:billing", "--key", "runbook", "--new-key", "--scope",
                    "team", "--team", "payments", "--as", "bob", "--repo", str(bob))
    assert wrote.returncode == 0, wrote.stderr
    erase = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--push", "--repo", str(root),
                    "--as", "dana")
    assert erase.returncode == 0, erase.stdout + erase.stderr
    out = run_cli("sync", "--replay", "--repo", str(bob), "--as", "bob")
    assert out.returncode == 0, out.stdout + out.stderr
    runbook = (bob / "team/payments/service/billing/fact/runbook.md").read_text()
    assert "555-0142" in runbook and "[removed]" not in runbook, runbook
