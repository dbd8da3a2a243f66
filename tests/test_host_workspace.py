"""Workspaces on a real git host (gitolite3 + sshd on 127.0.0.1), served from the scope repositories
`mdmem split` made of a memory with history, holds and receipts: the host, not mdmem, decides what
reaches each person's disk."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from githost import every_byte
from mcp import StdioServerParameters
from mcp.client import Client
from scope_memory import (ABOUT_BOB, BOB_PRIVATE, OPS, PAYMENTS, SEARCH, TEXTS,
                          old_memory)

from mdmem import MemoryRepo
from mdmem.errors import GitFailed
from mdmem.host import gitolite
from mdmem.host.mount import from_host, undeclared
from mdmem.host.rules import grants, roots_declared
from mdmem.host.split import split
from mdmem.storage import host_git
from mdmem.workspace import Workspace

T3, T4 = "2026-10-04T09:00:00Z", "2026-10-05T09:00:00Z"
ALICE_TEXTS = [t.encode() for t in TEXTS["private/alice"]]


@dataclass
class Served:
    host: object
    ns: str
    tmp: Path

    @property
    def address(self) -> gitolite.Address:
        return gitolite.Address.parse(self.host.address)

    def url(self, root: str) -> str:
        return self.host.url(f"{self.ns}/{root}")

    @contextmanager
    def acting(self, person: str):
        """git and ssh in this process act as ``person`` (their key) while the block runs."""
        old = os.environ.get("GIT_SSH_COMMAND")
        os.environ["GIT_SSH_COMMAND"] = self.host.ssh_command(person)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("GIT_SSH_COMMAND", None)
            else:
                os.environ["GIT_SSH_COMMAND"] = old

    def workspace(self, person: str) -> Path:
        path = self.tmp / f"ws-{person}"
        with self.acting(person):
            out = from_host(path, self.address, as_user=person, prefix=self.ns,
                            ssh_command=self.host.ssh_command(person), embedder="none")
        assert not out.failed, out.failed
        return path

    def apply(self, sources) -> None:
        gitolite.apply(self.host.admin_url, grants(sources, prefix=self.ns), identity=("admin", "admin@host.invalid"),
                       ssh_command=self.host.ssh_command("admin"))


@pytest.fixture
def served(githost, tmp_path) -> Served:
    """The old memory split into scope repositories, rules applied, each repository pushed by a
    person the host lets write it; then the old repository and the split output are deleted."""
    s = Served(githost, githost.namespace(), tmp_path)
    source = old_memory(tmp_path / "old")
    with MemoryRepo.open(source, embedder="none") as repo:
        config = repo.config
    s.apply([(r, config) for r in roots_declared(config)])
    for result in split(source, tmp_path / "split", as_user="dana", config=config, prefix=s.ns):
        pusher = result.root.split("/")[1] if result.root.startswith("private/") else "dana"
        host_git.push_all(result.path, s.url(result.root), ssh_command=githost.ssh_command(pusher))
    shutil.rmtree(source)
    shutil.rmtree(tmp_path / "split")
    return s


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, "MDMEM_EMBEDDER": "none", **(env or {})}, cwd=cwd)


def test_bobs_workspace_holds_not_one_byte_of_alices_private_repository(served):
    r = cli("host", "clone", served.host.address, str(served.tmp / "ws-bob"), "--prefix", served.ns, "--as", "bob",
            "--json", env=served.host.env("bob"))
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(r.stdout)["mounted"]) == ["private/bob", "team/ops", "team/payments"]
    ws = served.tmp / "ws-bob"
    # everything bob may read is there, through mdmem and on disk
    r = cli("recall", "When do payments deploy?", "--as", "bob", "--json", cwd=ws)
    assert r.returncode == 0, r.stderr
    assert PAYMENTS in r.stdout
    data = every_byte(ws)
    for text in (BOB_PRIVATE, PAYMENTS, OPS):
        assert text.encode() in data
    # and not one byte of alice's private repository, nor of a team he is not in
    for text in (*ALICE_TEXTS, SEARCH.encode(), b"Acme"):
        assert text not in data, text
    for answer in (cli("recall", "Where is Alice interviewing? Acme offer", "--as", "bob", "--json", cwd=ws),
                   cli("get", "private/alice/user/alice/profile/job.md", "--as", "bob", cwd=ws)):
        assert "Acme" not in answer.stdout + answer.stderr
    # his own git clone of it is refused by the host, and so is mounting it
    refused = served.host.git("bob", "clone", served.url("private/alice"), str(served.tmp / "stolen"), check=False)
    assert refused.returncode != 0 and "DENIED" in refused.stderr
    assert not (served.tmp / "stolen").exists()
    r = cli("workspace", "add", "private/alice", served.url("private/alice"), "--as", "bob", cwd=ws,
            env=served.host.env("bob"))
    assert r.returncode != 0 and "DENIED" in r.stderr
    assert b"Acme" not in every_byte(ws)


async def _agent(ws: Path, calls):
    env = {**os.environ, "MDMEM_EMBEDDER": "none"}
    env.pop("MDMEM_USER", None)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mdmem.cli.main", "serve", "--repo", str(ws),
                                   "--as", "bob", "--allow", "read,write"], env=env)
    out = []
    async with Client(params, read_timeout_seconds=120) as client:
        for name, args in calls:
            result = await client.call_tool(name, args)
            for _ in range(600):
                text = json.dumps(result.structured_content) if result.structured_content else \
                    " ".join(getattr(c, "text", "") for c in result.content)
                if name != "recall" or result.is_error or '"building"' not in text:
                    break
                await asyncio.sleep(0.1)
                result = await client.call_tool(name, args)
            out.append((name, result.is_error, text))
    return out


def test_an_agent_serving_bob_reads_nothing_of_alices(served):
    ws = served.workspace("bob")
    asked = asyncio.run(_agent(ws, [
        ("startup", {}),
        ("recall", {"query": "Alice interviewing at Acme; offer accepted"}),
        ("recall", {"query": "When do payments deploy?"}),
        ("get", {"path": "private/alice/user/alice/profile/job.md"}),
        ("get", {"subject": "user:alice", "kind": "profile", "key": "job"}),
        ("keys", {"subject": "user:alice", "kind": "profile"}),
        ("history", {"subject": "user:alice", "kind": "profile", "key": "job"}),
    ]))
    said = " ".join(text for _name, _err, text in asked)
    assert PAYMENTS in said            # the agent does read bob's memory
    for text in ("Acme", "interviewing", SEARCH):
        assert text not in said, text
    assert [err for name, err, _ in asked if name == "get"] == [True, True]
    # through the daemon the CLI hands its reads to, the same
    env = {"MDMEM_DAEMON_AUTOSTART": "1"}
    for _ in range(2):
        r = cli("recall", "Alice Acme interview offer", "--as", "bob", "--json", cwd=ws, env=env)
        assert r.returncode == 0 and "Acme" not in r.stdout + r.stderr
    cli("daemon", "stop", "--repo", str(ws), cwd=ws)


def _commit_config(clone: Path, user: str, edit) -> None:
    path = clone / "mdmem.toml"
    path.write_text(edit(path.read_text()))
    subprocess.run(["git", "-C", str(clone), "-c", f"user.name={user}", "-c", f"user.email={user}@mdmem.invalid",
                    "commit", "-qam", f"remove a member ({user})"], check=True)


def test_bob_removed_from_a_team_fetches_nothing_new_and_his_workspace_says_so(served):
    bob_ws, dana_ws = served.workspace("bob"), served.workspace("dana")
    # an admin removes bob from payments, commits it, and regenerates the host's rules from it
    with Workspace.open(dana_ws, embedder="none") as ws:
        clone = ws.clone_path("team/payments")
    _commit_config(clone, "dana", lambda t: t.replace('payments = ["alice", "bob", "dana"]',
                                                      'payments = ["alice", "dana"]'))
    with served.acting("dana"), Workspace.open(dana_ws, embedder="none") as ws:
        assert all(m.ok for m in ws.sync(as_user="dana", push=True).mounts)
        served.apply([(root, ws.repo_for(root).config) for root in sorted(ws.file.mounts)])
        ws.remember("Payments moves its deploys to Thursdays from November", as_user="dana", kind="fact",
                    subject="service:billing", key="deploy.window", scope="team", team="payments", now=T3)
        assert all(m.ok for m in ws.sync(as_user="dana", push=True).mounts)
    # bob's next sync: the host refuses payments (named), his other mounts sync
    r = cli("sync", "--as", "bob", "--json", cwd=bob_ws, env=served.host.env("bob"))
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "team/payments" in out and "DENIED" in out
    mounts = {m["root"]: m for m in json.loads(r.stdout)["mounts"]}
    assert mounts["private/bob"]["ok"] and mounts["team/ops"]["ok"] and not mounts["team/payments"]["ok"]
    assert b"Thursdays" not in every_byte(bob_ws)
    # rules regenerated from dana's workspace changed only its repositories: alice still reaches hers
    served.host.git("alice", "clone", "-q", served.url("private/alice"), str(served.tmp / "alice-own"))


def test_check_names_a_mount_whose_declaration_no_longer_includes_the_person(served):
    bob_ws, dana_ws = served.workspace("bob"), served.workspace("dana")
    with Workspace.open(dana_ws, embedder="none") as ws:
        clone = ws.clone_path("team/ops")
    # bob is removed from ops in its mdmem.toml, but the host's rules are not regenerated
    _commit_config(clone, "dana", lambda t: t.replace('ops = ["bob", "carol", "dana"]', 'ops = ["carol", "dana"]'))
    with served.acting("dana"), Workspace.open(dana_ws, embedder="none") as ws:
        assert all(m.ok for m in ws.sync(as_user="dana", push=True).mounts)
    r = cli("check", cwd=bob_ws)
    assert r.returncode == 0, r.stderr          # before his sync his copy still declares him
    with served.acting("bob"), Workspace.open(bob_ws, embedder="none") as ws:
        ws.sync(as_user="bob")
        [line] = undeclared(ws)
    assert line.startswith(f"team/ops: bob could clone it from {served.url('team/ops')}")
    r = cli("check", "--json", cwd=bob_ws)
    assert r.returncode == 2 and json.loads(r.stdout)["undeclared_mounts"] == [line]


def test_an_erasure_of_a_person_across_three_repositories_is_proved_gone_everywhere(served):
    dana_ws = served.workspace("dana")
    teammates = {p: served.workspace(p) for p in ("alice", "bob", "carol")}
    needles = list(ABOUT_BOB.values())
    for person, ws in teammates.items():       # each held some of it before
        assert any(n.encode() in every_byte(ws) for n in needles), person
    with served.acting("dana"), Workspace.open(dana_ws, embedder="none") as ws:
        ws.sync(as_user="dana")                 # the holds on the host come first (forget --push asks)
        out = ws.forget(as_user="dana", subject="user:bob", push=True, force=True, now=T3)
        assert sorted(out.receipts) == ["team/ops", "team/payments", "team/search"], out
        proof = ws.prove_gone(needles, as_user="dana", subject="user:bob")
        assert proof.verdict == "PASS", proof.to_dict()
    for person, ws_path in teammates.items():
        with served.acting(person), Workspace.open(ws_path, embedder="none") as ws:
            # a clone holding history erased elsewhere takes the erasure with --replay (README: Erasure)
            synced = ws.sync(as_user=person, replay=True, now=T4)
            assert all(m.ok for m in synced.mounts), [m.error for m in synced.mounts if not m.ok]
            if person == "bob":
                # the person erased may prove it themselves: a team's scope repository holds only
                # the team's root, which he reads, so his proof there covers everything (git's
                # objects, its metadata, the caches) and passes; his own private repository
                # (which the eraser cannot read) still holds his notes and fails, naming them
                proof = ws.prove_gone(needles, as_user="bob", subject="user:bob")
                verdicts = {r: p.to_dict()["verdict"] for r, p in proof.proofs.items()}
                assert verdicts == {"private/bob": "FAIL", "team/ops": "PASS", "team/payments": "PASS"}
                for root in ("team/ops", "team/payments"):
                    report = proof.proofs[root].to_dict()
                    assert report["complete_by"] == [] and report["not_checked"] == {}
                    assert all(check["where"] == [] for n in report["needles"] for check in n["checks"].values())
                assert proof.proofs["private/bob"].to_dict()["scope"]["no_note_for_subject"]["where"] == [
                    "private/bob/user/bob/profile/bike.md"]
        data = every_byte(ws_path)
        for n in needles:
            assert n.encode() not in data, (person, n)


def test_a_host_refusing_mid_sync_is_named_and_the_other_mounts_still_sync(served):
    bob_ws = served.workspace("bob")
    with Workspace.open(bob_ws, embedder="none") as ws:
        ws.remember("Bob renews his passport in March", as_user="bob", kind="fact", subject="user:bob",
                    key="passport", now=T3)
        ws.remember("Ops pages the secondary after ten minutes", as_user="bob", kind="fact", subject="service:pager",
                    key="escalation", scope="team", team="ops", now=T3)
    # the host refuses every push to ops (a hook of the host's own), mid-sync
    hook = served.host.bare(f"{served.ns}/team/ops") / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'host: ops is frozen for an audit' >&2\nexit 1\n")
    hook.chmod(0o755)
    shutil.chown(hook, served.host.user)
    r = cli("sync", "--push", "--as", "bob", "--json", cwd=bob_ws, env=served.host.env("bob"))
    mounts = {m["root"]: m for m in json.loads(r.stdout)["mounts"]}
    refused = mounts["team/ops"]["error"] or mounts["team/ops"]["report"]["push"]
    assert "refused" in refused and "frozen for an audit" in refused, mounts["team/ops"]
    assert mounts["private/bob"]["ok"] and mounts["private/bob"]["report"]["push"] == "pushed"
    assert mounts["team/payments"]["ok"]
    pushed = served.host.git("bob", "ls-remote", served.url("private/bob"), "main").stdout.split()[0]
    with Workspace.open(bob_ws, embedder="none") as ws:
        assert pushed == ws.repo_for("private/bob").store.head()


def test_mounting_from_a_host_that_refuses_the_key_is_named(served):
    with pytest.raises(GitFailed, match="ssh .*info"):
        from_host(served.tmp / "ws-nobody", gitolite.Address.parse(f"nobody@127.0.0.1:{served.host.port}"),
                  as_user="bob", ssh_command=served.host.ssh_command("bob"))


def test_the_hosts_guard_refuses_erased_history_coming_back_on_a_hold_branch(githost, request):
    """Installed by the host's admin and run by gitolite's user: a member may create any
    review/<id> branch, and the guard still refuses one bringing erased commits back."""
    probe = subprocess.run(["runuser", "-u", githost.user, "--", "test", "-x", sys.executable])
    if probe.returncode != 0:
        pytest.skip(f"gitolite's user cannot run this Python ({sys.executable}); the guard needs mdmem "
                    "installed where the host's user can run it")
    served = request.getfixturevalue("served")
    dana_ws = served.workspace("dana")
    stale = served.tmp / "carol-stale"         # a plain clone from before the erasure
    served.host.git("carol", "clone", "-q", served.url("team/search"), str(stale))
    # The guard is in place before the erasure: it learns the erased ids as the erasure's push
    # arrives (the committed receipt names none, so nothing else could tell it).
    served.host.run_as_host(sys.executable, "-I", "-m", "mdmem.cli.main", "guard",
                            str(served.host.bare(f"{served.ns}/team/search")))
    with served.acting("dana"), Workspace.open(dana_ws, embedder="none") as ws:
        ws.sync(as_user="dana")
        ws.forget(as_user="dana", subject="user:bob", push=True, force=True, now=T3)
    back = served.host.git("carol", "push", served.url("team/search"), "HEAD:refs/heads/review/sneak", cwd=stale,
                           check=False)
    assert back.returncode != 0 and "mdmem: refused" in back.stderr, back.stderr
