"""Issue 13, the write side: what a write leaves for the next recall is done without a pass
over every note (verify's flags move on with the notes a write changed) — and the answers
equal a whole pass."""
import subprocess
from pathlib import Path

from conftest import T0, T1, team_fact

from mdmem.policy.verify import Verifier


def plain_commit(root: Path, path: str, text: str, *, email: str) -> None:
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    subprocess.run(["git", "-C", str(root), "add", path], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=x", "-c", f"user.email={email}", "commit", "-q",
                    "--no-verify", "-m", "by hand"], check=True)


def whole_pass(repo) -> dict:
    fresh = Verifier(repo)
    fresh.path = repo.root / ".mdmem" / "verify-fresh.json"  # not the cache under test
    return fresh.flags()


def test_flags_moved_on_by_writes_equal_a_whole_pass(repo):
    team_fact(repo, "Billing deploys before 3pm", key="deploy.window", new_key=True)
    assert repo.trust.flags() == whole_pass(repo) == {}
    # mdmem's own writes (moved on without git), then a planted note by someone who may not
    # write the root, then a permitted person's hand commit fixing another note, then more writes.
    team_fact(repo, "Refunds within 30 days", key="refund.window", new_key=True)
    team_fact(repo, "Billing deploys before 4pm", key="deploy.window", now=T1)
    assert repo.trust.flags() == whole_pass(repo) == {}
    planted = repo.get(as_user="bob", subject="service:billing", kind="fact", key="refund.window")
    text = (repo.root / planted.path).read_text().replace("30 days", "300 days")
    plain_commit(repo.root, planted.path, text, email="mallory@example.com")
    flags = repo.trust.flags()
    assert list(flags) == [planted.path] and "mallory@example.com" in flags[planted.path].detail
    assert flags == whole_pass(repo)
    team_fact(repo, "Search indexes nightly", key="index.schedule", subject="service:search", new_key=True)
    team_fact(repo, "Search indexes hourly", key="index.schedule", subject="service:search", now=T1)
    assert repo.trust.flags() == whole_pass(repo) and planted.path in repo.trust.flags()
    # A permitted writer commits the planted note again: trusted from then on.
    plain_commit(repo.root, planted.path, text.replace("300 days", "31 days"), email="dana@mdmem.invalid")
    team_fact(repo, "Payouts run at 6am", key="payout.time", subject="service:payouts", new_key=True)
    assert repo.trust.flags() == whole_pass(repo) == {}
