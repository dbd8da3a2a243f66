"""Sync of a workspace: every mount with its own remote, in parallel; a remote that fails is named
with its error and stops none of the others; the exit code says one failed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from workspace_helpers import T0, team_of_three, workspace

from mdmem.errors import BranchMoved


def test_sync_names_a_broken_remote_and_syncs_the_others(tmp_path):
    remotes = team_of_three(tmp_path)
    roots = ["team/payments", "private/bob", "team/search"]
    bob = workspace(tmp_path, "bob", remotes, roots)
    alice = workspace(tmp_path, "alice", remotes, ["team/payments"])
    for team, text in (("payments", "Billing deploys on Tuesdays"), ("search", "Search reindexes at 2am")):
        bob.remember(text, as_user="bob", kind="fact", subject="service:x", key=team, scope="team", team=team, now=T0)
    bob.remember("I like tea", as_user="bob", kind="fact", subject="user:bob", key="tea", now=T0)
    remotes["team/search"].rename(remotes["team/search"].with_name("moved.git"))  # the host refuses it now
    result = bob.sync(as_user="bob", push=True)
    by_root = {m.root: m for m in result.mounts}
    assert [m.root for m in result.failed] == ["team/search"]
    assert str(remotes["team/search"]) in by_root["team/search"].error
    assert by_root["team/payments"].ok and by_root["team/payments"].report["push"] == "pushed"
    assert by_root["private/bob"].ok and by_root["private/bob"].report["push"] == "pushed"
    assert result.to_dict()["failed"] == ["team/search"] and result.to_dict()["ok"] is False
    # what was pushed arrives at a teammate's next sync
    assert alice.sync(as_user="alice").mounts[0].ok
    assert "Tuesdays" in alice.get(as_user="alice", subject="service:x", kind="fact", key="payments").note.text
    listed = {m.root: m for m in bob.mount_list()}
    assert listed["team/payments"].ahead == 0 and listed["team/search"].ahead == 1
    bob.close()
    alice.close()
    # the CLI: one line per mount, --json per-mount results, exit code not 0
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_REPO", None)
    r = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "sync", "--as", "bob", "--json"], cwd=bob.root,
                       env=env, capture_output=True, text=True)
    assert r.returncode == BranchMoved.exit_code, r.stderr
    out = json.loads(r.stdout)
    assert out["failed"] == ["team/search"] and len(out["mounts"]) == 3
    r = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "sync", "--as", "bob"], cwd=bob.root,
                       env=env, capture_output=True, text=True)
    assert "team/search: FAILED" in r.stdout and "1 of 3 mount(s) failed: team/search" in r.stdout


def test_a_workspace_sync_push_publishing_an_erasure_exits_11_while_a_remote_still_serves_it(tmp_path):
    """bob erases his own note without --push; the workspace's `sync --push` publishes it to an
    unguarded remote, which still hands out the erased objects by id: the mount's line says so
    and the exit code is Incomplete's, as `forget --push` would."""
    from mdmem.errors import Incomplete

    remotes = team_of_three(tmp_path)
    bob = workspace(tmp_path, "bob", remotes, ["private/bob"])
    bob.remember("Escalations after hours: call Bob at 555-0188", as_user="bob", kind="fact", subject="user:bob",
                 key="locker", now=T0)
    assert bob.sync(as_user="bob", push=True).mounts[0].ok
    bob.forget(as_user="bob", texts=["555-0188"])
    bob.close()
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_REPO", None)
    r = subprocess.run([sys.executable, "-m", "mdmem.cli.main", "sync", "--push", "--as", "bob"], cwd=bob.root,
                       env=env, capture_output=True, text=True)
    assert r.returncode == Incomplete.exit_code, (r.stdout, r.stderr)
    assert "private/bob: published erasure" in r.stdout and "the erasure on origin: NOT erased" in r.stdout, r.stdout
