"""Erasure's defects as reproduced, one test each (every one failed on the erasure before its fix):
what a forget must rewrite, keep, refuse and leave behind."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import T0, T1, run_cli, team_fact

from mdmem import MemoryRepo, NotFound, Refused
from mdmem.errors import BadInput
from mdmem.storage.gitdir import cache_dir

TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol"]}


def git(root, *args, **kw):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True, **kw).stdout


def eraser_repo(tmp_path, teams=TEAMS, erasers=("dana",)):
    return MemoryRepo.init(tmp_path / "mem", teams=teams, erasers=list(erasers), now=T0, as_user="mdmem",
                           people=["ali"])


def every_version(root, path):
    """path -> bytes of every version of ``path`` in all history."""
    out = []
    for commit in git(root, "rev-list", "--all").decode().split():
        blob = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True)
        if blob.returncode == 0:
            out.append(blob.stdout)
    return out


def history_identities(root) -> str:
    return git(root, "log", "--all", "--format=%an %ae %cn %ce%n%B").decode()


# 1. Erasing a person erased their team's knowledge.
def test_erasing_a_person_keeps_the_team_note_they_wrote_and_pseudonymises_them(tmp_path):
    repo = eraser_repo(tmp_path)
    team_fact(repo, "Billing deploys only on Tuesdays", user="bob")
    team_fact(repo, "Billing deploys on Tuesdays and Thursdays", user="bob", now=T1)
    team_fact(repo, "Billing deploys any weekday before 3pm", user="alice", now="2026-10-20T09:00:00Z")
    repo.remember("I take Fridays off for climbing", as_user="alice", kind="preference", subject="user:alice",
                  key="dayoff", now=T1)
    receipt = repo.forget(as_user="dana", owner="alice", now="2026-10-21T09:00:00Z")
    path = "team/payments/service/billing/fact/deploy.window.md"
    assert "3pm" in repo.get(as_user="bob", path=path, now="2026-10-21T09:00:00Z").note.text
    assert len(repo.history(as_user="bob", path=path)) == 3
    assert receipt.counts["notes"] == 1  # the private preference only
    log = history_identities(repo.root)
    assert "alice" not in log.lower()
    for version in every_version(repo.root, path):
        assert b"alice" not in version.lower()
    assert "Fridays off" not in git(repo.root, "log", "--all", "-p").decode()


# 2. A one-character body scrubbed that character from every file of all history.
def test_a_short_body_scrubs_nothing_else(tmp_path):
    repo = eraser_repo(tmp_path)
    repo.remember("Yes, my payday is Friday", as_user="carol", kind="fact", subject="user:carol", key="pay", now=T0)
    team_fact(repo, "Every deploy needs a ticket, yes", user="bob")
    repo.remember("y", as_user="bob", kind="fact", subject="user:bob", key="answer", now=T0)
    config_before = (repo.root / "mdmem.toml").read_bytes()
    carol_before = every_version(repo.root, "private/carol/user/carol/fact/pay.md")
    repo.forget(as_user="bob", owner="bob", now=T1)
    assert set(every_version(repo.root, "mdmem.toml")) == {config_before}
    assert set(every_version(repo.root, "private/carol/user/carol/fact/pay.md")) == set(carol_before)
    reopened = MemoryRepo.open(repo.root)
    assert reopened.check()[1] == []
    assert b"[removed]" not in git(repo.root, "log", "--all", "-p", "--format=")  # no file scrubbed


# 3. A non-eraser rewrote mdmem.toml and broke the receipt.
def test_config_and_audit_log_are_never_scrubbed(tmp_path):
    repo = eraser_repo(tmp_path)
    repo.remember("Call me on 555-0142", as_user="ali", kind="profile", subject="user:ali", key="phone", now=T0)
    repo.forget(as_user="ali", texts=["555-0142"], now=T1)
    config = (repo.root / "mdmem.toml").read_bytes()
    audit = (repo.root / "audit/erasures.jsonl").read_bytes()
    # Distinctive strings from the configuration and the receipt: never scrubbed there.
    line = "Who may erase team notes or other people's data"
    with pytest.raises(NotFound):
        repo.forget(as_user="bob", texts=[line], now=T1)  # repository files are never changed: nothing to do
    plan = repo.forget(as_user="dana", texts=[line, "attested_commits"], dry_run=True, now=T1)
    assert plan.copies_to_scrub == [] and {c["path"] for c in plan.not_scrubbed} >= {"mdmem.toml"}
    with pytest.raises(BadInput):
        repo.forget(as_user="bob", texts=['search = ["carol"]'], now=T1)  # not distinctive
    assert (repo.root / "mdmem.toml").read_bytes() == config
    assert (repo.root / "audit/erasures.jsonl").read_bytes() == audit
    from mdmem.erasure.erased import commit_ids
    assert commit_ids(repo.root)  # the earlier erasure's rewritten commits, kept in this clone only


# "KIWI-MANGO-99123" is 16 characters but three tokens; the refusal asked for "one token of 16+
# characters" without saying that a hyphen splits one.
def test_a_refused_text_is_told_what_a_token_is_and_its_longest_token(repo):
    r = run_cli("forget", "--text", "KIWI-MANGO-99123", "--as", "bob", "--repo", str(repo.root))
    assert r.returncode == 2, r.stderr
    assert "a hyphen" in r.stderr and "3 token(s) given, the longest 'MANGO' (5 characters)" in r.stderr, r.stderr


# 4. Erasure as an oracle.
@pytest.mark.parametrize("exists", [True, False])
def test_refusals_plans_and_proofs_are_no_oracle(tmp_path, exists):
    repo = eraser_repo(tmp_path)
    secret = "PIN is 4321 for the garage door"
    repo.remember("bob likes tea", as_user="bob", kind="fact", subject="user:bob", key="tea", now=T0)
    if exists:
        repo.remember(secret, as_user="alice", kind="fact", subject="user:alice", key="pin", now=T0)
    plan = repo.forget(as_user="bob", texts=[secret], dry_run=True, now=T1)
    assert plan.notes == [] and plan.copies_to_scrub == [] and plan.roots == []
    report = repo.prove_gone([secret], as_user="bob")
    assert report.verdict == "INCOMPLETE"  # nothing where bob may look; no eraser: never PASS
    assert ("private/alice" in report.not_checked["roots"]) == exists


def test_refusal_does_not_depend_on_unreadable_data(tmp_path):
    answers = []
    for exists in (True, False):
        repo = MemoryRepo.init(tmp_path / f"m{exists}", teams=TEAMS, now=T0, as_user="mdmem", people=["ali"])
        if exists:
            repo.remember("PIN is 4321 for the garage door", as_user="carol", kind="fact", subject="user:carol",
                          key="pin", now=T0)
        try:
            answers.append(repo.forget(as_user="bob", texts=["PIN is 4321 for the garage door"], dry_run=True,
                                       now=T1).notes)
        except Refused as exc:
            answers.append(str(exc))
    assert answers[0] == answers[1]


# 5. kill -9 half-way.
def test_kill_minus_9_mid_erasure_is_finished_by_the_next_command(tmp_path):
    repo = eraser_repo(tmp_path)
    for i in range(30):
        team_fact(repo, f"Fact number {i} about billing", key=f"k{i}", new_key=True)
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    scratch_tmp = tmp_path / "tmpdir"
    scratch_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_tmp), "MDMEM_USER": "ali"}
    journal = repo.root / ".git" / "mdmem-erasure" / "journal.json"
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "forget", "--text", "555-0142",
                             "--repo", str(repo.root)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not journal.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(0.2)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if killed and journal.exists():
        assert oct(journal.stat().st_mode & 0o777) == "0o600"
        half = MemoryRepo.open(repo.root, finish_erasure=False)
        report = half.prove_gone(["555-0142"], as_user="ali")
        assert not report.passed and not report.scope["no_erasure_in_progress"]["passed"]
        r = run_cli("forget", "--resume", "--repo", str(repo.root), "--as", "ali", env={"TMPDIR": str(scratch_tmp)})
        assert r.returncode == 0, r.stderr
    repo = MemoryRepo.open(repo.root)
    assert repo.prove_gone(["555-0142"], as_user="ali").verdict == "INCOMPLETE"  # found nowhere ali may look
    assert not journal.parent.exists()
    # Nothing of ours in the TMPDIR every process had (scratch lives in .git).
    leftovers = [p for p in scratch_tmp.rglob("*") if p.is_file() and (p.name.startswith("mdmem")
                 or b"555-0142" in p.read_bytes())]
    assert leftovers == []
    assert json.loads((repo.root / "audit/erasures.jsonl").read_text().splitlines()[-1])["counts"]["commits_rewritten"]


def test_any_command_finishes_an_interrupted_erasure(repo):
    from mdmem.erasure.journal import Journal
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    # Interrupted right after the journal was written (nothing else done yet).
    from mdmem.erasure.forget import forget
    import mdmem.erasure.forget as fm
    original = fm._run
    fm._run = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())
    try:
        with repo.store.locked(), pytest.raises(KeyboardInterrupt):
            forget(repo, as_user="ali", when=repo_time(), texts=["555-0142"])
    finally:
        fm._run = original
    assert Journal(repo.root).exists()
    r = run_cli("keys", "--subject", "user:ali", "--kind", "profile", "--repo", str(repo.root), "--as", "ali")
    assert r.returncode == 0, r.stderr
    assert not Journal(repo.root).exists()
    assert MemoryRepo.open(repo.root).prove_gone(["555-0142"], as_user="ali").verdict == "INCOMPLETE"
    r = run_cli("forget", "--resume", "--repo", str(repo.root), "--as", "ali")
    assert r.returncode == 6  # nothing left to resume


def repo_time():
    from mdmem.model.clock import parse_time
    return parse_time(T1)


# 6. The embedding cache kept erased text recoverable.
def test_the_embedding_cache_keeps_only_what_history_holds(repo):
    from mdmem.search.embedding_cache import EmbeddingCache, cache_key
    from mdmem.search.fulltext import embedding_text
    phone = "5550142"
    original = f"My number is {phone}, call after six"
    repo.remember(original, as_user="ali", kind="profile", subject="user:ali", key="contact", now=T0)
    repo.remember(f"Session summary: the user gave their number {phone} for callbacks", as_user="ali",
                  kind="summary", subject="session:2026-10-15", source="system:consolidate", channel="system", now=T0)
    repo.recall("phone number", as_user="ali", now=T0)
    repo.forget(as_user="ali", texts=[phone], now=T1)
    repo.recall("phone number", as_user="ali", now=T1)
    cache = EmbeddingCache(cache_dir(repo.root) / "embeddings.sqlite")
    models = cache.models()
    candidates = [original, embedding_text("contact", original),
                  f"Session summary: the user gave their number {phone} for callbacks"]
    keys = {k for k, _ in cache.keys()}
    assert models and not any(cache_key(m, t) in keys for m in models for t in candidates)
    report = repo.prove_gone([phone], as_user="ali")
    assert report.verdict == "INCOMPLETE", report.scope  # found nowhere ali may look
    cache.put_many(models[0], {cache_key(models[0], "some text no note ever held"): __import__("numpy").ones(3)})
    cache.close()
    report = repo.prove_gone([phone], as_user="ali")
    # The cache's keys name no root, so a count of its stray entries would tell ali about other
    # roots: her report says it was not checked for her; an eraser's counts it (test_proof.py).
    assert report.scope["caches_hold_only_history"]["passed"] and "caches" in report.not_checked


# 7. Collateral deletion.
def test_no_collateral_stash_worktree_untracked(repo, tmp_path):
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    (repo.root / "notes-draft.txt").write_text("unrelated draft")
    git(repo.root, "add", "notes-draft.txt")
    git(repo.root, "stash")
    git(repo.root, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    (tmp_path / "wt" / "work.txt").write_text("my own work")
    venv = repo.root / ".venv" / "lib"
    venv.mkdir(parents=True)
    (venv / "y.py").write_text("y = 'y'\n")
    with pytest.raises(NotFound):
        repo.forget(as_user="ali", texts=["a text that is in no note anywhere"], now=T1)
    plan = repo.forget(as_user="ali", texts=["555-0142"], dry_run=True, now=T1)
    assert [s["action"] for s in plan.stashes] == ["rebased"]
    assert [w["action"] for w in plan.worktrees] == ["files updated"]
    repo.forget(as_user="ali", texts=["555-0142"], now=T1)
    assert "stash@{0}" in git(repo.root, "stash", "list").decode()
    git(repo.root, "stash", "pop")
    assert (repo.root / "notes-draft.txt").read_text() == "unrelated draft"
    assert (tmp_path / "wt" / "work.txt").read_text() == "my own work"
    assert (venv / "y.py").read_text() == "y = 'y'\n"


# 8. A handle that is also a word.
def test_erasing_a_user_named_memory_leaves_trailers_and_review_branches(tmp_path):
    repo = eraser_repo(tmp_path, teams={"payments": ["memory", "bob", "dana"]})
    team_fact(repo, "Billing deploys any weekday", user="memory")
    held = team_fact(repo, "p99 is 180ms", key="latency", user="bob", source="tool:grafana", new_key=True)
    assert held.status == "held"
    repo.forget(as_user="dana", owner="memory", now=T1)
    log = git(repo.root, "log", "--all", "--format=%B").decode()
    assert log.count("Memory-Op:") >= 3 and "[removed]" not in log
    assert [i.review_id for i in repo.review_list(as_user="bob")] == [held.review_id]
    assert "memory" not in git(repo.root, "log", "--all", "--format=%an %ae").decode()


# 9. Names: keys, paths, ref names, commit messages, the receipt.
def test_a_secret_in_a_key_path_and_ref_name_goes_everywhere(repo):
    r = repo.remember("Call after six", as_user="ali", kind="profile", subject="user:ali", key="phone.5550142",
                      now=T0)
    git(repo.root, "branch", "call-5550142")
    receipt = repo.forget(as_user="ali", texts=["5550142"], now=T1)
    assert not (repo.root / r.path).exists()
    assert repo.check()[1] == []
    assert b"5550142" not in git(repo.root, "log", "--all", "--format=%B%n%N")
    assert "5550142" not in git(repo.root, "for-each-ref").decode()
    assert "5550142" not in json.dumps(receipt.to_dict())
    assert "5550142" not in (repo.root / "audit/erasures.jsonl").read_text()
    report = repo.prove_gone(["5550142"], as_user="ali")
    assert report.verdict == "INCOMPLETE", report  # found nowhere ali may look
    git(repo.root, "branch", "again-5550142")
    assert repo.prove_gone(["5550142"], as_user="ali").verdict == "FAIL"


def test_a_plan_beyond_the_threshold_needs_force(tmp_path):
    repo = eraser_repo(tmp_path)
    quote = "the launch code word is bluebird seven"
    for i in range(30):
        team_fact(repo, f"Note {i}: {quote}", key=f"q{i}", new_key=True)
    plan = repo.forget(as_user="dana", texts=[quote], dry_run=True, now=T1)
    assert plan.needs_force and len(plan.copies_to_scrub) == 31  # 30 notes and the team's view
    assert all(c["replacements"] == 1 for c in plan.copies_to_scrub if not c["path"].endswith("MEMORY.md"))
    with pytest.raises(Refused):
        repo.forget(as_user="dana", texts=[quote], now=T1)
    repo.forget(as_user="dana", texts=[quote], force=True, now=T1)
    assert quote.encode() not in git(repo.root, "log", "--all", "-p")


def test_forget_over_mcp_is_refused_outside_the_agents_roots(repo):
    from mdmem.mcp.server import ServerContext
    from mdmem.mcp.tools.forget import make
    team_fact(repo, "The vault combination is 12-34-56-78 today", key="vault")
    forget = make(ServerContext(repo, "bob", frozenset({"delete"})))
    with pytest.raises(Refused):
        forget(texts=["The vault combination is 12-34-56-78 today"])


def test_a_damaged_journal_is_named_and_nothing_changes(repo):
    from mdmem.erasure.journal import Journal
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    journal = Journal(repo.root)
    journal.folder.mkdir()
    journal.path.write_text('{"phase": "held", "pla')
    head = repo.store.head()
    with pytest.raises(BadInput, match="journal unreadable"):
        MemoryRepo.open(repo.root)
    assert MemoryRepo.open(repo.root, finish_erasure=False).store.head() == head


def test_two_erasures_in_one_second_both_leave_a_receipt(repo):
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    repo.remember("Write to ali@example.org for invoices", as_user="ali", kind="profile", subject="user:ali",
                  key="mail", new_key=True, now=T0)
    first = repo.forget(as_user="ali", texts=["555-0142"], now=T1)
    second = repo.forget(as_user="ali", texts=["ali@example.org"], now=T1)
    lines = (repo.root / "audit/erasures.jsonl").read_text().splitlines()
    assert first.id != second.id and [json.loads(x)["id"] for x in lines] == [first.id, second.id]


def test_an_untracked_symlink_is_never_followed(repo, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("my number 555-0142 lives outside the repo")
    (repo.root / "link.txt").symlink_to(outside)
    repo.remember("Call me on 555-0142 after six", as_user="ali", kind="profile", subject="user:ali", key="phone",
                  now=T0)
    plan = repo.forget(as_user="ali", texts=["555-0142"], dry_run=True, now=T1)
    assert all(f["path"] != "link.txt" for f in plan.local_files)
    repo.forget(as_user="ali", texts=["555-0142"], now=T1)
    assert outside.read_text() == "my number 555-0142 lives outside the repo"


def test_prove_gone_stops_with_the_reason_on_an_object_git_cannot_read(tmp_path):
    """A damaged loose object crashed prove-gone on git's short "<oid> missing" line
    (ValueError: exit 70 from the CLI, no reason); and a git that stopped early would have
    ended the object scan as if every object were read. It is now GitFailed (exit 9) naming
    the object, and the proof is not made."""
    from mdmem.errors import GitFailed

    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           as_user="alice", embedder="none")
    team_fact(repo, "Zorblax manager is Quentin", subject="customer:zorblax", key="manager", new_key=True)
    victim = sorted((repo.root / ".git" / "objects").glob("??/*"))[0]
    os.chmod(victim, 0o644)
    victim.write_bytes(b"not a git object at all")
    with pytest.raises(GitFailed, match=victim.parent.name + victim.name):
        repo.prove_gone(["Zorblax"], as_user="dana", subject="customer:zorblax")
    r = run_cli("prove-gone", "--needle", "Zorblax", "--subject", "customer:zorblax", "--repo", str(repo.root),
                "--as", "dana", env={"MDMEM_NO_DAEMON": "1"})
    assert r.returncode == 9, r.stderr
    assert victim.parent.name + victim.name in r.stderr and "Traceback" not in r.stderr


def test_the_recovery_of_a_killed_erasure_waits_for_the_git_gc_it_started(tmp_path):
    """kill -9 of forget leaves its `git gc` child pruning, holding git's locks; the next
    open's recovery removed those locks under it. It now waits while the process
    gc.pid names on this machine is alive, and at once for a dead one."""
    import socket

    from mdmem.storage import history_ops as ops

    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob"]}, as_user="alice", embedder="none")
    repo.close()
    git_dir = repo.root / ".git"
    lock = git_dir / "packed-refs.lock"
    gc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    import threading
    threading.Thread(target=gc.wait, daemon=True).start()  # reaped when it ends, as init would
    (git_dir / "gc.pid").write_text(f"{gc.pid} {socket.gethostname()}")
    lock.write_text("")
    started = time.monotonic()
    removed = ops.remove_stale_locks(repo.root)
    waited = time.monotonic() - started
    assert gc.poll() is not None and waited > 0.5  # it waited for the gc to end
    assert "packed-refs.lock" in removed and not lock.exists()
    lock.write_text("")
    started = time.monotonic()
    ops.remove_stale_locks(repo.root)  # the same pid, now dead: no wait
    assert time.monotonic() - started < waited / 2 and not lock.exists()  # a fraction of the wait above


def test_a_note_whose_index_entry_is_deferred_is_tracked_for_the_plan(repo):
    """A long-lived process (the MCP server) defers git's index entry of a note it just committed.
    `git ls-files --others` reads git's index: a forget that read it before the entry was written
    would take that note for an UNTRACKED file ("an untracked copy of an erased note: deleted",
    "untracked or ignored file holding erased text"). A file HEAD holds is tracked, whatever
    git's index says; the plan and the erasure treat both notes as notes."""
    from conftest import git, start_python, stop

    root = repo.root
    secret = "Bob's locker combination is 4471-XYZZY-9-KESTREL-LANTERN"
    writer = start_python(f"""
        import sys
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(root)!r}, finish_erasure=False)
        r.store.index_delay = 30
        r.remember({secret!r}, as_user="bob", kind="profile", subject="user:bob", key="locker", scope="private")
        r.remember("Bob's gym bag holds the locker code " + {secret[-28:]!r}, as_user="bob", kind="profile",
                   subject="user:bob", key="gym", scope="private", new_key=True)
        print("ready", flush=True)
        sys.stdin.readline()
    """)
    try:
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        notes = ["private/bob/user/bob/profile/gym.md", "private/bob/user/bob/profile/locker.md"]
        assert set(notes) <= set(git(root, "ls-files", "--others").stdout.split())  # deferred: the premise
        plan = repo.forget(as_user="bob", texts=["4471-XYZZY-9-KESTREL-LANTERN"], dry_run=True)
        assert [f for f in plan.local_files if f["path"] in notes] == []
        repo.forget(as_user="bob", texts=["4471-XYZZY-9-KESTREL-LANTERN"])
        assert git(root, "status", "--porcelain").stdout == ""
        assert "4471-XYZZY-9-KESTREL-LANTERN" not in git(root, "log", "--all", "-p").stdout
    finally:
        stop(writer)
