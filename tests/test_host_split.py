"""mdmem split: today's one repository of every root -> one scope repository per root, each with
its root's whole history, its holds and the receipts, nothing of another root's; pushed to a
real host, where each person can clone exactly their repositories."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from githost import every_byte
from scope_memory import ALICE_NEW, ALICE_OLD, BOB_PRIVATE, PAYMENTS, ROOTS, SEARCH, TEXTS, old_memory

from mdmem import MemoryRepo
from mdmem.errors import Refused
from mdmem.erasure.receipt import receipt_ids
from mdmem.host.split import reduce_config, reduce_receipts, split



def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "mdmem.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def versions(root_dir: Path, under: str) -> set[tuple[str, str]]:
    """Every (path, blob) under ``under`` in every commit of every branch: each version of each note."""
    commits = subprocess.run(["git", "-C", str(root_dir), "rev-list", "--all"], capture_output=True, text=True,
                             check=True).stdout.split()
    out = set()
    for c in commits:
        tree = subprocess.run(["git", "-C", str(root_dir), "ls-tree", "-r", c, "--", under + "/"],
                              capture_output=True, text=True, check=True).stdout
        for line in tree.splitlines():
            meta, path = line.split("\t", 1)
            out.add((path, meta.split()[2]))
    return out


@pytest.fixture(scope="module")
def split_out(tmp_path_factory):
    base = tmp_path_factory.mktemp("split")
    source = old_memory(base / "old")
    r = cli("split", "--to", str(base / "scopes"), "--as", "dana", "--json", cwd=source)
    assert r.returncode == 0, r.stderr
    return source, base / "scopes", json.loads(r.stdout)


def test_every_note_version_of_every_root_is_in_its_scope_repository(split_out):
    source, scopes, out = split_out
    assert [r["root"] for r in out["repositories"]] == ROOTS
    for root in ROOTS:
        before, after = versions(source, root), versions(scopes / root, root)
        notes = {(p, b) for p, b in before if not p.endswith("/MEMORY.md")}
        assert notes <= after, (root, notes - after)
        assert {(p, b) for p, b in after if not p.endswith("/MEMORY.md")} == notes
        # the views too, each version as it was (the split renders only the top-level view)
        assert before <= after


def test_no_scope_repository_holds_a_byte_of_another_roots_text(split_out):
    _source, scopes, _out = split_out
    for root in ROOTS:
        data = every_byte(scopes / root)
        for other, texts in TEXTS.items():
            for text in texts:
                assert (text.encode() in data) == (other == root), (root, other, text)
        assert b"99-ZEBRA-1717" not in data


def test_holds_and_receipts_are_kept_where_they_belong(split_out):
    source, scopes, out = split_out
    by_root = {r["root"]: r for r in out["repositories"]}
    holds = [ref.split("refs/heads/")[1] for ref in subprocess.run(
        ["git", "-C", str(source), "for-each-ref", "--format=%(refname)", "refs/heads/review/"],
        capture_output=True, text=True).stdout.split()]
    assert len(holds) == 1
    assert by_root["team/payments"]["holds"] == holds
    assert all(not by_root[r]["holds"] for r in ROOTS if r != "team/payments")
    with MemoryRepo.open(scopes / "team/payments", embedder="none") as repo:
        [item] = repo.review_list(as_user="alice")
        assert "scanner" in item.to_dict()["note"]["text"]
    receipt = (source / "audit/erasures.jsonl").read_bytes()
    for root in ROOTS:
        assert (scopes / root / "audit/erasures.jsonl").read_bytes() == reduce_receipts(receipt, root)
        assert receipt_ids(reduce_receipts(receipt, root).decode()) == receipt_ids(receipt.decode())


def test_each_scope_repository_names_only_its_own_notes_for_review_in_the_receipts(tmp_path):
    """An erasure of a person names, in its receipt, the notes still mentioning them: paths, which
    say a subject and a key. Split, each repository keeps every receipt but only its own paths."""
    source = tmp_path / "old"
    with MemoryRepo.init(source, teams={"payments": ["alice", "bob"], "search": ["carol"]}, erasers=["dana"],
                         as_user="dana", now="2026-10-01T09:00:00Z", embedder="none") as repo:
        repo.remember("Escalations go to alice after hours", as_user="bob", kind="fact", subject="service:billing",
                      key="escalation.owner", scope="team", team="payments", now="2026-10-01T09:00:00Z")
        repo.remember("Alice is moving to Lisbon in spring", as_user="alice", kind="fact", subject="user:alice",
                      key="move", now="2026-10-01T09:00:00Z")
        repo.remember("Reindex nightly", as_user="carol", kind="fact", subject="service:search", key="reindex",
                      scope="team", team="search", now="2026-10-01T09:00:00Z")
        receipt = repo.forget(as_user="dana", owner="alice", now="2026-10-02T09:00:00Z")
        assert "team/payments/service/billing/fact/escalation.owner.md" in receipt.mentions_for_review
        repo.remember("Skunkworks acquisition closes in May", as_user="carol", kind="fact",
                      subject="project:skunkworks", key="close", scope="team", team="search",
                      now="2026-10-02T09:00:00Z")
        repo.forget(as_user="dana", subject="project:skunkworks", now="2026-10-03T09:00:00Z")
        repo.remember("Search shards rebalance weekly", as_user="carol", kind="fact", subject="service:search",
                      key="shards", scope="team", team="search", new_key=True, now="2026-10-03T09:00:00Z")
    subprocess.run(["git", "-C", str(source), "tag", "-a", "skunkworks-signed", "-m",
                    "release notes for team/search/service/search/fact/shards.md"], check=True)
    r = cli("split", "--to", str(tmp_path / "scopes"), "--as", "dana", cwd=source)
    assert r.returncode == 0, r.stderr
    search = (tmp_path / "scopes/team/search/audit/erasures.jsonl").read_text()
    assert receipt.id in search and "team/payments/" not in search and "escalation.owner" not in every_byte(
        tmp_path / "scopes/team/search").decode("utf-8", "replace")
    for root in ("team/payments", "private/alice"):  # another root's subject and tag reach no other repository
        data = every_byte(tmp_path / "scopes" / root).decode("utf-8", "replace")
        assert "skunkworks" not in data, root
    payments = (tmp_path / "scopes/team/payments/audit/erasures.jsonl").read_text()
    assert "team/payments/service/billing/fact/escalation.owner.md" in payments


def test_each_scope_repository_declares_only_what_governs_it_and_stays_trusted(split_out):
    _source, scopes, out = split_out
    for root in ROOTS:
        with MemoryRepo.open(scopes / root, embedder="none") as repo:
            scope, name = root.split("/")
            assert list(repo.config.teams) == ([name] if scope == "team" else [])
            assert repo.verify(as_user="dana" if scope == "team" else name)["untrusted"] == []
            good, bad = repo.check()
            assert bad == [] and repo.stale_views() == []
    text = (scopes / "private/alice/mdmem.toml").read_text()
    assert "payments" not in text and "carol" not in text and "bob" not in text
    assert "search" not in (scopes / "team/payments/mdmem.toml").read_text()
    assert {p: sorted(r) for p, r in out["people"].items()} == {
        "alice": ["private/alice", "team/payments"], "bob": ["private/bob", "team/ops", "team/payments"],
        "carol": ["private/carol", "team/ops", "team/search"],
        "dana": ["private/dana", "team/ops", "team/payments", "team/search"]}


def test_reduce_config_keeps_a_version_that_does_not_parse_as_it_was():
    assert reduce_config(b"[teams\nbroken", "team/payments") == b"[teams\nbroken"


def test_someone_not_an_admin_splits_only_the_roots_they_may_read(split_out, tmp_path):
    source, _scopes, _ = split_out
    with MemoryRepo.open(source, embedder="none") as repo:
        with pytest.raises(Refused, match=r"split: bob may split only the roots they may read "
                                          r"\(private/bob, team/ops, team/payments\); private/alice needs a config admin"):
            split(source, tmp_path / "out", as_user="bob", roots=["private/alice"], config=repo.config)
        assert not (tmp_path / "out").exists()
        mine = split(source, tmp_path / "out", as_user="bob", config=repo.config)
    assert [r.root for r in mine] == ["private/bob", "team/ops", "team/payments"]


def test_split_into_a_folder_holding_a_scope_repository_already_is_refused(split_out, tmp_path):
    source, scopes, _ = split_out
    r = cli("split", "--to", str(scopes), "--as", "dana", cwd=source)
    assert r.returncode == 2 and "already exist and are not empty" in r.stderr


def test_split_and_push_to_a_host_gives_each_person_exactly_their_repositories(githost, tmp_path):
    ns = githost.namespace()
    source = old_memory(tmp_path / "old")
    r = cli("host", "rules", "--gitolite", "--prefix", ns, "--apply", githost.admin_url,
            "--as", "dana", cwd=source, env=githost.env("admin"))
    assert r.returncode == 0, r.stderr
    r = cli("split", "--to", str(tmp_path / "dana"), "--push", githost.address, "--prefix", ns, "--as", "dana",
            "--json", cwd=source, env=githost.env("dana"))
    # dana (an eraser) splits every root but may push only the repositories the host lets her write:
    # each refusal is named, the others are pushed
    assert r.returncode == 9, r.stderr
    out = json.loads(r.stdout)
    assert sorted(line.split(":")[0] for line in out["not_pushed"]) == ["private/alice", "private/bob", "private/carol"]
    assert "DENIED" in out["not_pushed"][0]
    assert {x["root"] for x in out["repositories"] if x["pushed"]} == {"private/dana", "team/ops", "team/payments",
                                                                      "team/search"}
    # each owner splits and pushes their own private root from their copy of the old repository
    for person in ("alice", "bob", "carol"):
        r = cli("split", "--to", str(tmp_path / f"own-{person}"), "--root", f"private/{person}", "--push",
                githost.address, "--prefix", ns, "--as", person, cwd=source, env=githost.env(person))
        assert r.returncode == 0, r.stderr
    for root in ROOTS:
        clone = tmp_path / "bob" / root
        got = githost.git("bob", "clone", "-q", githost.url(f"{ns}/{root}"), str(clone), check=False)
        assert (got.returncode == 0) == (root in ("private/bob", "team/ops", "team/payments")), (root, got.stderr)
    data = every_byte(tmp_path / "bob")
    assert BOB_PRIVATE.encode() in data and PAYMENTS.encode() in data
    for text in (ALICE_OLD, ALICE_NEW, SEARCH):
        assert text.encode() not in data
