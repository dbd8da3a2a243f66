"""A proof that could not look everywhere never says PASS: a non-eraser's prove-gone
is INCOMPLETE with its own exit code whether or not the text is where they may not read, and
names who can complete it."""
import json

import pytest

from conftest import T0, T1, TEAMS, run_cli

from mdmem import MemoryRepo
from mdmem.errors import Incomplete

NEEDLE = "bob moonlights as a juggler in Tromso"


@pytest.fixture
def repo(tmp_path):
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as made:
        made.remember(f"Bob says {NEEDLE}", as_user="bob", kind="profile", subject="user:bob", key="hobby", now=T0)
        made.forget(as_user="dana", owner="bob", now=T0)  # bob is the subject of an erasure, no eraser
        yield made


def prove(root, user, needle=NEEDLE):
    out = run_cli("prove-gone", "--needle", needle, "--owner", "bob", "--repo", str(root), "--as", user, "--json")
    return out.returncode, json.loads(out.stdout) if out.stdout.strip().startswith("{") else out.stderr


def test_a_non_erasers_proof_is_incomplete_whether_or_not_the_text_is_where_he_may_not_read(repo):
    root = repo.root
    # Nowhere at all:
    absent = prove(root, "bob")
    # Then in carol's team root (bob may not read team/search): two objects hold it.
    repo.remember(f"Gossip: {NEEDLE}", as_user="carol", kind="fact", subject="service:search", key="gossip",
                  scope="team", team="search", now=T1)
    repo.close()
    present = prove(root, "bob")
    for code, report in (absent, present):
        assert code == Incomplete.exit_code == 11, report
        assert report["verdict"] == "INCOMPLETE" and report["passed"] is False
        assert [n["verdict"] for n in report["needles"]] == ["INCOMPLETE"]
        assert report["complete_by"] == ["dana"]
    # The two answers are the same: the proof is no oracle for team/search.
    strip = ("cannot_reach", "not_checked")
    assert {k: v for k, v in absent[1].items() if k not in strip} == {k: v for k, v in present[1].items()
                                                                       if k not in strip}
    text = run_cli("prove-gone", "--needle", NEEDLE, "--owner", "bob", "--repo", str(root), "--as", "bob")
    assert "needle 1: INCOMPLETE" in text.stdout and "PASS" not in text.stdout
    assert "dana" in text.stdout  # who can complete it
    # The eraser's proof is complete: it finds the text.
    code, report = prove(root, "dana")
    assert code == 7 and report["verdict"] == "FAIL"


def test_an_erasers_proof_of_a_text_nowhere_passes(repo):
    root = repo.root
    repo.close()
    code, report = prove(root, "dana")
    assert code == 0 and report["verdict"] == "PASS" and report["passed"] and report["complete_by"] == []


def test_a_full_readers_proof_is_no_oracle_for_objects_history_does_not_reach(tmp_path):
    """alice reads every root her clone's history holds, so her proof is complete, unless the
    clone also holds objects no history reaches (a rejected hold of carol's private note): whose
    they are nobody can say, so her proof is INCOMPLETE whatever she guesses, never FAIL or PASS."""
    import subprocess

    with MemoryRepo.init(tmp_path / "mem", teams={"payments": ["alice", "carol"]}, erasers=["dana"], now=T0,
                         as_user="dana") as repo:
        repo.remember("Billing deploys on Tuesdays", as_user="alice", kind="fact", subject="service:billing",
                      key="deploy", scope="team", team="payments", now=T0)
        guess = "Dana gets a full proof of alice"  # alice and dana's roots hold nothing else
        assert repo.prove_gone([guess], as_user="alice").verdict == "PASS"
        secret = b"Carol is seeing a therapist on Thursdays"
        subprocess.run(["git", "-C", str(repo.root), "hash-object", "-w", "--stdin"], input=secret, check=True,
                       capture_output=True)
        for needle in ("seeing a therapist on Thursdays", "seeing a dentist on Thursdays"):
            assert repo.prove_gone([needle], as_user="alice").verdict == "INCOMPLETE"
        assert repo.prove_gone(["seeing a therapist on Thursdays"], as_user="dana").verdict == "FAIL"
