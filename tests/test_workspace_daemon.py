"""A workspace's daemon: read-only calls made anywhere inside a workspace (its top, a mount's folder)
are answered by one daemon holding the Workspace, exactly as the caller's own process would
answer them (identity per call: a call as another person is refused as in-process); a write by
another process in a mount counts at the next call; an erasure in any one mount ends the daemon.
Real processes, a real Unix socket, real clones of local bare remotes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from daemon_helpers import cli, served, stop_daemon
from workspace_helpers import T0, scope_remote, workspace

from mdmem.cli import daemon, launch

SECRET = "interviewing at Acme Corp next week"


@pytest.fixture
def alice_ws(tmp_path):
    """alice's workspace: team/payments (alice, bob; carol erases) and her private repository."""
    remotes = {"team/payments": scope_remote(tmp_path, "team/payments", members=["alice", "bob", "carol"],
                                             erasers=["carol"]),
               "private/alice": scope_remote(tmp_path, "private/alice", erasers=["carol"])}
    ws = workspace(tmp_path, "alice", remotes, ["team/payments", "private/alice"])
    ws.remember(f"Alice is {SECRET}", as_user="alice", kind="fact", subject="user:alice", key="job", now=T0)
    ws.remember("Billing deploys on Tuesdays after the bluebird review", as_user="alice", kind="fact",
                subject="service:billing", key="deploy", scope="team", team="payments", now=T0)
    root = ws.root
    ws.close()
    return root


@pytest.fixture
def running(alice_ws):
    r = cli("daemon", "start", "--json", cwd=alice_ws)
    assert r.returncode == 0, r.stderr
    pid = json.loads(r.stdout)["pid"]
    yield alice_ws, pid
    cli("daemon", "stop", cwd=alice_ws)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


CALLS = [
    ["recall", "when does billing deploy", "--as", "alice", "--json"],
    ["recall", "Acme interview", "--as", "alice"],
    ["recall", "Acme interview", "--as", "bob", "--json"],  # not this workspace's person: refused
    ["get", "--subject", "service:billing", "--kind", "fact", "--key", "deploy", "--scope", "team", "--team",
     "payments", "--as", "alice", "--json"],
    ["keys", "--subject", "user:alice", "--kind", "fact", "--as", "alice", "--json"],
    ["ls", "--as", "alice", "--json"],
    ["show", "private/alice/user/alice/fact/job.md", "--as", "alice", "--json"],
    ["startup", "--as", "alice", "--now", "2026-10-02T09:00:00Z"],  # its "as of" line
    ["recall", "x"],  # no identity: refused
]


def test_calls_inside_a_workspace_are_answered_by_its_daemon_as_the_callers_own_process_would(running):
    root, pid = running
    sock = launch.socket_path(str(root))  # the workspace's own folder (or the runtime folder: a deep path)
    assert sock is not None and os.path.exists(sock) and ".mdmem-mounts" not in sock
    assert daemon.ask(root, "ping")["pid"] == pid and daemon.ask(root, "ping")["workspace"] is True
    for n, call in enumerate(CALLS, 1):
        here = cli(*call, cwd=root, via="here")
        there = cli(*call, cwd=root)
        assert (there.returncode, there.stdout, there.stderr) == (here.returncode, here.stdout, here.stderr), call
        assert served(root) == n, call  # answered by the daemon, not run by the client
    assert SECRET in cli(*CALLS[1], cwd=root).stdout
    assert SECRET not in cli(*CALLS[2], cwd=root).stdout + cli(*CALLS[2], cwd=root).stderr
    # from inside a mount (the shell's folder is the clone's real path): the same daemon
    inside = (root / "team" / "payments").resolve()
    before = served(root)
    r = cli("recall", "bluebird review", "--as", "alice", "--json", cwd=inside)
    assert r.returncode == 0 and "bluebird" in r.stdout and served(root) == before + 1
    # no daemon of any one clone was asked or started
    assert not list((root / ".mdmem-mounts").glob("*/.git/mdmem/daemon.sock"))


def test_a_write_by_another_process_in_a_mount_counts_at_the_next_call(running):
    root, _ = running
    assert "zeppelin" not in cli("recall", "zeppelin hangar", "--as", "alice", "--json", cwd=root).stdout
    r = cli("remember", "The zeppelin hangar opens at dawn", "--kind", "fact", "--subject", "service:hangar",
            "--key", "open", "--scope", "team", "--team", "payments", "--as", "alice", cwd=root)
    assert r.returncode == 0, r.stderr
    before = served(root)
    r = cli("recall", "zeppelin hangar", "--as", "alice", "--json", cwd=root)
    assert "zeppelin" in r.stdout and served(root) == before + 1
    # and a plain git commit in a mount's clone (by hand, another process)
    clone = root / ".mdmem-mounts" / "team-payments"
    note = clone / "team/payments/service/billing/fact/deploy.md"
    note.write_text(note.read_text().replace("bluebird", "kingfisher"))
    subprocess.run(["git", "-C", str(clone), "-c", "user.email=alice@mdmem.invalid", "-c", "user.name=alice",
                    "commit", "-qam", "edit", "--no-verify"], check=True)
    r = cli("recall", "kingfisher review", "--as", "alice", "--json", cwd=root)
    assert "kingfisher" in r.stdout and served(root) == before + 2


def test_an_erasure_in_one_mount_ends_the_workspace_daemon(running):
    root, pid = running
    assert SECRET in cli("recall", "Acme interview", "--as", "alice", cwd=root).stdout
    # alice's own notes erased in her private repository, by a process of its own
    r = cli("forget", "--path", "private/alice/user/alice/fact/job.md", "--as", "alice", "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the workspace's daemon still runs after an erasure in one of its mounts")
    assert daemon.ask(root, "ping") is None
    r = cli("recall", "Acme interview", "--as", "alice", cwd=root, env={"MDMEM_NO_DAEMON": "1"})
    assert SECRET not in r.stdout


def test_the_launcher_names_the_workspace_for_calls_anywhere_inside_it(alice_ws):
    from mdmem.workspace import layout

    assert (launch.WORKSPACE_FILE, launch.WORKSPACE_MOUNTS, launch.WORKSPACE_JOURNAL) == \
        (layout.WORKSPACE_FILE, layout.MOUNTS_DIR, layout.JOURNAL_DIR)
    inside = str((alice_ws / "team" / "payments").resolve())  # what getcwd says in a mount
    for cwd in (inside, str(alice_ws)):
        assert os.path.realpath(launch.repo_root_for_call(["recall", "x"], {}, cwd)) == os.path.realpath(alice_ws)
    clone = str(alice_ws / ".mdmem-mounts" / "team-payments")
    assert launch.repo_root_for_call(["recall", "x", "--repo", clone], {}, "/") == str(alice_ws)
    own = str(alice_ws / ".mdmem-journal" / "daemon.sock")
    if len(os.fsencode(own)) < launch.SUN_PATH_MAX:  # else in the runtime folder, named by a hash
        assert launch.socket_path(str(alice_ws)) == own


def test_the_first_read_only_call_inside_a_workspace_starts_its_daemon(alice_ws):
    env = {"MDMEM_DAEMON_AUTOSTART": ""}  # the default: on
    here = cli("recall", "bluebird review", "--as", "alice", "--json", cwd=alice_ws, via="here")
    try:
        first = cli("recall", "bluebird review", "--as", "alice", "--json", cwd=alice_ws, env=env)
        assert (first.returncode, first.stdout) == (here.returncode, here.stdout), first.stderr
        deadline = time.monotonic() + 120
        info = None
        while time.monotonic() < deadline:
            info = daemon.ask(alice_ws, "ping")
            if info is not None and "pid" in info:
                break
            time.sleep(0.1)
        assert info is not None and info.get("workspace") is True, (alice_ws / ".mdmem-journal" / "daemon.log")
        second = cli("recall", "bluebird review", "--as", "alice", "--json", cwd=alice_ws, env=env)
        assert (second.returncode, second.stdout) == (here.returncode, here.stdout)
        assert served(alice_ws) == 1
        assert (alice_ws / ".mdmem-journal" / launch.LOG_NAME).exists()  # never in a scope repository
    finally:
        stop_daemon(alice_ws)


def test_a_mount_removed_by_another_process_is_not_answered_by_the_running_daemon(running):
    root, _ = running
    assert "bluebird" in cli("recall", "bluebird review", "--as", "alice", "--json", cwd=root).stdout
    r = cli("workspace", "remove", "team/payments", "--force", "--as", "alice", cwd=root, via="here")
    assert r.returncode == 0, r.stderr
    for call in (["recall", "bluebird review", "--as", "alice", "--json"], ["ls", "--as", "alice", "--json"],
                 ["startup", "--as", "alice"]):
        r = cli(*call, cwd=root)
        assert "bluebird" not in r.stdout + r.stderr, call


def test_a_mount_added_by_another_process_is_answered_by_the_running_daemon(running):
    root, _ = running
    assert "kestrel" not in cli("recall", "kestrel ranking", "--as", "alice", "--json", cwd=root).stdout
    remote = scope_remote(root.parent, "team/search", members=["alice"])
    r = cli("workspace", "add", "team/search", str(remote), "--as", "alice", cwd=root, via="here")
    assert r.returncode == 0, r.stderr
    r = cli("remember", "Search kestrel ranking ships Fridays", "--kind", "fact", "--subject", "service:search",
            "--key", "ship", "--scope", "team", "--team", "search", "--as", "alice", cwd=root, via="here")
    assert r.returncode == 0, r.stderr
    assert "kestrel" in cli("recall", "kestrel ranking", "--as", "alice", "--json", cwd=root).stdout
