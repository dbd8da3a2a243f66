"""`mdmem daemon`: read-only calls answered by a resident process, exactly as the caller's own
process would answer them -- real processes, a real Unix socket, real repos."""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mdmem import Conflict, MemoryRepo, NotFound
from mdmem.cli import daemon, launch
from mdmem.storage.gitdir import cache_dir

from conftest import PEOPLE, T0, TEAMS, git, team_fact
from daemon_helpers import ENV, cli, served, stop_daemon


@pytest.fixture
def mem(tmp_path):
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    team_fact(repo, "Billing deploys on Tuesdays after the bluebird review")
    repo.remember("My own reminder: renew the walrus certificate", as_user="bob", kind="fact",
                  subject="user:bob", key="cert", now=T0)
    repo.close()
    return repo.root


@pytest.fixture
def running(mem):
    r = cli("daemon", "start", "--json", cwd=mem)
    assert r.returncode == 0, r.stderr
    pid = json.loads(r.stdout)["pid"]
    yield mem
    cli("daemon", "stop", cwd=mem)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


CALLS = [
    ["recall", "when does billing deploy", "--as", "bob", "--json"],
    ["recall", "walrus certificate", "--as", "dana", "--json"],  # bob's private note: not dana's
    ["recall", "walrus certificate", "--as", "bob"],
    ["get", "--subject", "service:billing", "--kind", "fact", "--key", "deploy.window", "--scope", "team",
     "--team", "payments", "--as", "carol", "--json"],  # carol is not in payments
    ["keys", "--subject", "service:billing", "--kind", "fact", "--as", "bob", "--json"],
    ["history", "--subject", "service:billing", "--kind", "fact", "--key", "deploy.window", "--scope", "team",
     "--team", "payments", "--as", "dana"],
    ["ls", "--as", "bob", "--json"],
    ["show", "team/payments/service/billing/fact/deploy.window.md", "--as", "dana", "--json"],
    ["startup", "--as", "dana"],
    ["startup", "--as", "bob", "--json"],
    ["recall", "x", "--as", "nobody"],  # an undeclared user: refused
    ["recall", "x"],  # no identity: refused
    ["recall", "--bogus"],  # argparse's usage error
]


def test_the_daemon_answers_every_read_only_call_as_the_callers_own_process_would(running):
    for n, call in enumerate(CALLS, 1):
        here = cli(*call, cwd=running, via="here")
        there = cli(*call, cwd=running)
        assert (there.returncode, there.stdout, there.stderr) == (here.returncode, here.stdout, here.stderr), call
        assert served(running) == n, call  # answered by the daemon, not run by the client
    assert "walrus" not in cli(*CALLS[1], cwd=running).stdout
    assert "walrus" in cli(*CALLS[2], cwd=running).stdout


def test_identity_comes_from_each_calls_environment(running):
    bob = cli("recall", "walrus certificate", cwd=running, env={"MDMEM_USER": "bob"})
    dana = cli("recall", "walrus certificate", cwd=running, env={"MDMEM_USER": "dana"})
    assert "walrus" in bob.stdout and "walrus" not in dana.stdout
    assert served(running) == 2


def test_a_relative_path_is_the_callers_folder_not_the_daemons(running):
    inside = running / "team" / "payments" / "service" / "billing" / "fact"
    r = cli("show", "./deploy.window.md", "--as", "bob", "--json", cwd=inside)
    assert r.returncode == 0, r.stderr
    assert "bluebird" in r.stdout and served(running) == 1


def test_a_hand_edit_counts_at_once(running):
    cli("recall", "billing", "--as", "bob", cwd=running)
    note = running / "team/payments/service/billing/fact/deploy.window.md"
    note.write_text(note.read_text().replace("bluebird", "zeppelin"))
    r = cli("recall", "zeppelin review", "--as", "bob", "--json", cwd=running)
    assert "zeppelin" in r.stdout
    assert served(running) == 2


def test_a_team_change_committed_elsewhere_takes_effect_on_the_next_call(running):
    before = cli("recall", "bluebird review", "--as", "dana", "--json", cwd=running)
    assert "bluebird" in before.stdout
    config = running / "mdmem.toml"
    config.write_text(config.read_text().replace('payments = ["alice", "bob", "dana"]', 'payments = ["alice", "bob"]'))
    # committed with plain git by its admin (the founder): it takes effect for everyone
    git(running, "-c", "user.name=admin", "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam",
        "dana leaves payments", "--no-verify")
    here = cli("recall", "bluebird review", "--as", "dana", "--json", cwd=running, via="here")
    there = cli("recall", "bluebird review", "--as", "dana", "--json", cwd=running)
    assert (there.returncode, there.stdout) == (here.returncode, here.stdout)
    assert "bluebird" not in here.stdout  # the change does count in a fresh process
    assert served(running) == 2


def test_an_erasure_elsewhere_ends_the_daemon_that_held_the_text(running):
    """Dropping what it held was not enough: memory a process freed may still hold the erased
    text until reused. The daemon exits, and with it its memory."""
    assert "walrus" in cli("recall", "walrus certificate", "--as", "bob", cwd=running).stdout
    info = daemon.ask(running, "ping")
    assert info["open"], info
    gone = cli("forget", "--subject", "user:bob", "--as", "bob", "--json", cwd=running)
    assert gone.returncode == 0, gone.stderr
    deadline = time.monotonic() + 10
    while _alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(info["pid"])  # while idle, not at the next call
    r = cli("recall", "walrus certificate", "--as", "bob", "--json", cwd=running)
    assert r.returncode == 0 and "walrus" not in r.stdout


def test_writes_never_run_in_the_daemon(running):
    head = git(running, "rev-parse", "HEAD").stdout
    path = launch.socket_path(str(running))
    reply = launch.exchange(path, {"op": "run", "protocol": launch.PROTOCOL, "code": launch.code_stamp(),
                                   "argv": ["remember", "planted", "--as", "bob", "--kind", "fact", "--subject",
                                            "user:bob", "--key", "planted"],
                                   "env": dict(os.environ), "cwd": str(running)})
    assert reply == {}  # "run it yourself"
    assert git(running, "rev-parse", "HEAD").stdout == head
    # through the command line the write runs in the caller's process, as before
    r = cli("remember", "planted", "--as", "bob", "--kind", "fact", "--subject", "user:bob", "--key", "p2", "--new-key", cwd=running)
    assert r.returncode == 0, r.stderr
    assert served(running) == 0


def test_a_call_for_another_repo_runs_in_the_callers_process(running, tmp_path):
    other = MemoryRepo.init(tmp_path / "other", teams={"ops": ["bob"]}, now=T0, as_user="mdmem")
    other.remember("The other repo keeps the narwhal runbook", as_user="bob", kind="fact", subject="service:x",
                   key="runbook", scope="team", team="ops", now=T0)
    other.close()
    # --rep: argparse takes the abbreviation, the client's guess does not: it asks this daemon
    r = cli("recall", "narwhal runbook", "--rep", str(other.root), "--as", "bob", cwd=running)
    assert r.returncode == 0 and "narwhal" in r.stdout, r.stderr
    assert served(running) == 0


def test_a_daemon_of_other_code_stops_and_the_call_runs_here(running):
    path = launch.socket_path(str(running))
    reply = launch.exchange(path, {"op": "run", "protocol": launch.PROTOCOL, "code": "older",
                                   "argv": ["recall", "x", "--as", "bob"], "env": dict(os.environ),
                                   "cwd": str(running)})
    assert "rc" not in reply and "stopped" in reply["notice"]
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(path)
    r = cli("recall", "bluebird", "--as", "bob", cwd=running)
    assert r.returncode == 0 and "bluebird" in r.stdout


def test_garbage_on_the_socket_does_not_stop_the_daemon(running):
    import socket
    import struct

    path = launch.socket_path(str(running))
    for payload in (b"", b"\x00" * 3, struct.pack(">Q", 1 << 40), struct.pack(">Q", 5) + b"{nope",
                    struct.pack(">Q", 4) + b"[1] ", struct.pack(">Q", 2) + b"{}"):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            s.recv(1 << 16)
    bad = launch.exchange(path, {"op": "run", "protocol": launch.PROTOCOL, "code": launch.code_stamp(),
                                 "argv": "recall x", "env": {}, "cwd": "."})
    assert "error" in bad
    assert "bluebird" in cli("recall", "bluebird", "--as", "bob", cwd=running).stdout
    assert served(running) == 1


def test_someone_elses_socket_is_never_used(mem, tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to make a socket owned by another user")
    import socket

    path = launch.socket_path(str(mem))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    os.chown(path, 4242, 4242)
    try:
        r = cli("recall", "bluebird", "--as", "bob", cwd=mem)  # would hang or leak the env if it connected
        assert r.returncode == 0 and "bluebird" in r.stdout
        listener.settimeout(0.2)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_a_killed_daemon_leaves_nothing_that_breaks_a_call_or_a_restart(running):
    pid = daemon.ask(running, "ping")["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while daemon.ask(running, "ping") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(launch.socket_path(str(running)))  # left behind
    r = cli("recall", "bluebird", "--as", "bob", cwd=running)
    assert r.returncode == 0 and "bluebird" in r.stdout
    again = cli("daemon", "start", "--json", cwd=running)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["pid"] != pid
    assert "bluebird" in cli("recall", "bluebird", "--as", "bob", cwd=running).stdout
    assert served(running) == 1


def test_start_stop_and_status_are_plain_to_script(mem):
    none = cli("daemon", "status", cwd=mem)
    assert none.returncode == NotFound.exit_code and "no mdmem daemon" in none.stderr
    assert cli("daemon", "stop", cwd=mem).returncode == 0  # nothing to stop: not an error
    first = json.loads(cli("daemon", "start", "--json", cwd=mem).stdout)
    try:
        second = json.loads(cli("daemon", "start", "--json", cwd=mem).stdout)
        assert second["pid"] == first["pid"] and second["already"] is True
        assert json.loads(cli("daemon", "status", "--json", cwd=mem).stdout)["pid"] == first["pid"]
        # a second daemon of the same repo started by hand is refused (the lock), the first keeps running
        extra = cli("daemon", "run", cwd=mem)
        assert extra.returncode == Conflict.exit_code and "already runs" in extra.stderr, (extra.returncode, extra.stderr)
        assert cli("daemon", "start", "--idle", "0", cwd=mem).returncode == 2
    finally:
        stop = cli("daemon", "stop", "--json", cwd=mem)
    assert json.loads(stop.stdout)["stopped"] is True
    assert not os.path.exists(launch.socket_path(str(mem)))


def test_it_exits_when_idle(mem):
    r = cli("daemon", "start", "--idle", "1", "--json", cwd=mem)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 15
    while daemon.ask(mem, "ping") is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert daemon.ask(mem, "ping") is None
    assert not os.path.exists(launch.socket_path(str(mem)))


def test_a_repo_too_deep_for_a_socket_in_its_git_folder_still_gets_a_daemon_and_answers(tmp_path):
    """Without a runtime folder the socket goes to /tmp/mdmem-<uid>, keyed by the repository."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    repo = MemoryRepo.init(deep / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    team_fact(repo, "Billing deploys on Tuesdays after the bluebird review")
    repo.close()
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    r = subprocess.run([sys.executable, "-m", "mdmem.cli.launch", "daemon", "start"], cwd=repo.root, env=env,
                       capture_output=True, text=True)
    try:
        assert r.returncode == 0, r.stderr
        assert "bluebird" in cli("recall", "bluebird", "--as", "bob", cwd=repo.root).stdout
    finally:
        subprocess.run([sys.executable, "-m", "mdmem.cli.launch", "daemon", "stop"], cwd=repo.root, env=env,
                       capture_output=True, text=True)


def test_a_committed_mdmem_package_in_the_repo_is_not_what_the_daemon_runs(mem):
    planted = mem / "mdmem" / "cli"
    planted.mkdir(parents=True)
    (mem / "mdmem" / "__init__.py").write_text("")
    (planted / "__init__.py").write_text("")
    (planted / "main.py").write_text("import pathlib; pathlib.Path(__file__).with_name('RAN').write_text('x')\n")
    git(mem, "add", "mdmem")
    git(mem, "-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "planted", "--no-verify")
    # (this test's own `python -m` runs from outside: in the repo's folder it would import the plant)
    r = cli("daemon", "start", "--repo", str(mem), cwd=mem.parent)
    try:
        assert r.returncode == 0, r.stderr
        assert not (planted / "RAN").exists()
    finally:
        cli("daemon", "stop", "--repo", str(mem), cwd=mem.parent)


def test_the_readme_names_exactly_the_commands_the_daemon_answers():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    said = readme.split("answers the read-only commands", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`(\w+)`", said)) == launch.READ_ONLY


def test_callers_with_different_secrets_never_share_an_open_repo(mem):
    from mdmem.config import UserConfig

    d = daemon.Daemon(mem.resolve())
    try:
        def settings(value):
            return {"embedder": "none", "fusion": None,
                    "user_config": UserConfig(api_key_env="EMBED_KEY", secret={"EMBED_KEY": value}.get)}

        first = d.opener(None, str(mem), settings("key-a"))[0]
        assert d.opener(None, str(mem), settings("key-a"))[0] is first
        assert d.opener(None, str(mem), settings("key-b"))[0] is not first
    finally:
        d.close()


def test_a_daemon_can_be_stopped_when_the_repo_no_longer_opens(running):
    (running / "mdmem.toml").write_text("[teams\\nbroken")
    assert cli("recall", "x", "--as", "bob", cwd=running).returncode == 2  # the broken file is named
    stop = cli("daemon", "stop", "--json", cwd=running)
    assert stop.returncode == 0 and json.loads(stop.stdout)["stopped"] is True, stop.stderr


def test_a_repo_reached_through_a_symlink_is_named_as_the_caller_named_it(running, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(running)
    call = ["show", "team/payments/service/billing/fact/nope.md", "--as", "bob", "--repo", str(link)]
    here = cli(*call, cwd=tmp_path, via="here")
    there = cli(*call, cwd=tmp_path)
    assert (there.returncode, there.stdout, there.stderr) == (here.returncode, here.stdout, here.stderr)
    assert served(running) == 1


def test_a_started_daemon_watches_the_tree_instead_of_walking_it(running):
    for _ in range(3):
        assert "bluebird" in cli("recall", "bluebird", "--as", "bob", cwd=running).stdout
    # the warm-up walked (twice, as any process does before its watch); calls walk nothing
    log = (cache_dir(running) / "daemon.log").read_text()
    assert "Traceback" not in log
    info = daemon.ask(running, "ping")
    assert info["served"] == 3 and info["walks"] == 2, info
    assert info["warm_passes"] >= 1, info  # its caches warmed when it started (search/warm.py)


# --- hostile callers, broken connections and environments: each a defect found and fixed -----

def test_an_erasure_cut_short_is_finished_before_the_daemon_answers(running):
    """The daemon kept answering with text an interrupted (or running) forget was erasing."""
    import mdmem.erasure.forget as fm
    from mdmem.erasure.forget import forget
    from mdmem.erasure.journal import Journal
    from mdmem.model.clock import parse_time

    assert "walrus" in cli("recall", "walrus certificate", "--as", "bob", cwd=running).stdout
    repo = MemoryRepo.open(running)
    original = fm._run
    fm._run = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())
    try:
        with repo.store.locked(), pytest.raises(KeyboardInterrupt):
            forget(repo, as_user="bob", when=parse_time("2026-10-15T09:00:00Z"), texts=["renew the walrus certificate"])
    finally:
        fm._run = original
    assert Journal(running).exists()
    r = cli("recall", "walrus certificate", "--as", "bob", "--json", cwd=running)
    assert r.returncode == 0 and "walrus" not in r.stdout, r.stdout
    assert not Journal(running).exists()  # finished, as a fresh process finishes it


def test_a_stuck_client_or_a_frozen_daemon_does_not_hold_up_anyones_calls(running):
    """One connection that sent half a request, or never read its answer, hung every call."""
    import socket
    import struct

    path = launch.socket_path(str(running))
    half = socket.socket(socket.AF_UNIX)
    half.connect(path)
    half.sendall(struct.pack(">Q", 100) + b"{")  # and then nothing
    started = time.monotonic()
    r = cli("recall", "bluebird", "--as", "bob", cwd=running)
    assert r.returncode == 0 and "bluebird" in r.stdout
    assert time.monotonic() - started < 20
    half.close()
    pid = daemon.ask(running, "ping")["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        r = cli("recall", "bluebird", "--as", "bob", cwd=running)  # runs in its own process instead
        assert r.returncode == 0 and "bluebird" in r.stdout
        assert time.monotonic() - started < 30
    finally:
        os.kill(pid, signal.SIGCONT)
    assert served(running) == 1


def test_a_relative_user_config_is_read_from_the_callers_folder(running, tmp_path):
    """A relative MDMEM_CONFIG was read from the repo (where anyone may commit a file)."""
    (running / "mine.toml").write_text("[embedder\nbroken")  # planted in the repo: not the caller's
    caller = tmp_path / "home"
    caller.mkdir()
    (caller / "mine.toml").write_text("[agent]\nlabel = \"claude\"\n")
    call = ["recall", "bluebird", "--as", "bob", "--repo", str(running)]
    here = cli(*call, cwd=caller, via="here", env={"MDMEM_CONFIG": "mine.toml"})
    there = cli(*call, cwd=caller, env={"MDMEM_CONFIG": "mine.toml"})
    assert here.returncode == 0, here.stderr
    assert (there.returncode, there.stdout, there.stderr) == (here.returncode, here.stdout, here.stderr)


def test_a_user_an_admin_just_added_is_known_to_the_daemon(running):
    """The identity check ran before the held repo took up the new mdmem.toml."""
    cli("ls", "--as", "bob", cwd=running)
    config = running / "mdmem.toml"
    config.write_text(config.read_text().replace('search = ["carol"]', 'search = ["carol"]\nops = ["erin"]'))
    git(running, "-c", "user.name=admin", "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "erin",
        "--no-verify")
    here = cli("ls", "--as", "erin", cwd=running, via="here")
    there = cli("ls", "--as", "erin", cwd=running)
    assert here.returncode == 0, here.stderr
    assert (there.returncode, there.stdout, there.stderr) == (here.returncode, here.stdout, here.stderr)


def test_a_call_whose_environment_git_or_httpx_would_read_differently_runs_in_its_own_process(running):
    """Git, proxies and help wrapping read the process's environment."""
    for extra in ({"PATH": "/nonexistent"}, {"HTTPS_PROXY": "http://127.0.0.1:9"}, {"GIT_DIR": "/nowhere"},
                  {"COLUMNS": "200"}):
        call = ["ls", "--as", "bob"] if "COLUMNS" not in extra else ["recall", "--help"]
        env = {**extra, "PATH": extra.get("PATH", os.environ["PATH"])}
        if extra.get("PATH") == "/nonexistent":
            full = [sys.executable, "-m", "mdmem.cli.launch", *call]  # the interpreter by its full path
            base = {k: v for k, v in os.environ.items() if k != "MDMEM_USER"}
            here = subprocess.run(full, capture_output=True, text=True, cwd=running,
                                  env={**base, **ENV, **env, "MDMEM_NO_DAEMON": "1"})
            there = subprocess.run(full, capture_output=True, text=True, cwd=running, env={**base, **ENV, **env})
        else:
            here = cli(*call, cwd=running, via="here", env=env)
            there = cli(*call, cwd=running, env=env)
        assert (there.returncode, there.stdout) == (here.returncode, here.stdout), extra
    assert served(running) == 0
    assert cli("ls", "--as", "bob", cwd=running, env={"MDMEM_NO_DAEMON": "0"}).returncode == 0
    assert served(running) == 1  # "0" does not mean "bypass"


def test_a_daemon_whose_socket_is_gone_exits(running, tmp_path):
    """.git/mdmem removed, or the repo moved: the daemon nobody can reach exits."""
    pid = daemon.ask(running, "ping")["pid"]
    moved = tmp_path / "moved"
    running.rename(moved)
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    moved.rename(running)
    r = cli("daemon", "start", "--json", cwd=running)
    assert r.returncode == 0 and json.loads(r.stdout)["already"] is False
    pid = json.loads(r.stdout)["pid"]
    import shutil

    shutil.rmtree(cache_dir(running))
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_two_starts_at_once_both_succeed_with_one_daemon(mem):
    """The start that lost the race failed with a traceback (exit 70)."""
    full = {k: v for k, v in os.environ.items() if k != "MDMEM_USER"}
    procs = [subprocess.Popen([sys.executable, "-m", "mdmem.cli.launch", "daemon", "start", "--json"], cwd=mem,
                              env={**full, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    try:
        assert [p.returncode for p in procs] == [0, 0], outs
        assert len({json.loads(o)["pid"] for o, _ in outs}) == 1
    finally:
        cli("daemon", "stop", cwd=mem)


def test_idle_must_be_a_finite_number_of_seconds(mem):
    for bad in ("nan", "inf", "-1"):
        r = cli("daemon", "start", "--idle", bad, cwd=mem)
        assert r.returncode == 2 and "--idle" in r.stderr, (bad, r.stderr)
    assert daemon.ask(mem, "ping") is None


def test_the_client_says_what_the_command_says_without_a_traceback(running, tmp_path):
    """A closed stdout, a full disk, a deleted folder."""
    full = {**{k: v for k, v in os.environ.items() if k != "MDMEM_USER"}, **ENV}
    script = f"{sys.executable} -m mdmem.cli.launch recall bluebird --as bob --repo {running}"
    for shell in (f"{script} >&-", f"{script} >/dev/full"):
        here = subprocess.run(shell, shell=True, capture_output=True, text=True, env={**full, "MDMEM_NO_DAEMON": "1"})
        there = subprocess.run(shell, shell=True, capture_output=True, text=True, env=full)
        assert "Traceback" not in there.stderr, (shell, there.stderr)
        assert there.returncode == here.returncode, (shell, there.stderr, here.stderr)
    gone = tmp_path / "gone"
    gone.mkdir()
    shell = f"cd {gone} && rmdir {gone} && {script}"
    there = subprocess.run(shell, shell=True, capture_output=True, text=True, env=full)
    assert there.returncode == 2 and "current folder no longer exists" in there.stderr, there.stderr


# --- started by the first call (the default) -------------------------------------------------

def default_env(**extra):
    """The caller's environment as a person has it: no daemon switch set at all."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MDMEM_USER", "MDMEM_NO_DAEMON", "MDMEM_DAEMON_AUTOSTART")}
    return {**env, "MDMEM_EMBEDDER": "none", **extra}


def call(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "mdmem.cli.launch", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


def wait_for_daemon(root, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = daemon.ask(root, "ping")
        if info is not None and "pid" in info:
            return info
        time.sleep(0.05)
    raise AssertionError(f"no daemon came up; log: {_log(root)}")


def _log(root):
    log = cache_dir(root) / launch.LOG_NAME
    return log.read_text() if log.exists() else ""


@pytest.fixture
def stop_after(mem):
    yield mem
    stop_daemon(mem)


def test_the_first_read_only_call_starts_a_daemon_for_the_calls_after_it(stop_after):
    mem = stop_after
    env = default_env()
    here = cli("recall", "bluebird review", "--as", "bob", "--json", cwd=mem, via="here")
    t0 = time.monotonic()
    first = call("recall", "bluebird review", "--as", "bob", "--json", cwd=mem, env=env)
    took = time.monotonic() - t0
    # its answer is its own process's, and the daemon it left behind holds none of its pipes:
    # capture_output reads to end of file, so a daemon holding stdout would hold this call
    assert (first.returncode, first.stdout) == (here.returncode, here.stdout), first.stderr
    assert took < 30
    info = wait_for_daemon(mem)
    assert info["idle_seconds"] == launch.AUTOSTART_IDLE_SECONDS and info["served"] == 0
    second = call("recall", "bluebird review", "--as", "bob", "--json", cwd=mem, env=env)
    assert (second.returncode, second.stdout) == (here.returncode, here.stdout)
    assert served(mem) == 1
    # in its own session: the caller's terminal (Ctrl-C, a closed shell) does not reach it
    assert os.getsid(info["pid"]) == info["pid"]


def test_a_shell_reading_the_first_calls_output_is_not_held_by_the_daemon(stop_after):
    mem = stop_after
    shell = f"x=$({sys.executable} -m mdmem.cli.launch recall bluebird --as bob 2>&1); echo \"$x\""
    r = subprocess.run(shell, shell=True, capture_output=True, text=True, env=default_env(), cwd=mem, timeout=60)
    assert r.returncode == 0 and "bluebird" in r.stdout
    wait_for_daemon(mem)


def test_the_switches_keep_the_daemon_from_starting(mem):
    for switch in ({"MDMEM_DAEMON_AUTOSTART": "0"}, {"MDMEM_NO_DAEMON": "1"}):
        r = call("recall", "bluebird", "--as", "bob", cwd=mem, env=default_env(**switch))
        assert r.returncode == 0 and "bluebird" in r.stdout
        assert not (cache_dir(mem) / launch.AUTOSTART_MARK).exists(), switch
    time.sleep(1.0)
    assert daemon.ask(mem, "ping") is None and not daemon.starting(mem)


def test_a_call_that_failed_or_writes_starts_no_daemon(mem):
    env = default_env()
    assert call("recall", "bluebird", cwd=mem, env=env).returncode != 0  # no identity
    assert call("recall", "bluebird", "--as", "nobody", cwd=mem, env=env).returncode != 0
    assert call("remember", "a new fact", "--as", "bob", "--kind", "fact", "--subject", "user:bob", "--key", "n",
                "--new-key", cwd=mem, env=env).returncode == 0
    assert not (cache_dir(mem) / launch.AUTOSTART_MARK).exists()
    assert daemon.ask(mem, "ping") is None


def test_a_daemon_that_cannot_start_is_not_tried_by_every_call(stop_after):
    mem = stop_after
    env = default_env()
    held = daemon._lock(mem)  # what a daemon that runs holds: the one started now must give up
    held.acquire(timeout=5)
    try:
        for _ in range(3):
            assert call("recall", "bluebird", "--as", "bob", cwd=mem, env=env).returncode == 0
        deadline = time.monotonic() + 30
        while _log(mem).count("already runs") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert _log(mem).count("already runs") == 1, _log(mem)  # one try, not three
        mark = cache_dir(mem) / launch.AUTOSTART_MARK
        old = time.time() - launch.AUTOSTART_RETRY_SECONDS - 1
        os.utime(mark, (old, old))
    finally:
        held.release()
    assert call("recall", "bluebird", "--as", "bob", cwd=mem, env=env).returncode == 0
    wait_for_daemon(mem)  # a minute later, tried again


def test_a_socket_left_by_a_killed_daemon_is_replaced(stop_after):
    mem = stop_after
    env = default_env()
    call("recall", "bluebird", "--as", "bob", cwd=mem, env=env)
    pid = wait_for_daemon(mem)["pid"]
    os.kill(pid, signal.SIGKILL)
    while _alive(pid):
        time.sleep(0.05)
    assert os.path.exists(launch.socket_path(str(mem)))
    mark = cache_dir(mem) / launch.AUTOSTART_MARK
    old = time.time() - launch.AUTOSTART_RETRY_SECONDS - 1
    os.utime(mark, (old, old))  # (as a minute later)
    r = call("recall", "bluebird", "--as", "bob", cwd=mem, env=env)
    assert r.returncode == 0 and "bluebird" in r.stdout
    assert wait_for_daemon(mem)["pid"] != pid


def test_after_an_erasure_the_next_call_starts_a_new_daemon(stop_after):
    mem = stop_after
    env = default_env()
    call("recall", "walrus", "--as", "bob", cwd=mem, env=env)
    first = wait_for_daemon(mem)
    assert "walrus" in call("recall", "walrus certificate", "--as", "bob", cwd=mem, env=env).stdout
    assert call("forget", "--subject", "user:bob", "--as", "bob", cwd=mem, env=env).returncode == 0
    deadline = time.monotonic() + 10
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(first["pid"])
    # at once, not a minute after the last start
    r = call("recall", "walrus certificate", "--as", "bob", "--json", cwd=mem, env=env)
    assert r.returncode == 0 and "walrus" not in r.stdout
    assert wait_for_daemon(mem)["pid"] != first["pid"]


def test_after_a_daemon_stop_the_next_call_starts_a_new_daemon_at_once(stop_after):
    """The one-try-a-minute rule (for a daemon that cannot start) also held after a
    person's `daemon stop`, so for up to a minute every call ran in a process of its own (~1 s
    at 10k notes; bench_agent's second row got "served 3/5")."""
    mem = stop_after
    env = default_env()
    call("recall", "walrus", "--as", "bob", cwd=mem, env=env)
    first = wait_for_daemon(mem)
    stopped = call("daemon", "stop", cwd=mem, env=env)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 10
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(first["pid"])
    assert call("recall", "walrus", "--as", "bob", cwd=mem, env=env).returncode == 0
    assert wait_for_daemon(mem, seconds=30)["pid"] != first["pid"]


# --- erasures, pipes, terminals and start-up races around the daemon ---------------------------

def test_erasing_text_never_committed_ends_the_daemon_too(stop_after):
    """Forgetting a hand edit rewrites no commit (only a receipt is added), so the branch
    check did not see it, and the daemon's memory kept the text it had answered with."""
    mem = stop_after
    env = default_env()
    [note] = [p for p in mem.rglob("cert.md") if ".git" not in p.parts]  # bob's private note
    note.write_text(note.read_text().replace("walrus", "quetzalcoatl zeppelin hangar"))
    call("recall", "quetzalcoatl", "--as", "bob", cwd=mem, env=env)
    first = wait_for_daemon(mem)
    assert "quetzalcoatl" in call("recall", "quetzalcoatl review", "--as", "bob", cwd=mem, env=env).stdout
    assert served(mem) == 1
    gone = call("forget", "--text", "quetzalcoatl zeppelin hangar", "--as", "bob", cwd=mem, env=env)
    assert gone.returncode == 0, gone.stderr
    deadline = time.monotonic() + 10
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(first["pid"])


@pytest.mark.parametrize("name", [launch.LOG_NAME, launch.AUTOSTART_MARK])
def test_a_fifo_in_place_of_the_log_or_the_mark_does_not_hold_the_call(stop_after, name):
    """The call printed its answer and never exited (a FIFO opened to write waits for a
    reader). A FIFO at the log's name: nothing starts where it could not log. At the mark's
    (a name only mdmem writes, in its disposable cache): replaced by a mark of its own."""
    mem = stop_after
    cache_dir(mem).mkdir(parents=True, exist_ok=True)
    os.mkfifo(cache_dir(mem) / name)
    r = call("recall", "bluebird", "--as", "bob", cwd=mem, env=default_env())
    assert r.returncode == 0 and "bluebird" in r.stdout
    if name == launch.LOG_NAME:
        time.sleep(0.5)
        assert daemon.ask(mem, "ping") is None
    else:
        assert (cache_dir(mem) / name).is_file()
        wait_for_daemon(mem, seconds=30)


def test_help_and_usage_wrap_at_the_callers_terminal_width(running):
    """Through the daemon argparse measured no terminal and wrapped at 80 columns."""
    path = launch.socket_path(str(running))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for argv in (["recall", "--help"], ["recall", "--bogus"]):
        reply = launch.exchange(path, {"op": "run", "protocol": launch.PROTOCOL, "code": launch.code_stamp(),
                                       "argv": argv, "env": env, "cwd": str(running), "columns": 44})
        here = cli(*argv, cwd=running, via="here", env={"COLUMNS": "44"})
        assert (reply["rc"], reply["stdout"], reply["stderr"]) == (here.returncode, here.stdout, here.stderr), argv
    assert "COLUMNS" not in daemon.ask(running, "ping")  # (nothing of the call stays)


def test_the_daemon_runs_the_mdmem_the_caller_imported_wherever_it_was_found(stop_after, tmp_path):
    """Started with -I, the daemon ignored the PYTHONPATH (or user site) the caller found
    mdmem through: it ran the installed copy (other code: "an upgrade?" every minute) or none."""
    import shutil

    import mdmem as package

    mem = stop_after
    alt = tmp_path / "alt"
    shutil.copytree(Path(package.__file__).parent, alt / "mdmem", ignore=shutil.ignore_patterns("__pycache__"))
    (alt / "mdmem" / "cli" / "launch.py").write_text((alt / "mdmem" / "cli" / "launch.py").read_text() + "\n# a copy\n")
    env = default_env(PYTHONPATH=str(alt))
    first = call("recall", "bluebird", "--as", "bob", cwd=mem, env=env)
    assert first.returncode == 0 and "bluebird" in first.stdout, first.stderr
    wait_for_daemon(mem)
    second = call("recall", "bluebird", "--as", "bob", cwd=mem, env=env)
    assert second.returncode == 0 and "other mdmem code" not in second.stderr, second.stderr
    assert served(mem) == 1
    assert "No module named" not in _log(mem)


def test_starting_by_name_gives_a_running_daemon_the_idle_time_asked_for(stop_after):
    """`mdmem daemon start --idle 7200` found the one a call had started and kept its 600 s."""
    mem = stop_after
    call("recall", "bluebird", "--as", "bob", cwd=mem, env=default_env())
    assert wait_for_daemon(mem)["idle_seconds"] == launch.AUTOSTART_IDLE_SECONDS
    r = cli("daemon", "start", "--idle", "7200", "--json", cwd=mem)
    assert r.returncode == 0 and json.loads(r.stdout)["already"] is True, r.stderr
    assert daemon.ask(mem, "ping")["idle_seconds"] == 7200
    for bad in (0, -1, "x", True, float("inf")):
        assert "error" in daemon.ask(mem, "idle", seconds=bad)


@pytest.mark.parametrize("planted", ["folder", "link"])
def test_a_folder_or_link_at_the_autostart_mark_neither_stops_autostart_nor_daemon_stop(stop_after, planted):
    """A folder (or a symbolic link) where the autostart mark's file belongs
    turned autostart off for good, and `daemon stop` could not remove it."""
    mem = stop_after
    env = default_env()
    mark = cache_dir(mem) / launch.AUTOSTART_MARK
    mark.parent.mkdir(parents=True, exist_ok=True)
    target = mem.parent / "elsewhere"
    target.write_text("not the mark\n")
    if planted == "folder":
        (mark / "inside").mkdir(parents=True)
    else:
        mark.symlink_to(target)
    assert call("recall", "walrus", "--as", "bob", cwd=mem, env=env).returncode == 0
    first = wait_for_daemon(mem, seconds=30)
    assert mark.is_file() and not mark.is_symlink()
    assert target.read_text() == "not the mark\n"  # a link is replaced, never written through
    assert call("daemon", "stop", cwd=mem, env=env).returncode == 0
    deadline = time.monotonic() + 10
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.lexists(mark)  # `daemon stop` removed it
    (mark / "inside").mkdir(parents=True)
    launch.forget_autostart(mem)  # what `daemon stop` runs
    assert not os.path.lexists(mark)


def test_a_repo_in_a_deep_folder_gets_a_daemon_with_its_socket_in_the_runtime_folder(tmp_path):
    """The socket under .git/mdmem/ passed the 108 bytes a Unix socket allows, and such a repo
    got no daemon at all: its socket goes to the user's runtime folder, keyed by the
    repository, in a folder only this user may enter."""
    import shutil
    import tempfile

    deep = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 4))
    repo = MemoryRepo.init(deep / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    team_fact(repo, "Billing deploys on Tuesdays after the bluebird review")
    repo.close()
    assert len(str(cache_dir(deep / "mem") / launch.SOCKET_NAME)) >= 108
    runtime = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short, like /run/user/<uid>
    env = {"XDG_RUNTIME_DIR": runtime}
    try:
        r = cli("daemon", "start", "--json", cwd=deep / "mem", env=env)
        assert r.returncode == 0, r.stderr
        path = launch.socket_path(str(deep / "mem"), env)
        assert path is not None and path.startswith(runtime + "/mdmem/") and os.path.exists(path)
        assert os.stat(runtime + "/mdmem").st_mode & 0o777 == 0o700
        assert launch.socket_path(str(tmp_path / "elsewhere"), env) != path  # keyed by the repository
        r = cli("recall", "bluebird review", "--as", "bob", cwd=deep / "mem", env=env)
        assert r.returncode == 0 and "bluebird" in r.stdout
        assert launch.exchange(path, {"op": "ping"}, timeout=5)["served"] == 1
    finally:
        cli("daemon", "stop", cwd=deep / "mem", env=env)
        shutil.rmtree(runtime, ignore_errors=True)


def test_after_a_killed_daemon_the_next_call_starts_a_new_one_at_once(stop_after):
    """A daemon killed (kill -9, the OOM killer) left its socket; the next call ran in its own
    process and, the autostart mark being recent, started none for 60 s: a daemon
    that came up and is gone is started again at once."""
    mem = stop_after
    env = default_env()
    assert call("recall", "bluebird", "--as", "bob", cwd=mem, env=env).returncode == 0
    first = wait_for_daemon(mem)
    os.kill(first["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(launch.socket_path(str(mem)))  # left behind
    r = call("recall", "bluebird", "--as", "bob", cwd=mem, env=env)
    assert r.returncode == 0 and "bluebird" in r.stdout
    second = wait_for_daemon(mem, seconds=20)
    assert second["pid"] != first["pid"]


def test_one_install_has_one_code_stamp_however_its_python_is_spelled():
    """`python -m mdmem`, `python3 -m mdmem` and the `mdmem` script run the same code: a daemon
    started by one must answer the others, not be stopped as "another install"."""
    bindir = Path(sys.executable).parent
    names = {"python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"}
    spellings = sorted(str(bindir / n) for n in names if (bindir / n).exists())
    assert len(spellings) >= 2, spellings
    stamps = {subprocess.run([exe, "-c", "from mdmem.cli import launch; print(launch.code_stamp())"],
                             capture_output=True, text=True, check=True).stdout for exe in spellings}
    assert len(stamps) == 1, stamps
