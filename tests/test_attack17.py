"""Attack 17 (README user + attacker, session 17): each test failed on the code it was written
against (885f2a2). Those marked ``open`` are defects found and not fixed yet (strict: a fix makes
them fail until the mark is removed); MEMORY.md's known gaps say why each is left."""
from __future__ import annotations

import shutil

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


def test_recall_scores_do_not_depend_on_notes_the_reader_may_not_see(tmp_path):
    """Candidates are filtered by visibility before ranking, but the BM25 statistics still count
    alice's private notes: bob's score for his own team note changes with whether alice's private
    notes contain the word he asks about -- an oracle for text he may not read (also over MCP)."""
    with_word = _bob_scores(tmp_path, "a", "quagga")
    without = _bob_scores(tmp_path, "b", "walrus")
    assert [p for p, _ in with_word] == [p for p, _ in without]
    assert with_word == without


@open_defect("a pseudonym is vouched for only by an eraser's receipt, not by an owner erasing herself")
def test_an_owner_erasing_herself_leaves_her_team_notes_trusted_as_an_erasers_erasure_does(tmp_path):
    """README: forget --owner "pseudonymises their identity fields in every commit; team notes they
    wrote stay", and owners may forget their own data. When the eraser dana runs it, alice's team
    fact stays trusted and in the team's view; when alice (no eraser) runs it on herself -- which
    mdmem allows -- the same team fact becomes UNTRUSTED ("last changed by erased-..."), leaves
    team/payments/MEMORY.md and every teammate's startup."""
    results = {}
    for actor in ("dana", "alice"):
        repo = MemoryRepo.init(tmp_path / actor, teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                               now=T0, as_user="dana")
        repo.remember("Alice prefers async standups", as_user="alice", kind="profile", subject="user:alice",
                      key="standup", scope="private", now=T0)
        team_fact(repo, "Refund approvals need two people", key="refund.approvals", user="alice", new_key=True)
        repo.forget(as_user=actor, owner="alice", now=T1)
        repo.close()
        repo = MemoryRepo.open(tmp_path / actor)
        results[actor] = (repo.verify(as_user="bob")["untrusted"],
                          "refund.approvals" in (repo.root / "team/payments/MEMORY.md").read_text())
        repo.close()
    assert results["dana"] == ([], True)
    assert results["alice"] == results["dana"]


def test_forget_text_found_only_in_a_notes_context_scrubs_it_and_keeps_the_team_fact(tmp_path):
    """README: `forget --text "555-0142"` scrubs a string everywhere (quoted copies become
    [removed]); a needle in a note's text is scrubbed so. The same needle in the note's `context`
    (the conversation turn remember keeps beside it) erases the whole team fact, every version,
    though its text never held the string -- the README says nothing of it."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    r = team_fact(repo, "Escalation goes to the on-call lead", key="escalation", new_key=True,
                  context="user said: call Alice on 555-0177 if the pager fails")
    receipt = repo.forget(as_user="dana", texts=["555-0177"], now=T1)
    assert receipt.counts["notes"] == 0
    assert (repo.root / r.path).exists()
    note = repo.get(as_user="bob", path=r.path, now=T1)
    assert note.note.text == "Escalation goes to the on-call lead"
    assert "555-0177" not in (note.note.context or "") and "[removed]" in (note.note.context or "")
    assert repo.prove_gone(["555-0177"], as_user="dana").passed
    repo.close()


@pytest.mark.parametrize("extra", [["--scope", "private", "--team", "payments"],
                                   ["--scope", "team", "--team", "payments", "--owner", "alice"]])
def test_remember_refuses_arguments_it_would_ignore(repo, extra):
    """`--scope private --team payments` writes a private note (the team is dropped without a word)
    and `--owner alice` on a team note writes owner: bob: a typo'd scope puts a team fact where no
    teammate sees it. Expected: exit 2 naming the argument that does not apply."""
    r = run_cli("remember", "Billing deploys any weekday", "--kind", "fact", "--subject", "service:billing",
                "--key", "deploy.window", *extra, "--as", "bob", "--repo", str(repo.root))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)


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


def test_a_reserved_key_is_named_as_the_problem(repo):
    """--key MEMORY is refused with 'team/payments/.../fact/MEMORY.md: not a note path
    (team/<team>/... or private/<owner>/..., ending in .md)' -- a path that is under team/ and ends
    in .md; the message should name the key and say MEMORY is reserved for views."""
    r = run_cli("remember", "x", "--kind", "fact", "--subject", "service:billing", "--key", "MEMORY",
                "--scope", "team", "--team", "payments", "--new-key", "--as", "bob", "--repo", str(repo.root))
    assert r.returncode == 2
    assert "key" in r.stderr.split(":")[1] or "reserved" in r.stderr, r.stderr


@open_defect("only an eraser's signed receipt stands in for the signatures a rewrite drops")
def test_under_require_signed_an_owner_forgetting_her_own_private_note_keeps_teammates_notes_trusted(tmp_path):
    """Owners may forget their own private notes (no eraser needed). The rewrite drops the
    signatures of every later commit -- bob's team notes too -- and only an ERASER's signed receipt
    attests them: after alice erases her own phone number, bob's signed team fact written after it
    is UNTRUSTED ("unsigned") and gone from every startup view."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("needs ssh-keygen")
    from test_signed_erasure import signed_repo, untrusted
    root, keys, as_ = signed_repo(tmp_path)
    as_("alice").remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                          key="phone", now=T0)
    as_("bob").remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                        key="deploy.window", scope="team", team="payments", now=T0)
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert untrusted(fresh) == {}
    as_("alice").forget(as_user="alice", paths=["private/alice/user/alice/profile/phone.md"], now=T1)
    with MemoryRepo.open(root, embedder="none") as fresh:
        flags = untrusted(fresh)
        startup = fresh.startup(as_user="bob", now=T1)
    assert flags == {}, flags
    assert "Billing deploys any weekday" in startup


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


def test_forget_text_and_prove_gone_catch_a_copy_that_differs_only_in_case(tmp_path):
    """forget --text "Zorblax Bluefin Harbor" scrubs that exact string; alice's team note quoting it
    as "zorblax bluefin harbor" keeps it, in the note, the view and git -- and prove-gone with the
    very needle erased says PASS. README: forget scrubs quoted copies of distinctive text."""
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    team_fact(repo, "The merger codename is Zorblax Bluefin Harbor", key="merger", new_key=True)
    talks = team_fact(repo, "Reminder: zorblax bluefin harbor talks on Friday", key="talks", user="alice",
                      new_key=True)
    repo.forget(as_user="dana", texts=["Zorblax Bluefin Harbor"], now=T1)
    text = (repo.root / talks.path).read_text()
    proof = repo.prove_gone(["Zorblax Bluefin Harbor"], as_user="dana")
    assert "bluefin harbor" not in text.lower(), text
    assert proof.passed, proof.to_dict()
    # A copy in another case made after the erasure is found by the proof.
    team_fact(repo, "Notes: ZORBLAX BLUEFIN HARBOR moved to Monday", key="moved", user="alice", new_key=True)
    assert not repo.prove_gone(["Zorblax Bluefin Harbor"], as_user="dana").passed
    repo.close()


@open_defect("the receipt's erased blob ids (and rewritten commit ids) are hashes of the erased content")
def test_the_erasure_receipt_does_not_let_a_reader_recover_the_scrubbed_text(tmp_path):
    """forget --text scrubs "555-0173" in a team note to [removed] and keeps the note; the receipt
    (committed, append-only, kept for good by the guard) lists the old version's blob id. A blob id
    is sha1 of the old bytes, which are the scrubbed note with [removed] put back: any reader
    tries the 10,000 candidates and gets the erased phone number in milliseconds. README: the
    receipt records "targets and counts, never content"."""
    import hashlib
    import json
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="dana")
    r = team_fact(repo, "Escalations after hours: call Alice at 555-0173", key="escalation", new_key=True)
    repo.forget(as_user="dana", texts=["555-0173"], now=T1)
    repo.close()
    blobs = set()
    for line in (tmp_path / "m/audit/erasures.jsonl").read_text().splitlines():
        blobs |= set(json.loads(line).get("erased_blobs", []))
    scrubbed = (tmp_path / "m" / r.path).read_bytes()
    assert b"[removed]" in scrubbed
    recovered = []
    for n in range(10000):
        candidate = scrubbed.replace(b"[removed]", f"555-{n:04d}".encode())
        if hashlib.sha1(b"blob %d\0" % len(candidate) + candidate).hexdigest() in blobs:
            recovered.append(f"555-{n:04d}")
    assert recovered == []
