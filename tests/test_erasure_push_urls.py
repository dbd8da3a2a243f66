"""`forget --push` says "erased" for a remote only when every place the push went serves none of
the erased objects: a remote with its own push URLs (git's `remote.<name>.pushurl`, one or
several) is asked at each of them, not only at the URL fresh clones fetch from."""
import json

from conftest import T0, TEAMS, git, run_cli, shared_remote

from mdmem import MemoryRepo

SECRET = "Escalations after hours: call Alice at 555-0173"


def test_forget_push_asks_every_push_url_of_a_remote_before_saying_erased(tmp_path):
    root = tmp_path / "mem"
    with MemoryRepo.init(root, teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember(SECRET, as_user="bob", kind="fact", subject="service:billing", key="escalation",
                      scope="team", team="payments", now=T0)
    guarded = shared_remote(root, tmp_path, "bob", guard=True)
    # A mirror the same remote also pushes to (no guard there): git pushes to both URLs.
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(guarded), str(mirror))
    git(root, "remote", "set-url", "--add", "--push", "origin", str(guarded))
    git(root, "remote", "set-url", "--add", "--push", "origin", str(mirror))
    old_head = git(root, "rev-parse", "HEAD").stdout.strip()
    out = run_cli("forget", "--text", "555-0173", "--push", "--repo", str(root), "--as", "dana", "--json")
    assert git(mirror, "cat-file", "-e", old_head, check=False).returncode == 0  # the mirror still serves it
    assert out.returncode == 11, (out.stdout, out.stderr)
    status = json.loads(out.stdout)["remotes"]["origin"]
    assert status.startswith("NOT erased"), status
