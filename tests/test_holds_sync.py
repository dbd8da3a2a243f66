"""Held writes travelling with `mdmem sync` and `sync --replay`: a hold is approved only if its
claimed writer may write it, holds on history an erasure removed are remade or dropped, history
decides which holds are closed, and a replay carries unpushed commits over an erasure without
quoting erased text. Real clones and bare remotes."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import DEPLOY, ENV, T0, git, run_cli, shared_remote

from mdmem import MemoryRepo

FACT = ["--kind", "fact", "--subject", "service:billing", "--scope", "team", "--team", "payments", "--new-key"]


@pytest.fixture
def clones(tmp_path):
    """alice's repo pushed to a bare remote; bob, dana and carol each clone it."""
    root = tmp_path / "alice"
    MemoryRepo.init(root, teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]}, erasers=["dana"],
                    now=T0, as_user="alice", embedder="none").close()
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    assert run_cli("sync", "--push", "--as", "alice", env=ENV, cwd=root).returncode == 0
    out = {"alice": root, "remote": remote}
    for who in ("bob", "dana", "carol"):
        git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(tmp_path / who))
        out[who] = tmp_path / who
    return out


def cli(where, *args, code=0):
    r = run_cli(*args, env=ENV, cwd=where)
    assert r.returncode == code, (args, r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout) if "--json" in args else r


def hold(where, text, key, who="bob"):
    return cli(where, "remember", text, *FACT, "--key", key, "--source", "tool:grafana", "--as", who, "--json",
               code=4)["review_id"]


def objects(where) -> bytes:
    return subprocess.run(["git", "-C", str(where), "cat-file", "--batch-all-objects", "--batch"],
                          capture_output=True, check=True).stdout


def forge(where, name, path, note, source="tool:x", email="bob@mdmem.invalid", link=False):
    """A hold made with plain git and pushed as review/<name>."""
    git(where, "checkout", "-q", "-b", "forge", "origin/main")
    full = where / path
    full.parent.mkdir(parents=True, exist_ok=True)
    if link:
        full.symlink_to("../../../../../mdmem.toml")
    else:
        full.write_text(note)
    git(where, "add", path)
    git(where, "-c", f"user.email={email}", "-c", "user.name=x", "commit", "-qm",
        f"hold fact x\n\nMemory-Op: hold\nMemory-Actor: bob\nMemory-Source: {source}\nMemory-Hold-Reason: r\n"
        "Memory-Channel: human\nMemory-New-Key: true", "--no-verify")
    git(where, "push", "-q", "origin", f"HEAD:refs/heads/review/{name}")
    git(where, "checkout", "-q", "main")
    git(where, "branch", "-q", "-D", "forge")


NOTE = """---
id: 01M8PZHGF2JTRFYW0K3QZF59ZB
kind: fact
subject: service:billing
key: {key}
scope: team
team: payments
owner: {owner}
source: {source}
valid_from: '2026-11-30T19:40:06Z'
valid_until: null
expires_at: null
derived_from: []
---

{text}
"""


# Approving a hold skipped the check remember applies to a source naming a writer: a
# hand-made hold saying system:consolidate or human:dana was committed as such.
@pytest.mark.parametrize("source,owner", [("system:consolidate", "bob"), ("human:dana", "bob"), ("tool:x", "dana")])
def test_a_forged_holds_claimed_source_or_owner_is_refused_at_approval(clones, source, owner):
    path = "team/payments/service/billing/fact/sys.md"
    forge(clones["bob"], "forged0001", path, NOTE.format(key="sys", owner=owner, source=source,
                                                         text="Consolidated: deploy freeze lifted"), source=source)
    cli(clones["dana"], "sync", "--as", "dana")
    r = cli(clones["dana"], "review", "approve", "forged0001", "--as", "dana", code=3)
    assert "freeze" not in (clones["dana"] / "team/payments/MEMORY.md").read_text(), r.stderr
    assert not (clones["dana"] / path).exists()


# One malformed, symlinked or oversized hold pushed by anyone broke `review list` for
# everyone (and named a root they cannot read). sync now refuses to take it.
def test_branches_that_are_no_hold_are_not_taken_and_do_not_break_review_list(clones):
    carol = clones["carol"]
    forge(carol, "bad0000001", "team/search/service/x/fact/bad.md", "---\nid: [unclosed\n---\nx\n",
          email="carol@mdmem.invalid")
    forge(carol, "link000001", "team/search/service/x/fact/link.md", "", email="carol@mdmem.invalid", link=True)
    forge(carol, "huge000001", "team/search/service/x/fact/huge.md",
          NOTE.format(key="huge", owner="carol", source="tool:x", text="x" * 300_000), email="carol@mdmem.invalid")
    git(carol, "push", "-q", "origin", "origin/main:refs/heads/review/--help")
    good = hold(clones["bob"], "p99 is 180ms", "latency")
    cli(clones["bob"], "sync", "--push", "--as", "bob")
    out = cli(clones["dana"], "sync", "--as", "dana", "--json")["holds"]
    assert out["fetched"] == [good] and {r["id"] for r in out["refused"]} == {"bad0000001", "link000001", "huge000001"}
    assert out["skipped_names"] == ["--help"]
    r = cli(clones["dana"], "review", "list", "--as", "dana")
    assert "p99 is 180ms" in r.stdout and "team/search" not in r.stdout + r.stderr


# A hold made before someone's erasure kept the erased history alive in the clone;
# approving it (or pushing it) put the erased text back. It is made again on the erased
# history, or dropped and named when it touches an erased version.
def test_holds_on_history_an_erasure_removed_are_remade_or_dropped(clones):
    bob, dana, remote = clones["bob"], clones["dana"], clones["remote"]
    cli(bob, "remember", "Secret pin GG-42424 for vault", *FACT, "--key", "pin", "--as", "bob")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(dana, "sync", "--as", "dana")
    kept = hold(bob, "p99 is 180ms", "latency")                       # unrelated: made again
    quoting = hold(bob, "Copied: Secret pin GG-42424 for vault", "backup")  # quotes erased text: dropped
    cli(dana, "forget", "--path", "team/payments/service/billing/fact/pin.md", "--push", "--as", "dana",
        code=11)  # erased here; the unguarded remote still serves the old objects by id
    cli(bob, "sync", "--as", "bob", code=3)
    out = cli(bob, "sync", "--replay", "--push", "--as", "bob", "--json")
    assert out["holds"]["remade"] == [kept] and out["holds"]["dropped_erased"] == [quoting]
    assert b"GG-42424" not in objects(bob)
    assert "GG-42424" not in git(remote, "log", "-p", "--all").stdout
    cli(dana, "sync", "--as", "dana")
    cli(dana, "review", "approve", kept, "--as", "dana")
    assert "180ms" in (dana / "team/payments/service/billing/fact/latency.md").read_text()


# An erasure published by `sync --push` (forget without --push) left the remote's old
# holds (erased text included), and a fresh clone kept them in refs/remotes/origin/review/*.
def test_publishing_an_erasure_replaces_the_remotes_old_holds(clones, tmp_path):
    bob, dana, remote = clones["bob"], clones["dana"], clones["remote"]
    cli(bob, "remember", "Oncall phone is 555-0199 for billing", *FACT, "--key", "oncall", "--as", "bob")
    held = hold(bob, "Backup phone 555-0199 per pager tool", "backup")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(dana, "sync", "--as", "dana")
    cli(dana, "forget", "--text", "555-0199", "--as", "dana")
    # An unguarded remote still serves the erased objects by id until someone prunes it: exit 11, said.
    out = cli(dana, "sync", "--push", "--as", "dana", "--json", code=11)
    assert out["status"] == "published erasure" and held in out["holds"]["pushed"]
    assert out["erasure"].startswith("NOT erased"), out["erasure"]
    assert "555-0199" not in git(remote, "log", "-p", "--all").stdout
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(fresh))
    cli(fresh, "sync", "--as", "alice")
    assert b"555-0199" not in objects(fresh)


# Open and closed were a clone's local state: a lost state file re-published an
# approved hold, and anyone's stray `git branch -D` plus `sync --push` deleted a teammate's
# pending hold everywhere. History decides now (the approve or reject commit names the hold).
def test_history_decides_which_holds_are_closed(clones):
    bob, dana, carol, remote = clones["bob"], clones["dana"], clones["carol"], clones["remote"]
    first, second = hold(bob, "p99 is 180ms", "latency"), hold(bob, "p50 is 20ms", "p50")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(carol, "sync", "--as", "carol")
    git(carol, "branch", "-q", "-D", f"review/{first}")
    cli(carol, "sync", "--push", "--as", "carol")
    assert f"review/{first}" in git(remote, "for-each-ref").stdout  # a vanished branch deletes nothing
    cli(dana, "sync", "--as", "dana")
    cli(dana, "review", "approve", first, "--as", "dana")
    cli(dana, "review", "reject", second, "--as", "dana")
    cli(dana, "sync", "--push", "--as", "dana")
    assert "refs/heads/review/" not in git(remote, "for-each-ref").stdout
    (bob / ".git/mdmem/holds-seen.json").unlink(missing_ok=True)
    out = cli(bob, "sync", "--push", "--as", "bob", "--json")["holds"]
    assert sorted(out["closed"]) == sorted([first, second]) and not out.get("pushed")
    assert "refs/heads/review/" not in git(remote, "for-each-ref").stdout
    r = run_cli("review", "reject", first, "--as", "alice", env=ENV, cwd=bob)
    assert r.returncode in (3, 6) and first not in (bob / "audit/reviews.jsonl").read_text()  # approved already


# `sync --replay` re-applied a clone's unpushed copies of erased text (a note quoting it).
def test_replay_scrubs_a_quote_of_erased_text_and_keeps_the_commit(clones):
    bob, dana, remote = clones["bob"], clones["dana"], clones["remote"]
    cli(bob, "remember", "Secret vendor contract number ZX-99417 expires soon", *FACT, "--key", "vendor",
        "--as", "bob")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(dana, "sync", "--as", "dana")
    # A copy forget would have scrubbed (it quotes the erased sentence; forget's needles: needles.py)
    cli(bob, "remember", "Per the vendor note: Secret vendor contract number ZX-99417 expires soon", *FACT,
        "--key", "vendor.copy",
        "--as", "bob")
    cli(bob, "remember", "Refunds within 30 days", *FACT, "--key", "refund", "--as", "bob")
    cli(dana, "forget", "--path", "team/payments/service/billing/fact/vendor.md", "--push", "--as", "dana",
        code=11)  # erased here; the unguarded remote still serves the old objects by id
    out = cli(bob, "sync", "--replay", "--push", "--as", "bob", "--json")
    # Replayed with the quote scrubbed, as forget scrubs history (leaving the whole
    # commit out lost whatever else it held).
    assert [c["subject"] for c in out["replayed"]] == ["remember fact service:billing/vendor.copy",
                                                       "remember fact service:billing/refund"]
    assert out["replayed"][0]["scrubbed"] == ["team/payments/service/billing/fact/vendor.copy.md"]
    assert out["left_out"] == []
    assert "ZX-99417" not in git(remote, "log", "-p", "--all").stdout


# A replay killed before it dropped the old objects left them for good; branches and
# stashes on the old history were kept without a word.
def test_a_killed_replay_is_cleaned_by_the_next_sync_and_old_branches_are_named(clones):
    bob, dana = clones["bob"], clones["dana"]
    cli(bob, "remember", "Secret pin QQ-55123 for vault", *FACT, "--key", "pin", "--as", "bob")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(dana, "sync", "--as", "dana")
    cli(bob, "remember", "Refunds within 30 days", *FACT, "--key", "refund", "--as", "bob")
    cli(dana, "forget", "--path", "team/payments/service/billing/fact/pin.md", "--push", "--as", "dana",
        code=11)  # erased here; the unguarded remote still serves the old objects by id
    killed = subprocess.run(
        [str(__import__("sys").executable), "-c",
         "import os, sys; import mdmem.storage.sync_ops as s; s.drop_unreachable = lambda store: os._exit(137); "
         "from mdmem.cli.main import main; sys.exit(main(['sync', '--replay', '--as', 'bob']))"],
        cwd=bob, env={**__import__("os").environ, **ENV}, capture_output=True)
    assert killed.returncode == 137 and b"QQ-55123" in objects(bob)
    cli(bob, "sync", "--as", "bob")
    assert b"QQ-55123" not in objects(bob)
    # Nor in its caches: the replay purges them before it replaces the history too (killed
    # after that, nothing ran the purge again).
    proof = subprocess.run([str(__import__("sys").executable), "-m", "mdmem.cli.main", "prove-gone", "--needle",
                            "QQ-55123", "--as", "dana"], cwd=bob, env={**__import__("os").environ, **ENV},
                           capture_output=True, text=True)
    assert proof.returncode == 0, proof.stdout
    git(bob, "branch", "wip", "HEAD")  # harmless: on the new history
    assert "refund" in git(bob, "log", "--oneline").stdout


# A hold rejected in one clone and approved (offline) in another ended up both, silently.
def test_a_hold_approved_in_one_clone_and_rejected_in_another_is_named(clones):
    bob, dana, alice = clones["bob"], clones["dana"], clones["alice"]
    held = hold(bob, "p99 is 999ms", "latency")
    cli(bob, "sync", "--push", "--as", "bob")
    cli(dana, "sync", "--as", "dana")
    cli(alice, "sync", "--as", "alice")
    cli(alice, "review", "reject", held, "--as", "alice")
    cli(alice, "sync", "--push", "--as", "alice")
    cli(dana, "review", "approve", held, "--as", "dana")
    out = cli(dana, "sync", "--push", "--as", "dana", "--json")
    assert out["approved_and_rejected"] == [held]
    r = cli(dana, "sync", "--as", "dana")
    assert f"review {held} was approved in one clone and rejected in another" in r.stdout


# One committed .gitattributes line (working-tree-encoding) made every note unreadable in
# the work tree of every clone; the hook refuses it now and sync will not bring it in.
def test_attributes_that_convert_notes_are_refused_by_the_hook_and_by_sync(clones):
    bob, dana = clones["bob"], clones["dana"]
    cli(bob, "hooks", "install", "--as", "bob")
    (bob / ".gitattributes").write_text((bob / ".gitattributes").read_text()
                                        + "*.md text working-tree-encoding=UTF-16LE eol=crlf\n")
    git(bob, "add", ".gitattributes")
    r = git(bob, "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "enc", check=False)
    assert r.returncode != 0 and "working-tree-encoding" in r.stderr, r.stderr
    git(bob, "-c", "user.email=bob@mdmem.invalid", "commit", "-qm", "enc", "--no-verify")
    git(bob, "push", "-q", "origin", "HEAD:main")
    cli(dana, "remember", "Refunds within 30 days", *FACT, "--key", "refund", "--as", "dana")
    r = cli(dana, "sync", "--as", "dana", code=3)
    assert "working-tree-encoding" in r.stderr and "nothing changed" in r.stderr
    assert cli(dana, "get", "team/payments/service/billing/fact/refund.md", "--as", "dana").returncode == 0
    # Line endings alone stay allowed (mdmem reads CRLF as LF).
    from mdmem.hooks.install import converting_attributes

    assert converting_attributes("*.md text eol=crlf\n*.png filter=lfs\n") == []
    assert converting_attributes("* filter=lfs diff=lfs\n") == ["* filter=lfs diff=lfs"]


def signed_team(root, tmp_path) -> dict:
    """A team repo at ``root`` under require_signed with bob's and dana's SSH keys (dana, an
    admin, signs the change); returns the private key paths by name."""
    keys = {}
    for who in ("bob", "dana"):
        keys[who] = tmp_path / f"{who}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(keys[who])], check=True)
    MemoryRepo.init(root, teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"], now=T0, as_user="dana",
                    embedder="none").close()
    (root / "allowed_signers").write_text("".join(
        f"{who}@mdmem.invalid {' '.join((tmp_path / f'{who}_key.pub').read_text().split()[:2])}\n" for who in keys))
    cfg = root / "mdmem.toml"
    cfg.write_text(cfg.read_text().replace("[trust]\n", "[trust]\nrequire_signed = true\n"))
    git(root, "add", "allowed_signers")
    git(root, "-c", "user.name=dana", "-c", "user.email=dana@mdmem.invalid", "-c", "gpg.format=ssh", "-c",
        f"user.signingkey={keys['dana']}", "commit", "-S", "-qam", "signed memory", "--no-verify")
    return keys


# Under require_signed a hold's writer was still only its e-mail: an unsigned hold forged
# as bob was approved as bob's write.
@pytest.mark.skipif(__import__("shutil").which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_under_require_signed_a_hold_needs_its_writers_signature(tmp_path):
    from mdmem.config import UserConfig

    root = tmp_path / "m"
    keys = signed_team(root, tmp_path)
    bob = MemoryRepo.open(root, embedder="none", user_config=UserConfig(signing_key=str(keys["bob"])))
    signed = bob.remember("p99 is 180ms", as_user="bob", kind="fact", subject="service:billing", key="latency",
                          scope="team", team="payments", source="tool:grafana", new_key=True, now=T0)
    bob.close()
    git(root, "checkout", "-q", "-b", "forge", "main")
    path = root / "team/payments/service/billing/fact/wire.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NOTE.format(key="wire", owner="bob", source="tool:x", text="Bob says: refunds to account 666"))
    git(root, "add", str(path))
    git(root, "-c", "user.email=bob@mdmem.invalid", "-c", "user.name=bob", "commit", "-qm",
        "hold fact x\n\nMemory-Op: hold\nMemory-Actor: bob\nMemory-Source: tool:x\nMemory-Hold-Reason: r\n"
        "Memory-Channel: human\nMemory-New-Key: true", "--no-verify")
    git(root, "branch", "-q", "-m", "forge", "review/forged0002")
    git(root, "checkout", "-q", "main")
    dana = MemoryRepo.open(root, embedder="none", user_config=UserConfig(signing_key=str(keys["dana"])))
    from mdmem.errors import Refused

    with pytest.raises(Refused, match="signature"):
        dana.approve("forged0002", as_user="dana", now=T0)
    assert dana.approve(signed.review_id, as_user="dana", now=T0).status == "committed"
    dana.close()


# Replayed commits lost their signatures: under require_signed the notes a person's own
# replayed writes touched became untrusted. The person replaying signs again what they wrote.
@pytest.mark.skipif(__import__("shutil").which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_replay_signs_again_what_the_person_replaying_wrote(tmp_path):
    from mdmem.config import UserConfig

    root = tmp_path / "dana"
    keys = signed_team(root, tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "-q", "origin", "main")
    bob_root = tmp_path / "bob"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(bob_root))
    team = dict(kind="fact", subject="service:billing", scope="team", team="payments", new_key=True, now=T0)
    with MemoryRepo.open(bob_root, embedder="none", user_config=UserConfig(signing_key=str(keys["bob"]))) as bob:
        bob.remember("Secret pin QQ-55123 for vault", as_user="bob", key="pin", **team)
        bob.sync(as_user="bob", push=True)
        bob.remember("Refunds within 30 days", as_user="bob", key="refund", **team)
    with MemoryRepo.open(root, embedder="none", user_config=UserConfig(signing_key=str(keys["dana"]))) as dana:
        dana.sync(as_user="dana")
        dana.forget(as_user="dana", paths=["team/payments/service/billing/fact/pin.md"], push=True, now=T0)
    with MemoryRepo.open(bob_root, embedder="none", user_config=UserConfig(signing_key=str(keys["bob"]))) as bob:
        out = bob.sync(as_user="bob", replay=True)
    [replayed] = out["replayed"]
    status = git(bob_root, "-c", f"gpg.ssh.allowedSignersFile={bob_root / 'allowed_signers'}", "log", "-1",
                 "--format=%G? %GS", replayed["as"]).stdout.split()
    assert status == ["G", "bob@mdmem.invalid"], status


# Held writes never left the clone that held them: the second person who must approve a
# team hold never saw it. Holds now travel with sync; a hold closed in one clone closes in all.
def test_holds_travel_with_sync_and_close_everywhere(billing_team, tmp_path):
    root = billing_team.root
    remote = shared_remote(root, tmp_path, "dana")
    bob = tmp_path / "c"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(bob))

    def held(text, key):
        r = run_cli("remember", text, "--kind", "fact", "--subject", "service:billing", "--key", key, "--new-key",
                    "--scope", "team", "--team", "payments", "--source", "tool:grafana", "--as", "bob", "--json",
                    env=ENV, cwd=bob)
        assert r.returncode == 4, r.stderr
        return __import__("json").loads(r.stdout)["review_id"]

    first, second = held("p99 is 180ms", "latency"), held("p50 is 20ms", "p50")
    r = run_cli("sync", "--push", "--as", "bob", "--json", env=ENV, cwd=bob)
    assert r.returncode == 0, r.stderr
    assert sorted(__import__("json").loads(r.stdout)["holds"]["pushed"]) == sorted([first, second])
    assert f"refs/heads/review/{first}" in git(remote, "for-each-ref").stdout
    # A fresh clone takes the holds and does not close them on its first push.
    third = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(third))
    assert run_cli("sync", "--push", "--as", "alice", env=ENV, cwd=third).returncode == 0
    assert f"refs/heads/review/{second}" in git(remote, "for-each-ref").stdout
    # dana, in her own clone, sees both, approves one and rejects the other.
    assert run_cli("sync", "--as", "dana", env=ENV, cwd=root).returncode == 0
    listed = run_cli("review", "list", "--as", "dana", env=ENV, cwd=root)
    assert first in listed.stdout and second in listed.stdout and "p99 is 180ms" in listed.stdout
    assert run_cli("review", "approve", first, "--as", "dana", env=ENV, cwd=root).returncode == 0
    assert run_cli("review", "reject", second, "--as", "dana", env=ENV, cwd=root).returncode == 0
    # A sync without --push does not bring the closed holds back.
    assert run_cli("sync", "--as", "dana", env=ENV, cwd=root).returncode == 0
    assert git(root, "for-each-ref", "refs/heads/review/").stdout == ""
    assert run_cli("sync", "--push", "--as", "dana", env=ENV, cwd=root).returncode == 0
    assert "refs/heads/review/" not in git(remote, "for-each-ref").stdout
    # bob's clone learns both were closed, and has the approved fact.
    r = run_cli("sync", "--as", "bob", "--json", env=ENV, cwd=bob)
    assert sorted(__import__("json").loads(r.stdout)["holds"]["closed"]) == sorted([first, second])
    assert git(bob, "for-each-ref", "refs/heads/review/").stdout == ""
    r = run_cli("recall", "p99 latency", "--as", "bob", env=ENV, cwd=bob)
    assert "p99 is 180ms" in r.stdout and "p50 is 20ms" not in r.stdout


# With holds fetched from a remote, anyone who can push can make one with plain
# git. Its writer is the commit's identity (never its trailer), and a writer who may not write
# the root (or no declared person) cannot be approved into it.
@pytest.mark.parametrize("email", ["carol@mdmem.invalid", "mallory@example.com"])
def test_a_hold_made_with_plain_git_by_a_non_writer_is_not_approved(billing_team, email):
    root = billing_team.root
    tip = git(root, "rev-parse", "HEAD").stdout.strip()
    git(root, "branch", "review/forged01", tip)
    git(root, "checkout", "-q", "review/forged01")
    path = root / "team/payments/service/billing/fact/wire.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    note = (root / DEPLOY).read_text().replace("deploy.window", "wire").replace(
        "Billing deploys any weekday", "Wire refunds to acct 666")
    path.write_text(note)
    git(root, "add", str(path))
    git(root, "-c", f"user.email={email}", "-c", "user.name=x", "commit", "-qm",
        "hold fact service:billing/wire\n\nMemory-Op: hold\nMemory-Actor: bob\nMemory-Source: tool:x\n"
        "Memory-Hold-Reason: untrusted\nMemory-Channel: human", "--no-verify")
    git(root, "checkout", "-q", "main")
    r = run_cli("review", "approve", "forged01", "--as", "dana", env=ENV, cwd=root)
    assert r.returncode == 3 and "may not write team/payments" in r.stderr, (r.returncode, r.stdout, r.stderr)
    assert not (root / "team/payments/service/billing/fact/wire.md").exists()
    assert run_cli("review", "reject", "forged01", "--as", "dana", env=ENV, cwd=root).returncode == 0


# After someone's `forget --push`, sync told a clone with committed, unpushed notes to
# re-clone, which loses them. It now names them, and `sync --replay` carries them over.
def test_sync_replay_carries_unpushed_commits_over_an_erasure(billing_team, tmp_path):
    import json

    root = billing_team.root
    billing_team.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                  key="phone", now=T0)
    billing_team.remember("Alice is on leave until March", as_user="bob", kind="fact", subject="user:alice", key="leave",
                  scope="team", team="payments", now=T0)
    remote = shared_remote(root, tmp_path, "bob")
    bob = tmp_path / "b"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(bob))
    team_fact = ["--kind", "fact", "--scope", "team", "--team", "payments", "--as", "bob"]
    assert run_cli("remember", "Refund window is 45 days for enterprise", "--subject", "service:billing", "--key",
                   "refund.enterprise", "--new-key", *team_fact, env=ENV, cwd=bob).returncode == 0
    # A change to a note the erasure then takes away: its base version is erased, so it stays out.
    assert run_cli("remember", "Alice is on leave until April", "--subject", "user:alice", "--key", "leave",
                   *team_fact, env=ENV, cwd=bob).returncode == 0
    r = run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--as", "dana", "--push", env=ENV, cwd=root)
    assert r.returncode == 11, r.stderr  # erased here; the unguarded remote still serves the old objects by id
    r = run_cli("sync", "--push", "--as", "bob", env=ENV, cwd=bob)
    assert r.returncode == 3 and "--replay" in r.stderr and "2 commit(s) of yours are not on origin" in r.stderr, r.stderr
    r = run_cli("sync", "--replay", "--push", "--as", "bob", "--json", env=ENV, cwd=bob)
    assert r.returncode == 10, (r.stdout, r.stderr)  # one change left out (saved scrubbed, named)
    out = json.loads(r.stdout)
    assert [c["subject"] for c in out["replayed"]] == ["remember fact service:billing/refund.enterprise"]
    assert [c["subject"] for c in out["left_out"]] == ["remember fact user:alice/leave"]
    assert out["status"] == "replayed" and out["push"] == "pushed"
    import subprocess

    everything = subprocess.run(["git", "-C", str(bob), "cat-file", "--batch-all-objects", "--batch"],
                                capture_output=True, check=True).stdout
    assert b"555-0199" not in everything and b"until March" not in everything  # old history gone here too
    # And its caches (the view cache and vectors of the old history stayed,
    # and the eraser's proof in this clone failed with nothing to do about it).
    r = run_cli("prove-gone", "--needle", "until March", "--needle", "555-0199", "--as", "dana", env=ENV, cwd=bob)
    assert r.returncode == 0, (r.stdout, r.stderr)
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(fresh))
    r = run_cli("recall", "refund window enterprise", "--as", "dana", env=ENV, cwd=fresh)
    assert "45 days" in r.stdout, r.stdout
    assert run_cli("check", env=ENV, cwd=fresh).returncode == 0


# A local erasure that a teammate's push overtook could not be published: sync's advice
# (cherry-pick) needed the dropped commits, and sync and forget --push sent you to each other.
def test_sync_replay_publishes_an_erasure_a_teammates_push_overtook(billing_team, tmp_path):
    import json
    import subprocess

    root = billing_team.root
    billing_team.remember("Alice secret phone 555-0199 zanzibar quokka", as_user="alice", kind="profile",
                  subject="user:alice", key="phone", now=T0)
    remote = shared_remote(root, tmp_path, "bob")
    bob = tmp_path / "b"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(bob))
    assert run_cli("remember", "On-call rota moved to Tuesdays", "--kind", "fact", "--subject", "service:oncall",
                   "--key", "rota", "--new-key", "--scope", "team", "--team", "payments", "--as", "bob",
                   env=ENV, cwd=bob).returncode == 0
    assert run_cli("sync", "--push", "--as", "bob", env=ENV, cwd=bob).returncode == 0
    assert run_cli("forget", "--owner", "alice", "--subject", "user:alice", "--as", "dana", env=ENV,
                   cwd=root).returncode == 0
    r = run_cli("sync", "--push", "--as", "dana", env=ENV, cwd=root)
    assert r.returncode == 3 and "remember fact service:oncall/rota" in r.stderr and "--replay" in r.stderr, r.stderr
    r = run_cli("sync", "--replay", "--push", "--as", "dana", "--json", env=ENV, cwd=root)
    # Published; the unguarded remote still serves the erased objects by id until pruned: exit 11, said.
    assert r.returncode == 11, (r.stdout, r.stderr)
    out = json.loads(r.stdout)
    assert out["erasure"].startswith("NOT erased"), out["erasure"]
    assert [c["subject"] for c in out["replayed"]] == ["remember fact service:oncall/rota"]
    assert out["status"] == "replayed and published erasure"
    local = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                           capture_output=True, check=True).stdout
    assert b"zanzibar" not in local
    assert "zanzibar" not in git(remote, "log", "-p", "--all").stdout
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(fresh))
    r = run_cli("recall", "on-call rota", "--as", "dana", env=ENV, cwd=fresh)
    assert "Tuesdays" in r.stdout, r.stdout
    # bob's clone, now behind the erasure, carries nothing of its own over and is clean again.
    r = run_cli("sync", "--replay", "--as", "bob", "--json", env=ENV, cwd=bob)
    assert r.returncode == 0 and json.loads(r.stdout)["replayed"] == [], (r.stdout, r.stderr)
    assert "zanzibar" not in git(bob, "log", "-p", "--all").stdout
