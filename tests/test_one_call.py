"""One CLI call and ranking speed: what the speed-ups must not change.

- decoded posting lists kept per segment reader give the same ranking as decoding afresh,
  through writes, hand edits, deletions and disk catch-ups in one process;
- cosines on one BLAS thread equal numpy's own and leave the thread limit as it was;
- trust marks read for a few notes (Verifier.flags_of) equal the whole pass's;
- the CLI registers only the command it runs, and a BM25 recall imports neither YAML, the
  ULID package nor onnxruntime (nor zipfile: the git hooks are compared with their templates
  through pkgutil, not importlib.resources).
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from conftest import run_cli, team_fact

from mdmem import MemoryRepo
from mdmem.search import bm25
from mdmem.storage.gitdir import cache_dir

WORDS = ["billing", "deploy", "window", "ledger", "refund", "queue", "cache", "timeout", "alice", "friday"]
QUESTIONS = ["when is the billing deploy window", "who owns the ledger queue", "refund timeout on friday",
             "cache for alice", "billing ledger refund", "zebra"]


def ranked(repo) -> list:
    return [[(h.path, h.score, h.bm25) for h in repo.recall(q, as_user="dana", k=8)] for q in QUESTIONS]


def fill(repo, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 5 + 2))
        team_fact(repo, f"Note {i} about {words}.", key=f"k{i}", new_key=True)


def test_postings_kept_per_reader_rank_as_decoding_afresh(repo, monkeypatch):
    fill(repo, 40)
    repo.reindex()
    steps = [
        lambda: fill(repo, 5, start=40),                             # writes: the in-memory segment
        lambda: team_fact(repo, "Note 3 is now about a zebra.", key="k3"),  # an update hides a cached doc
        lambda: (repo.root / "team/payments/service/billing/fact/k5.md").unlink(),  # a hand deletion
        lambda: repo.reindex(),                                      # the disk index moves on
        lambda: fill(repo, 3, start=60),
    ]
    for step in steps:
        step()
        kept = ranked(repo)
        monkeypatch.setattr(bm25, "POSTINGS_CACHE_MAX", 0)
        fresh = ranked(repo)
        monkeypatch.setattr(bm25, "POSTINGS_CACHE_MAX", 1_000_000)
        assert kept == fresh
    hits = repo.recall("zebra", as_user="dana")
    assert [h.path.rsplit("/", 1)[1] for h in hits] == ["k3.md"]
    assert not any(h.path.endswith("/k5.md") for q in QUESTIONS for h in repo.recall(q, as_user="dana", k=50))


def test_the_postings_cache_is_bounded_and_drops_the_least_recent(monkeypatch):
    monkeypatch.setattr(bm25, "POSTINGS_CACHE_MAX", 10)
    cache = bm25._Kept()
    lists = {k: (np.arange(n), np.ones(n), np.ones(n)) for k, n in (("a", 4), ("b", 4), ("c", 4))}
    cache.keep(("a",), lists["a"], 4)
    cache.keep(("b",), lists["b"], 4)
    cache.lists.move_to_end(("a",))  # a used again: b is now the oldest
    cache.keep(("c",), lists["c"], 4)
    assert list(cache.lists) == [("a",), ("c",)] and cache.size == 8
    cache.keep(("huge",), (np.arange(11), np.ones(11), np.ones(11)), 11)  # larger than the bound: not kept
    assert ("huge",) not in cache.lists and cache.size == 8


def plant(root, path: str, text: str, email: str) -> None:
    full = root / path
    full.write_text(full.read_text().replace("Note", text, 1))
    subprocess.run(["git", "-C", str(root), "-c", "user.name=x", "-c", f"user.email={email}", "commit", "-qam",
                    "hand edit", "--no-verify"], check=True, capture_output=True)


def test_trust_flags_for_a_few_notes_equal_the_whole_pass(repo):
    fill(repo, 6)
    plant(repo.root, "team/payments/service/billing/fact/k2.md", "Planted", "mallory@example.com")
    plant(repo.root, "team/payments/service/billing/fact/k4.md", "Also planted", "carol@mdmem.invalid")
    paths = sorted(str(p.relative_to(repo.root)) for p in (repo.root / "team").rglob("k*.md"))
    whole = MemoryRepo.open(repo.root).trust.flags()
    assert {p.rsplit("/", 1)[1] for p in whole} == {"k2.md", "k4.md"}
    for path in paths:  # a fresh process's state each time: no whole pass made before
        fresh = MemoryRepo.open(repo.root)
        assert fresh.trust.flags_of([path]) == {p: f for p, f in whole.items() if p == path}
        assert fresh.trust._flags is None  # it judged that note alone
    fresh = MemoryRepo.open(repo.root)
    assert fresh.trust.flags_of(paths + ["team/payments/nothing.md"]) == whole
    hits = {h.path.rsplit("/", 1)[1]: h.untrusted for h in fresh.recall("planted note", as_user="dana", k=10)}
    assert hits["k2.md"] and "mallory@example.com" in hits["k2.md"] and hits.get("k1.md") is None


def test_a_cli_recall_without_an_embedder_imports_only_what_it_needs(repo):
    team_fact(repo, "The billing deploy window is Tuesday.")
    code = ("import sys\nfrom mdmem.cli.main import main\n"
            f"rc = main(['recall', 'billing deploy window', '--as', 'dana', '--repo', {str(repo.root)!r}, '--json'])\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('yaml', 'frontmatter', 'ulid', 'onnxruntime', 'tokenizers', 'rich', 'mcp', 'httpx', 'watchdog', 'zipfile'))\n"
            "others = sorted(m for m in sys.modules if m.startswith('mdmem.cli.cmd_'))\n"
            "print(rc, heavy, others, file=sys.stderr)\n")
    env = {"MDMEM_EMBEDDER": "none"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ, **env})
    assert r.returncode == 0, r.stderr
    assert "Tuesday" in r.stdout
    assert r.stderr.strip().splitlines()[-1] == "0 [] ['mdmem.cli.cmd_recall']"


def test_the_cli_parses_one_command_as_the_full_parser_does(repo):
    bad = run_cli("recall", "x", "--bogus", "--as", "dana", "--repo", str(repo.root))
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr
    missing = run_cli("recall", "--as", "dana", "--repo", str(repo.root))
    assert missing.returncode == 2 and "usage: mdmem recall" in missing.stderr and "required" in missing.stderr
    unknown = run_cli("nosuch", "--as", "dana")
    assert unknown.returncode == 2 and "invalid choice: 'nosuch'" in unknown.stderr and "recall" in unknown.stderr
    bare = run_cli()
    assert bare.returncode == 2 and "COMMAND" in bare.stdout and "remember" in bare.stdout
    helped = run_cli("remember", "--help")
    assert helped.returncode == 0 and "usage: mdmem remember" in helped.stdout


def test_verify_json_is_rewritten_only_after_many_notes_moved_and_a_next_process_agrees(repo):
    import json

    from mdmem.policy import verify

    fill(repo, 4)
    cache = cache_dir(repo.root) / "verify.json"
    MemoryRepo.open(repo.root).trust.flags()
    saved = json.loads(cache.read_text())["head"]
    plant(repo.root, "team/payments/service/billing/fact/k1.md", "Planted", "mallory@example.com")
    first = MemoryRepo.open(repo.root).trust.flags()
    assert json.loads(cache.read_text())["head"] == saved  # one note moved: left to the next process
    again = MemoryRepo.open(repo.root).trust.flags()
    assert again == first and {p.rsplit("/", 1)[1] for p in again} == {"k1.md"}
    # Many notes in one commit: written, and read back by the next process as they are.
    source = (repo.root / "team/payments/service/billing/fact/k0.md").read_text()
    for i in range(verify.SAVE_AFTER):
        (repo.root / f"team/payments/service/billing/fact/m{i}.md").write_text(source)
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=x", "-c", "user.email=mallory@example.com",
                    "commit", "-qm", "many", "--no-verify"], check=True, capture_output=True)
    many = MemoryRepo.open(repo.root).trust.flags()
    assert json.loads(cache.read_text())["head"] == repo.store.head()
    assert MemoryRepo.open(repo.root).trust.flags() == many and len(many) == verify.SAVE_AFTER + 1


def test_verify_json_is_rewritten_after_many_commits_to_the_same_few_notes(repo):
    """Supersessions of a few notes never moved SAVE_AFTER notes, so every new process walked
    the whole `git log` since the last save, a little longer after each write."""
    import json

    from mdmem.policy import verify

    fill(repo, 4)
    cache = cache_dir(repo.root) / "verify.json"
    cache.unlink(missing_ok=True)
    MemoryRepo.open(repo.root).trust.flags()  # computed from nothing: kept
    saved = json.loads(cache.read_text())["head"]
    assert saved == repo.store.head()

    def edit(i):
        path = repo.root / f"team/payments/service/billing/fact/k{i % 2}.md"
        path.write_text(path.read_text() + f"Edit {i} by hand.\n")
        subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=x", "-c", "user.email=mallory@example.com",
                        "commit", "-qam", f"edit {i}", "--no-verify"], check=True, capture_output=True)

    for i in range(verify.SAVE_AFTER_COMMITS - 1):
        edit(i)
    MemoryRepo.open(repo.root).trust.flags()
    assert json.loads(cache.read_text())["head"] == saved  # fewer commits: left to the next process
    edit(verify.SAVE_AFTER_COMMITS)
    flags = MemoryRepo.open(repo.root).trust.flags()
    assert json.loads(cache.read_text())["head"] == repo.store.head()  # walked them once, kept
    assert MemoryRepo.open(repo.root).trust.flags() == flags and {p.rsplit("/", 1)[1] for p in flags} == {"k0.md",
                                                                                                           "k1.md"}


def test_a_long_lived_writer_keeps_its_trust_cache_at_close(repo):
    """Verifier.flush was never called: a process that made many writes itself (the MCP
    server) left every one of them to the next process's `git log` walk."""
    import json

    from mdmem.policy import verify

    fill(repo, 2)
    cache = cache_dir(repo.root) / "verify.json"
    writer = MemoryRepo.open(repo.root)
    writer.trust.flags()  # the state is in memory, and saved (computed from nothing)
    saved = json.loads(cache.read_text())["head"]

    def write(i):  # each a commit: no write repeats a note's text
        writer.remember(f"Billing rotates key {i} on Fridays, round {writer.store.head()[:8]}", as_user="bob", kind="fact",
                        subject="service:billing", key=f"rot{i % 3}", scope="team", team="payments", new_key=True)

    for i in range(3):
        write(i)
    writer.close()
    assert json.loads(cache.read_text())["head"] == saved  # a few: left to the next walk
    writer = MemoryRepo.open(repo.root)
    writer.trust.flags()
    for i in range(verify.SAVE_AFTER_COMMITS):
        write(i)
    assert json.loads(cache.read_text())["head"] != writer.store.head()
    writer.close()
    assert json.loads(cache.read_text())["head"] == writer.store.head()
    fresh = MemoryRepo.open(repo.root)
    assert fresh.trust.flags() == {}  # the kept state agrees with git's history


def test_a_writer_that_outlived_an_erasure_by_another_process_does_not_save_the_erased_state(tmp_path):
    """Process A (a long-lived writer, 32+ commits of its own) held a trust state
    naming a subject; process B erased the subject; A's close saved its old state, and the
    erased path was in .git/mdmem/verify.json again. prove-gone now checks that file too."""
    import json

    from mdmem.policy import verify

    a = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                        as_user="alice", embedder="none")
    a.verify(as_user="bob")
    a.remember("Zorblax account manager is Quentin", as_user="bob", kind="fact", subject="customer:zorblax",
               key="manager", scope="team", team="payments", new_key=True)
    for i in range(verify.SAVE_AFTER_COMMITS + 1):
        a.remember(f"Billing fact number {i}", as_user="bob", kind="fact", subject="service:billing",
                   key=f"k{i}", scope="team", team="payments", new_key=True)
    cache = cache_dir(a.root) / "verify.json"
    b = MemoryRepo.open(a.root, embedder="none")
    b.forget(as_user="dana", subject="customer:zorblax")
    b.close()
    a.close()
    assert not cache.exists() or "zorblax" not in cache.read_text()
    report = MemoryRepo.open(a.root, embedder="none").prove_gone(["zorblax"], as_user="dana",
                                                                  subject="customer:zorblax")
    # (The audit log keeps the erased subject's name by design: only the caches are asked here.)
    assert [n["checks"]["trust_cache"]["passed"] for n in report.to_dict()["needles"]] == [True]
    # And the check itself: a trust cache naming the erased path fails the proof.
    prover = MemoryRepo.open(a.root, embedder="none")
    prover.verify(as_user="dana")  # its trust state read (and kept) before the file is planted
    cache.write_text(json.dumps({"touch": {"team/payments/customer/zorblax/fact/manager.md": ["c", "e"]}}))
    failed = prover.prove_gone(["zorblax"], as_user="dana", subject="customer:zorblax")
    assert [n["checks"]["trust_cache"]["passed"] for n in failed.to_dict()["needles"]] == [False]


def test_a_trust_state_dumped_while_another_process_erased_is_not_written_back(tmp_path, monkeypatch):
    """A reader computed its trust state (naming a subject), and while it
    dumped it to JSON (~35 ms at 10k notes) another process's forget erased the subject and
    purged the caches; the reader then wrote its old state into verify.json. The save now
    checks the head under the write lock, after the dump."""
    import json
    import threading

    from mdmem.policy import verify

    a = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                        as_user="alice", embedder="none")
    a.remember("Zorblax account manager is Quentin", as_user="bob", kind="fact", subject="customer:zorblax",
               key="manager", scope="team", team="payments", new_key=True)
    a.close()
    cache = cache_dir(a.root) / "verify.json"
    cache.unlink(missing_ok=True)  # the reader computes from nothing, and saves
    erased, dumping = threading.Event(), threading.Event()
    real_dumps = json.dumps

    def slow_dumps(obj, *args, **kwargs):
        if isinstance(obj, dict) and "touch" in obj and threading.current_thread().name == "reader":
            dumping.set()
            assert erased.wait(60)  # the erasure runs while this state is being dumped
        return real_dumps(obj, *args, **kwargs)

    monkeypatch.setattr(verify.json, "dumps", slow_dumps)
    failures: list[BaseException] = []

    def read() -> None:
        try:
            MemoryRepo.open(a.root, embedder="none")  # opening computes the trust state and saves it
        except BaseException as exc:  # noqa: BLE001 -- reported below
            failures.append(exc)

    thread = threading.Thread(target=read, name="reader")
    thread.start()
    assert dumping.wait(60)
    eraser = MemoryRepo.open(a.root, embedder="none")
    eraser.forget(as_user="dana", subject="customer:zorblax")
    eraser.close()
    erased.set()
    thread.join(60)
    monkeypatch.setattr(verify.json, "dumps", real_dumps)
    assert not failures
    assert not cache.exists() or "zorblax" not in cache.read_text()
    report = MemoryRepo.open(a.root, embedder="none").prove_gone(["zorblax"], as_user="dana",
                                                                  subject="customer:zorblax")
    assert [n["checks"]["trust_cache"]["passed"] for n in report.to_dict()["needles"]] == [True]


def test_a_long_lived_writer_follows_the_view_cache_another_process_erasure_deleted(tmp_path, caplog):
    """Process A (a long-lived writer, such as the MCP server) had
    viewmeta.sqlite open; process B's forget deleted it; A's next save wrote into the deleted
    file ("attempt to write a readonly database"), then moved B's good file aside as damaged
    and logged an unreadable cache. A now opens the file that is there, dropping what it held
    (it may describe erased notes), and its rows go on being kept."""
    import logging
    import sqlite3

    from mdmem.views import render

    a = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                        as_user="alice", embedder="none")
    for i in range(render.SAVE_BATCH + 5):
        a.remember(f"Zorblax fact number {i}", as_user="bob", kind="fact", subject="customer:zorblax",
                   key=f"k{i}", scope="team", team="payments", new_key=True)
    b = MemoryRepo.open(a.root, embedder="none")
    b.forget(as_user="dana", subject="customer:zorblax")
    b.close()
    caplog.set_level(logging.WARNING)
    for i in range(render.SAVE_BATCH + 5):
        a.remember(f"Billing runs at {i} past midnight", as_user="bob", kind="fact", subject="service:billing",
                   key=f"run{i}", scope="team", team="payments", new_key=True)
    a.close()
    caches = cache_dir(a.root)
    assert "unreadable cache" not in caplog.text
    assert not (caches / "broken").exists()
    db = sqlite3.connect(str(caches / "viewmeta.sqlite"))
    rows = [text for (text,) in db.execute("SELECT json FROM meta")]
    db.close()
    assert sum("Billing runs at" in text for text in rows) >= render.SAVE_BATCH
    assert not any("Zorblax" in text for text in rows)
    report = MemoryRepo.open(a.root, embedder="none").prove_gone(["Zorblax"], as_user="dana",
                                                                  subject="customer:zorblax")
    assert report.passed, [(k, c["where"]) for n in report.to_dict()["needles"] for k, c in n["checks"].items()
                           if not c["passed"]] + [(k, c["where"]) for k, c in report.to_dict()["scope"].items()
                                                  if not c["passed"]]


def test_a_writer_renders_its_views_after_another_process_erased_a_note_it_had_read(tmp_path):
    """A first version of following the replaced view cache dropped the metadata held in
    memory too; the views then patched from their last state by reading the erased blob,
    which the erasure had pruned: KeyError in startup (the MCP server's) until a restart."""
    a = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob"]}, as_user="alice", embedder="none")
    a.remember("My phone is zanzibar 555", as_user="alice", kind="profile", subject="user:alice", key="phone")
    a.remember("Billing deploys any weekday", as_user="alice", kind="fact", subject="service:billing",
               key="deploy.window", scope="team", team="payments")
    assert "zanzibar" in a.startup(as_user="alice")
    b = MemoryRepo.open(a.root, embedder="none")
    b.forget(as_user="alice", subject="user:alice")
    b.close()
    assert not a.recall("alice phone zanzibar", as_user="alice")
    view = a.startup(as_user="alice")
    assert "zanzibar" not in view and "Billing deploys any weekday" in view
    a.close()
