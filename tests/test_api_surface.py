"""The public surface: what `import mdmem` offers, how a repo is opened and closed, the one
error tree and its mapping at the boundaries, and a library that ignores the environment."""
import dataclasses
import json

import pytest
from conftest import T0, lock_held_by_another_thread, run_cli, team_fact

import mdmem
from mdmem import MemoryRepo
from mdmem.errors import (BadInput, BranchMoved, Conflict, GitFailed, Internal, LockTimeout, MdmemError,
                          as_mdmem_error)
from mdmem.storage import locking
from mdmem.storage.locks import Lock


PUBLIC = {
    "MemoryRepo", "Note", "StoredNote", "Hit", "WriteResult", "Version", "ReviewItem", "KeyInfo", "SweepResult",
    "BatchResult", "ProgressCallback", "ErasurePlan", "ErasureReceipt", "ProofReport", "RenderResult", "IndexReport",
    "MdmemError", "BadInput", "NoteInvalid", "Refused", "Conflict", "BranchMoved", "LockTimeout", "NotFound",
    "ProofFailed", "Incomplete", "EmbedderError", "GitFailed", "Internal",
}


def test_the_public_names_are_pinned():
    """`import mdmem` offers exactly these; every result type and every error class is among
    them (a new one must be exported, and a removed one is an API change this test names)."""
    import inspect

    import mdmem.errors
    import mdmem.results

    assert sorted(mdmem.__all__) == sorted(PUBLIC) and len(mdmem.__all__) == len(PUBLIC)
    assert all(getattr(mdmem, name) is not None for name in mdmem.__all__)
    results = {n for n, c in inspect.getmembers(mdmem.results, inspect.isclass)
               if issubclass(c, mdmem.results.Result) and c is not mdmem.results.Result}
    errors = {n for n, c in inspect.getmembers(mdmem.errors, inspect.isclass) if issubclass(c, MdmemError)}
    assert results | errors <= set(mdmem.__all__), (results | errors) - set(mdmem.__all__)


def test_open_forms_and_the_context_manager_close_the_caches(repo):
    r = team_fact(repo, "Billing deploys any weekday")
    assert MemoryRepo(repo.root).get(as_user="bob", path=r.path).note.text == "Billing deploys any weekday"
    with MemoryRepo.open(repo.root) as opened:
        assert opened.recall("when does billing deploy", as_user="bob", now=T0)
        index = opened.index
        assert index._searcher is not None
    assert index._searcher is None and index._cache is None


def test_init_has_no_default_identity(tmp_path):
    with pytest.raises(TypeError):
        MemoryRepo.init(tmp_path / "m", teams={})  # as_user is a required keyword
    with pytest.raises(BadInput):
        MemoryRepo.init(tmp_path / "m", teams={}, as_user="")
    assert not (tmp_path / "m").exists()


def test_the_library_ignores_the_environment(repo, monkeypatch):
    monkeypatch.setenv("MDMEM_NOW", "2001-01-01T00:00:00Z")
    monkeypatch.setenv("MDMEM_EMBEDDER", "ollama")  # unreachable: would fail if it were read
    monkeypatch.setenv("MDMEM_FUSION", "rrf")
    monkeypatch.setenv("MDMEM_USER", "bob")
    r = repo.remember("Refunds within 30 days", as_user="bob", kind="fact", subject="service:billing",
                      key="refund.window", scope="team", team="payments")
    assert repo.get(as_user="bob", path=r.path).note.valid_from.year > 2001
    with pytest.raises(BadInput):
        repo.get(as_user=None, path=r.path)
    opened = MemoryRepo.open(repo.root, embedder="none")
    assert opened.config.fusion == "linear" and opened.index.embedder is None
    with pytest.raises(BadInput, match="fusion"):
        MemoryRepo.open(repo.root, fusion="max")


def test_errors_map_to_the_tree():
    assert issubclass(BranchMoved, Conflict) and issubclass(LockTimeout, Conflict)
    assert isinstance(as_mdmem_error(RuntimeError("boom")), Internal)
    err = as_mdmem_error(FileNotFoundError(2, "No such file", "/x/y"))
    assert type(err) is MdmemError and "/x/y" in str(err)
    codes = {cls.exit_code for cls in (BadInput, mdmem.Refused, Conflict, mdmem.NotFound,
                                       mdmem.ProofFailed, mdmem.Incomplete, mdmem.EmbedderError, GitFailed,
                                       Internal)}
    assert len(codes) == 9  # each family its own exit code


def test_a_held_write_lock_is_a_lock_timeout(repo, monkeypatch):
    monkeypatch.setattr(locking, "LOCK_TIMEOUT_SECONDS", 0.2)
    other = Lock(str(repo.store.lock_dir / "write.lock"))
    other.acquire()
    try:
        with pytest.raises(LockTimeout, match="write.lock"):
            team_fact(repo, "Billing deploys any weekday")
    finally:
        other.release()


def test_a_write_lock_held_by_another_thread_is_a_lock_timeout_then_free(repo):
    """Threads of one process queue on the store's thread lock before the file lock: a wait
    that runs out is the same LockTimeout naming the lock file; once released it is taken."""
    with lock_held_by_another_thread(repo):
        with pytest.raises(LockTimeout, match="write.lock"):
            with repo.store.locked(timeout=0.2):
                pass
    with repo.store.locked(timeout=5):
        assert repo.store.holds_lock()
    assert not repo.store.holds_lock()


def test_git_failures_are_git_failed(repo):
    with pytest.raises(GitFailed, match="no-such-rev"):
        repo.store.git("rev-parse", "--verify", "no-such-rev")


def test_cli_maps_a_git_failure(tmp_path):
    path = tmp_path / "mem"
    assert run_cli("init", str(path), "--as", "alice", "--team", "payments=alice").returncode == 0
    head = (path / ".git" / "refs" / "heads" / "main").read_text().strip()
    (path / ".git" / "objects" / head[:2] / head[2:]).unlink()  # the tip commit is gone: git log fails
    r = run_cli("history", "team/payments/x/fact/k.md", "--repo", str(path), "--as", "alice", "--json")
    assert r.returncode == GitFailed.exit_code and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["error"] == "git" and str(path) in r.stderr


def test_results_say_the_same_thing_in_python_cli_and_mcp(repo):
    """Committed and held writes have the same keys; CLI --json and the MCP tools return the
    same shapes for keys and history (the MCP tool functions called as the server calls them)."""
    import importlib

    from mdmem.mcp.server import ServerContext
    from mdmem.results import KeyInfo, Version, WriteResult

    committed = team_fact(repo, "Billing deploys any weekday")
    held = team_fact(repo, "Grafana says deploys fail on Fridays", key="deploy.risk", source="tool:grafana",
                     new_key=True)
    assert (committed.status, held.status) == ("committed", "held")
    assert committed.to_dict().keys() == held.to_dict().keys() == {f for f in WriteResult.__dataclass_fields__}
    [key] = repo.keys(as_user="bob", subject="service:billing", kind="fact", now=T0)
    assert isinstance(key, KeyInfo) and key.note_id and key.path == committed.path
    [version] = repo.history(as_user="bob", path=committed.path)
    assert isinstance(version, Version) and version.note_id == key.note_id and version.path == committed.path
    assert version.to_dict()["time"] == T0 and version.to_dict()["text"] == "Billing deploys any weekday"

    ctx = ServerContext(repo, "bob", frozenset({"read", "write"}))
    mcp_keys = importlib.import_module("mdmem.mcp.tools.keys").make(ctx)(subject="service:billing", kind="fact")
    mcp_history = importlib.import_module("mdmem.mcp.tools.history").make(ctx)(path=committed.path)
    common = ["--repo", str(repo.root), "--as", "bob", "--json", "--now", T0]
    cli_keys = json.loads(run_cli("keys", "--subject", "service:billing", "--kind", "fact", *common).stdout)
    cli_history = json.loads(run_cli("history", committed.path, *common).stdout)
    assert cli_keys == mcp_keys == {"keys": [key.to_dict()]}
    assert cli_history == mcp_history == {"versions": [version.to_dict()]}
    [hit] = repo.recall("when does billing deploy", as_user="bob", now=T0)
    assert hit.note_id == key.note_id == version.note_id and hit.to_dict()["note_id"] == key.note_id


def test_cli_json_and_mcp_return_the_same_shapes(repo):
    """history, keys, get, recall and a forget dry run: the CLI's --json is exactly what the MCP
    tool returns, which is the Python result's to_dict (the tool functions called as the
    server calls them; the CLI as a real subprocess)."""
    import importlib

    from mdmem.mcp.server import ServerContext
    from mdmem.results import ErasurePlan

    committed = team_fact(repo, "Billing deploys any weekday")
    mine = repo.remember("Bob likes short answers", as_user="bob", kind="profile", subject="user:bob",
                         key="style", now=T0)
    ctx = ServerContext(repo, "bob", frozenset({"read", "write", "delete"}))
    ctx.index_ready.set()

    def mcp(tool: str, **args):
        return importlib.import_module(f"mdmem.mcp.tools.{tool}").make(ctx)(**args)

    def cli(*argv: str):
        r = run_cli(*argv, "--repo", str(repo.root), "--as", "bob", "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    stored = repo.get(as_user="bob", path=committed.path)
    assert cli("get", committed.path) == mcp("get", path=committed.path) == stored.to_dict()
    # One rule for a result carrying a note: nested under "note", its id and text beside it.
    assert stored.to_dict()["note"]["text"] == stored.to_dict()["text"] == "Billing deploys any weekday"
    assert stored.to_dict()["note_id"] == stored.note.id and stored.to_dict()["untrusted"] is None
    [version] = repo.history(as_user="bob", path=committed.path)
    assert version.to_dict()["note"]["text"] == version.to_dict()["text"]
    held = team_fact(repo, "Grafana says deploys fail on Fridays", key="deploy.risk", source="tool:grafana",
                     new_key=True)
    [item] = repo.review_list(as_user="bob")
    assert item.review_id == held.review_id and item.to_dict()["note_id"] == item.to_dict()["note"]["id"]
    assert item.to_dict()["text"] == "Grafana says deploys fail on Fridays"
    assert cli("history", committed.path) == mcp("history", path=committed.path) == \
        {"versions": [version.to_dict()]}
    assert cli("keys", "--subject", "service:billing", "--kind", "fact") == \
        mcp("keys", subject="service:billing", kind="fact") == \
        {"keys": [k.to_dict() for k in repo.keys(as_user="bob", subject="service:billing", kind="fact")]}
    hits = cli("recall", "when does billing deploy")
    assert hits == mcp("recall", query="when does billing deploy")
    assert [h["path"] for h in hits["hits"]][:1] == [committed.path] and hits["broken"] == {}
    plan = repo.forget(as_user="bob", subject="user:bob", dry_run=True)
    assert isinstance(plan, ErasurePlan) and plan.notes == [mine.path]
    assert cli("forget", "--subject", "user:bob", "--dry-run") == mcp("forget", subject="user:bob", dry_run=True) \
        == plan.to_dict()
    assert repo.get(as_user="bob", path=mine.path)  # a dry run changed nothing


def test_erasure_results_say_actor_and_read_old_receipts(repo):
    """The receipt names who acted ``actor`` like every other result, on disk too; a receipt
    recorded before (``asked_by``, as an interrupted erasure's journal may hold) still reads."""
    from mdmem.results import ErasureReceipt, ProofReport

    r = repo.remember("Bob's phone is 555-0199", as_user="bob", kind="profile", subject="user:bob", key="phone",
                      now=T0)
    receipt = repo.forget(as_user="bob", paths=[r.path], now=T0)
    assert isinstance(receipt, ErasureReceipt) and receipt.actor == "bob" and receipt.counts["notes"] == 1
    recorded = json.loads((repo.root / "audit" / "erasures.jsonl").read_text().splitlines()[-1])
    assert recorded["actor"] == "bob" and "asked_by" not in recorded
    # Every key the erasure records is a field of the result (nothing dropped at the boundary);
    # the result adds where HEAD went, the mention scan and the erased ids, which the audit line
    # leaves out (the erased ids are the eraser's alone: a committed one is an oracle).
    from mdmem.erasure.receipt import PRIVATE_FIELDS
    assert set(recorded) | set(PRIVATE_FIELDS) == {f.name for f in dataclasses.fields(ErasureReceipt)}
    assert not set(recorded) & set(PRIVATE_FIELDS)
    old = {**recorded, "asked_by": recorded.pop("actor")}
    assert ErasureReceipt.from_dict(old).actor == "bob"
    report = repo.prove_gone(["555-0199"], as_user="bob")
    assert isinstance(report, ProofReport) and report.verdict == "INCOMPLETE" and report.to_dict()["passed"] is False
    assert set(report.to_dict()) == {"needles", "subject", "owner", "scope", "not_checked", "cannot_reach", "passed",
                                     "verdict", "complete_by"}


def test_an_erasure_interrupted_under_the_old_receipt_word_finishes_with_actor(repo, monkeypatch):
    """The attack: an erasure killed after its receipt was recorded by a version that wrote
    ``asked_by`` (the journal keeps that receipt); the upgraded mdmem finishes it and answers
    with an ErasureReceipt whose actor is who asked."""
    from mdmem.erasure import forget as forget_module
    from mdmem.erasure.journal import Journal
    from mdmem.results import ErasureReceipt

    r = repo.remember("Bob's phone is 555-0199", as_user="bob", kind="profile", subject="user:bob", key="phone",
                      now=T0)

    def killed(root):
        raise KeyboardInterrupt("killed after the receipt was committed")

    monkeypatch.setattr(forget_module.ops, "remotes", killed)
    with pytest.raises(KeyboardInterrupt):
        repo.forget(as_user="bob", paths=[r.path], now=T0)
    monkeypatch.undo()
    journal = Journal(repo.root)
    state = journal.load()
    assert state["phase"] == "receipted"
    state["receipt"]["asked_by"] = state["receipt"].pop("actor")
    journal.save(state)
    finished = MemoryRepo.open(repo.root, finish_erasure=False).finish_erasure()
    assert isinstance(finished, ErasureReceipt) and finished.actor == "bob" and finished.counts["notes"] == 1
    assert not journal.exists()


def test_an_omitted_scope_means_the_same_in_every_operation(repo):
    """One default everywhere: the team's scope when a team is named, else the user's own."""
    mine = repo.remember("I prefer short answers", as_user="bob", kind="profile", subject="user:bob",
                         key="style", now=T0)
    ours = repo.remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                         key="deploy.window", team="payments", now=T0)
    assert mine.path.startswith("private/bob/") and ours.path.startswith("team/payments/")
    digest = repo.consolidate(as_user="bob", subject="service:billing", team="payments", now=T0)
    assert digest.path.startswith("team/payments/")
    assert repo.consolidate(as_user="bob", subject="user:bob", now=T0).path.startswith("private/bob/")


def test_an_unexpected_exception_is_internal_at_both_boundaries(repo, monkeypatch, capsys):
    """A bug (here: a RuntimeError from deep inside) reaches neither user raw: the CLI exits 70
    naming it, the MCP tool answers a ToolError of kind internal."""
    from mcp.server.mcpserver.exceptions import ToolError

    from mdmem.cli.main import main
    from mdmem.mcp.server import tool_errors

    def boom(*a, **k):
        raise RuntimeError("the disk said no")

    monkeypatch.setattr(MemoryRepo, "keys", boom)
    code = main(["keys", "--subject", "service:billing", "--kind", "fact", "--repo", str(repo.root),
                 "--as", "bob", "--json"])
    out = capsys.readouterr()
    assert code == Internal.exit_code and json.loads(out.out)["error"] == "internal"
    assert "the disk said no" in out.err
    with pytest.raises(ToolError, match="internal: RuntimeError: the disk said no"):
        tool_errors(boom)()
    with pytest.raises(ToolError, match="lock_timeout"):
        tool_errors(lambda: (_ for _ in ()).throw(LockTimeout("x/write.lock: held")))()
