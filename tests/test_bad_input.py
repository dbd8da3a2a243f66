"""Bad input is refused before anything is written, with an error naming what is wrong: TTLs under a
second, NUL characters, a retirement before validity, a huge recall query, a reserved key,
arguments a command would ignore."""
from __future__ import annotations

import time

import pytest
from conftest import DEPLOY, ENV, T0, git, run_cli

from mdmem.errors import BadInput


# A ttl of 0 (or under a second) wrote `expires_at: null`: a working note that never expires,
# past the agent's ttl cap.
@pytest.mark.parametrize("ttl", ["0s", "0", "-0s", "1e-9s", 0])
def test_a_ttl_under_a_second_is_refused(two_teams, ttl):
    for channel, source in (("human", "user"), ("agent", "agent:claude")):
        with pytest.raises(BadInput, match="ttl: .* under a second"):
            two_teams.remember("zero ttl", as_user="bob", kind="working", subject="user:bob", key="z0", ttl=ttl,
                          source=source, channel=channel, now=T0)
    assert not (two_teams.root / "private" / "bob").exists()


# A NUL in a note made git call it binary: diffs and reviews hid its text.
@pytest.mark.parametrize("field", ["text", "context"])
def test_a_nul_character_is_refused(two_teams, field):
    args = {"text": "Billing deploys on Tuesdays", "context": "the previous turn"}
    args[field] = args[field] + "\x00 hidden"
    head = git(two_teams.root, "rev-parse", "HEAD").stdout
    with pytest.raises(BadInput, match=f"{field}: holds a NUL"):
        two_teams.remember(args["text"], context=args["context"], as_user="bob", kind="episode", subject="service:billing",
                      scope="team", team="payments", now=T0)
    assert git(two_teams.root, "rev-parse", "HEAD").stdout == head


# `retire --valid-until` before the note's valid_from committed an invalid note: check
# failed from then on, the fact left recall, and no later retire could undo it.
def test_retire_before_valid_from_is_refused_and_nothing_is_written(billing_team):
    root = billing_team.root
    before = git(root, "rev-parse", "HEAD").stdout
    r = run_cli("retire", DEPLOY, "--valid-until", "2000-01-01T00:00:00Z", "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 2 and "valid_until" in r.stderr and "valid_from" in r.stderr, (r.stdout, r.stderr)
    assert git(root, "rev-parse", "HEAD").stdout == before and git(root, "status", "--porcelain").stdout == ""
    assert run_cli("check", env=ENV, cwd=root).returncode == 0
    r = run_cli("retire", DEPLOY, "--as", "bob", env=ENV, cwd=root)
    assert r.returncode == 0, r.stderr


# No limit on a recall query's length: 200,000 words took minutes of CPU under the lock
# every recall shares.
def test_a_huge_recall_query_is_refused_at_once(billing_team):
    import time

    start = time.monotonic()
    r = run_cli("recall", "deploy " * 15_000, "--as", "bob", env=ENV, cwd=billing_team.root)
    assert r.returncode == 2 and "query:" in r.stderr and "at most" in r.stderr, r.stderr
    assert time.monotonic() - start < 30
    from mdmem.errors import BadInput

    with pytest.raises(BadInput, match="query"):
        billing_team.recall("x" * 4001, as_user="bob", now=T0)
    assert billing_team.recall("deploy " * 500, as_user="bob", now=T0)  # a long but sane query still answers


@pytest.mark.parametrize("extra", [["--scope", "private", "--team", "payments"],
                                   ["--scope", "team", "--team", "payments", "--owner", "alice"]])
def test_remember_refuses_arguments_it_would_ignore(repo, extra):
    """`--scope private --team payments` writes a private note (the team is dropped without a word)
    and `--owner alice` on a team note writes owner: bob: a typo'd scope puts a team fact where no
    teammate sees it. Expected: exit 2 naming the argument that does not apply."""
    r = run_cli("remember", "Billing deploys any weekday", "--kind", "fact", "--subject", "service:billing",
                "--key", "deploy.window", *extra, "--as", "bob", "--repo", str(repo.root))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)


def test_a_reserved_key_is_named_as_the_problem(repo):
    """--key MEMORY is refused with 'team/payments/.../fact/MEMORY.md: not a note path
    (team/<team>/... or private/<owner>/..., ending in .md)' -- a path that is under team/ and ends
    in .md; the message should name the key and say MEMORY is reserved for views."""
    r = run_cli("remember", "x", "--kind", "fact", "--subject", "service:billing", "--key", "MEMORY",
                "--scope", "team", "--team", "payments", "--new-key", "--as", "bob", "--repo", str(repo.root))
    assert r.returncode == 2
    assert "key" in r.stderr.split(":")[1] or "reserved" in r.stderr, r.stderr


@pytest.mark.parametrize("k", [0, "3", None, 2.5, True])
def test_a_bad_number_of_hits_is_refused_and_the_index_stays(billing_team, k):
    """A k that is not a whole number raised TypeError inside recall, which read as a damaged
    index: it was moved aside and rebuilt."""
    from mdmem.storage.gitdir import cache_dir

    billing_team.recall("deploy", as_user="bob", now=T0)
    before = sorted(p.name for p in cache_dir(billing_team.root).iterdir())
    with pytest.raises(BadInput, match="^k: "):
        billing_team.recall("deploy", as_user="bob", now=T0, k=k)
    assert sorted(p.name for p in cache_dir(billing_team.root).iterdir()) == before


def test_a_recall_with_too_many_or_too_long_tags_is_refused_at_once(billing_team):
    """Each tag is a term looked up under the lock every recall shares: 80,000 in one call held
    the other recalls ~4 s each."""
    started = time.monotonic()
    with pytest.raises(BadInput, match="tags: 80,000 given; a recall filters by at most 32"):
        billing_team.recall("deploy", as_user="bob", tags=[f"t{i}" for i in range(80_000)])
    with pytest.raises(BadInput, match="tags: a tag of 5,000 characters"):
        billing_team.recall("deploy", as_user="bob", tags=["x" * 5000])
    assert time.monotonic() - started < 1.0
    billing_team.recall("deploy", as_user="bob", tags=[f"t{i}" for i in range(32)])  # at the bound: asked


def test_an_erasure_of_too_many_texts_is_refused_before_the_write_lock(billing_team):
    """Each text is searched for in every version of every file under the write lock: 2,500 in
    one call (a dry run too) held every writer for 30 s."""
    texts = [f"distinctive-token-number-{i:06d}" for i in range(2_500)]
    head = git(billing_team.root, "rev-parse", "HEAD").stdout
    for dry_run in (True, False):
        with pytest.raises(BadInput, match="--text: 2,500 given; one erasure scrubs at most 100"):
            billing_team.forget(as_user="dana", texts=texts, dry_run=dry_run)
    assert git(billing_team.root, "rev-parse", "HEAD").stdout == head
