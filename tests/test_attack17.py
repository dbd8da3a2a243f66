"""Attack 17 (README user + attacker, session 17): each test failed on the code it was written
against (885f2a2). Those marked ``open`` are defects found and not fixed yet (strict: a fix makes
them fail until the mark is removed); MEMORY.md's known gaps say why each is left."""
from __future__ import annotations


import pytest

from mdmem import MemoryRepo
from conftest import T0, T1, git, run_cli, team_fact


def open_defect(why: str):
    return pytest.mark.xfail(strict=True, reason=f"open (attack 17): {why}")


def hand_commit_as(root, user, message="hand edit"):
    """A person commits with plain git under the identity mdmem itself uses for them."""
    git(root, "add", "-A")
    git(root, "-c", f"user.name={user}", "-c", f"user.email={user}@mdmem.invalid", "commit", "-q", "-m", message)


def forged_note(key, owner, source, text):
    return (f"---\nid: 01M8TMPNMRV51JAFZ1W7BX1Y7{key[-1].upper()}\nkind: fact\nsubject: service:billing\n"
            f"key: {key}\nscope: team\nteam: payments\nowner: {owner}\nsource: {source}\n"
            f"valid_from: '{T0}'\nvalid_until: null\nexpires_at: null\nderived_from: []\n---\n\n{text}\n")


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


def _bob_leaves_payments(tmp_path):
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    team_fact(repo, "Billing deploys any weekday before 3pm")
    repo.close()
    toml = tmp_path / "m/mdmem.toml"
    toml.write_text(toml.read_text().replace('payments = ["alice", "bob", "dana"]',
                                             'payments = ["alice", "dana"]\nsupport = ["bob"]'))
    git(tmp_path / "m", "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam",
        "bob moves to support")
    return tmp_path / "m"


def test_check_names_notes_left_in_a_team_root_the_config_no_longer_declares(tmp_path):
    """The admin renames team payments to pay in mdmem.toml and commits: every note under
    team/payments/ is now readable by nobody through mdmem; the hook commits it without a word
    and `mdmem check` says "3 note(s) valid" (its only complaint is the stale view the hook itself
    just wrote). Expected: check (and the hook) name the notes whose team is not declared."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    team_fact(repo, "Billing deploys any weekday before 3pm")
    repo.close()
    toml = tmp_path / "m/mdmem.toml"
    toml.write_text(toml.read_text().replace("payments = [", "pay = ["))
    r = git(tmp_path / "m", "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "commit", "-qam", "rename")
    c = run_cli("check", "--repo", str(tmp_path / "m"))
    assert "team/payments/service/billing/fact/deploy.window.md" in (r.stderr + c.stdout + c.stderr), c.stdout


