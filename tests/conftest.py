"""Shared fixtures and helpers: real repositories (one per test, in tmp_path), git and CLI runners,
processes that hold locks or defer git's index, and the team repositories several files share."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from mdmem import MemoryRepo

# A read-only `mdmem` call starts the repo's daemon in the background by default (cli/launch.py).
# The suite runs thousands of calls in short-lived repos: the daemons it wants it starts by name,
# and test_daemon.py tests the default by removing this.
os.environ.setdefault("MDMEM_DAEMON_AUTOSTART", "0")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers set COLUMNS=80 and LINES=24, which a plain shell does not export:
    # the tests that compare a terminal's width through the daemon with a process of its own
    # need the suite's environment to be the same whether it runs in workers or not.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    # Whoosh's RamStorage (the index tests) writes through a fixed folder, tempdir/MAIN.tmp: test
    # processes side by side removed each other's files. Each worker gets a temp folder of its own.
    tempfile.tempdir = tempfile.mkdtemp(prefix=f"mdmem-tests-{os.environ['PYTEST_XDIST_WORKER']}-")
    atexit.register(shutil.rmtree, tempfile.tempdir, True)

T0 = "2026-10-01T09:00:00Z"
T1 = "2026-10-15T09:00:00Z"
TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol"]}
PEOPLE = ["ali"]  # a user with only private memory ([people.ali])


@pytest.fixture
def repo(tmp_path) -> MemoryRepo:
    return MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)


@pytest.fixture
def mem(tmp_path) -> Path:
    """The folder of a closed repository holding one team fact (billing deploys on Tuesdays):
    what an agent's hooks, run as their own processes, find. Files may override it."""
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    team_fact(repo, "Billing deploys on Tuesdays after the bluebird review")
    repo.close()
    return repo.root


def snapshot(root: Path) -> dict:
    """HEAD, every ref, the index file and every work-tree file: what 'unchanged' means."""
    refs = subprocess.run(["git", "-C", str(root), "for-each-ref", "--format=%(refname) %(objectname)"],
                          capture_output=True, text=True).stdout
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".mdmem")]
        for name in filenames:
            p = Path(dirpath) / name
            files[str(p.relative_to(root))] = p.read_bytes()
    index = (root / ".git" / "index").read_bytes()
    return {"refs": refs, "files": files, "index": index}


def git(root, *args, check=True):
    """Run git in ``root``; by default the test fails on a non-zero exit, naming its output."""
    r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


LOCKER_SECRET = "Alice's locker code is 4471-XYZZY"


@pytest.fixture
def with_secret(repo):
    """``repo`` holding alice's private note LOCKER_SECRET and a team fact (for erasures)."""
    repo.remember(LOCKER_SECRET, as_user="alice", kind="profile", subject="user:alice", key="locker",
                  scope="private", now=T0)
    team_fact(repo, "Deploys happen on Tuesdays")
    return repo


@pytest.fixture
def with_worktree(with_secret, tmp_path):
    """(repo, wt): :func:`with_secret`'s repo and a linked worktree ``wt`` on branch ``side``
    (`git worktree add`): the erasure-lock tests."""
    wt = tmp_path / "wt"
    git(with_secret.root, "worktree", "add", "-q", str(wt), "-b", "side")
    return with_secret, wt


def start_python(code: str, env: dict | None = None, **kw) -> subprocess.Popen:
    """``code`` (dedented) in a new Python process, pipes on stdin, stdout and stderr, no daemon
    (``env``: more variables)."""
    env = {**os.environ, "MDMEM_DAEMON_AUTOSTART": "0", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env, **kw)


def stop(*procs: subprocess.Popen) -> None:
    """Kill what still runs and reap all."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def erasure_journal(repo) -> Path:
    return repo.root / ".git" / "mdmem-erasure" / "journal.json"


def erase_in_thread(repo, result: dict) -> threading.Thread:
    """alice's erasure of her own notes, started on a thread; ``result`` gets "ok" (seconds) or
    "error"."""
    def erase():
        t = time.monotonic()
        try:
            repo.forget(as_user="alice", owner="alice", subject="user:alice", now=T1)
            result["ok"] = time.monotonic() - t
        except Exception as exc:  # noqa: BLE001 -- the test names it
            result["error"] = f"{type(exc).__name__}: {exc}"
    thread = threading.Thread(target=erase, daemon=True)
    thread.start()
    return thread


def forget_stalls_beside(repo, reader: subprocess.Popen, result: dict, *, seconds: float = 25) -> bool:
    """alice's erasure started on a thread; once it holds the gate (its journal is there)
    ``reader`` is told to go (a line on its stdin). True if the erasure still ran ``seconds``
    later. The reader is then stopped (freeing what it holds) and the erasure waited for;
    ``result`` as :func:`erase_in_thread` fills it."""
    eraser = None
    try:
        eraser = erase_in_thread(repo, result)
        t = time.monotonic()
        while not erasure_journal(repo).exists() and time.monotonic() - t < 20:
            time.sleep(0.01)
        assert erasure_journal(repo).exists(), result
        reader.stdin.write("go\n")
        reader.stdin.flush()
        eraser.join(timeout=seconds)
        return eraser.is_alive()
    finally:
        stop(reader)
        if eraser is not None:
            eraser.join(timeout=120)


def deferring_reader(root, *, recall_first: bool = False, env: dict | None = None) -> subprocess.Popen:
    """A long-lived process that defers git's index entries (as the MCP server does; 30 s here)
    and writes a note (after a recall with ``recall_first``), says "ready", then recalls once a
    line comes on its stdin and says "recall <seconds>"."""
    first = '        r.recall("deploys", as_user="bob")\n' if recall_first else ""
    return start_python(f"""
        import sys, time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(root)!r}, finish_erasure=False)
        r.store.index_delay = 30
{first}        r.remember("Bob likes coffee", as_user="bob", kind="profile", subject="user:bob", key="drink",
                   scope="private")
        print("ready", flush=True)
        sys.stdin.readline()
        t = time.monotonic()
        r.recall("coffee", as_user="bob")
        print("recall", time.monotonic() - t, flush=True)
    """, env=env)


def hold_write_lock(root, seconds: float) -> subprocess.Popen:
    """A process in the worktree at ``root`` in the middle of a write (holding its locks), once it
    says so."""
    p = start_python(f"""
        import time
        from mdmem import MemoryRepo
        r = MemoryRepo.open({str(root)!r}, finish_erasure=False)
        with r.store.locked():
            print("held", flush=True)
            time.sleep({seconds})
    """)
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    return p


def git_status(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True).stdout


def run_cli(*args, env=None, cwd=None, input=None):
    full_env = {**os.environ, **(env or {})}
    full_env.pop("MDMEM_USER", None) if env is None or "MDMEM_USER" not in env else None
    return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, input=input)


def team_fact(repo, text, key="deploy.window", user="bob", subject="service:billing", now=T0, **kw):
    return repo.remember(text, as_user=user, kind="fact", subject=subject, key=key, scope="team",
                         team="payments", now=now, **kw)


@contextmanager
def lock_held_by_another_thread(repo, at_most: float = 10):
    """The repo's write lock, held by another thread of this process until the block ends (or
    ``at_most`` seconds); the block may end the hold sooner by setting the event it is given."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with repo.store.locked():
            held.set()
            release.wait(at_most)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        yield release
    finally:
        release.set()
        thread.join()


ENV = {"MDMEM_EMBEDDER": "none"}


@pytest.fixture
def two_teams(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           erasers=["dana"], now=T0, as_user="alice", embedder="none")
    repo.remember("Alice home phone 555-0142", as_user="alice", kind="profile", subject="user:alice", key="phone",
                  now=T0)
    repo.remember("Search reindexes nightly", as_user="carol", kind="fact", subject="service:search",
                  key="reindex", scope="team", team="search", now=T0)
    return repo


@pytest.fixture
def billing_team(tmp_path) -> MemoryRepo:
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]},
                           erasers=["dana"], now=T0, as_user="alice", embedder="none")
    repo.remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                  key="deploy.window", scope="team", team="payments", now=T0)
    return repo


def open_defect(why: str):
    return pytest.mark.xfail(strict=True, reason=f"open: {why}")


DEPLOY = "team/payments/service/billing/fact/deploy.window.md"


def shared_remote(root, tmp_path, who: str, *, guard: bool = False):
    """A bare remote beside the repo (``origin``), which ``who`` syncs to first; with ``guard``,
    mdmem's guard installed on it after that first push."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    assert run_cli("sync", "--push", "--as", who, env=ENV, cwd=root).returncode == 0
    if guard:
        assert run_cli("guard", str(remote)).returncode == 0
    return remote


def widen_locally(root):
    """bob's uncommitted edit: himself an eraser, a member of search, self-approval on."""
    cfg = root / "mdmem.toml"
    text = cfg.read_text()
    text = text.replace('erasers = ["dana"]', 'erasers = ["dana", "bob"]')
    text = text.replace('search = ["carol"]', 'search = ["carol", "bob"]')
    text = text.replace("self_approve = false", "self_approve = true")
    assert text != cfg.read_text()
    cfg.write_text(text)


def untrusted(repo):
    return {f["path"]: f for f in repo.verify()["untrusted"]}


@pytest.fixture(scope="session")
def githost():
    """A real git host (gitolite3 + sshd on 127.0.0.1) for the session: tests/githost.py."""
    from githost import session_host

    yield from session_host()


def bob_leaves_payments(tmp_path):
    """A repo where dana (admin) has moved bob from payments to support, after bob wrote a fact there."""
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
