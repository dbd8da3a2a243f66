"""A repository copied or restored elsewhere: every file has a new inode, so git's index stat
data no longer matches and libgit2's status hashes every note on every call, never writing the
index back (~0.6 s more per CLI call at 10k notes). The first scan refreshes the stat data once
(storage/queries.refresh_stat_if_moved); nothing is staged, a hand edit still counts."""
import os
import shutil

from conftest import git, git_status, team_fact

from mdmem import MemoryRepo


def index_inodes(root) -> dict[str, int]:
    """path -> the inode git's index recorded for it (`git ls-files --debug` refreshes nothing)."""
    out, path = {}, None
    for line in git(root, "ls-files", "--debug").stdout.splitlines():
        if not line.startswith((" ", "\t")):
            path = line
        elif "ino:" in line and path is not None:
            out[path] = int(line.split("ino:")[1].split()[0])
    return out


def test_a_copied_repository_gets_its_stat_data_refreshed_once(repo, tmp_path):
    team_fact(repo, "Billing deploys on Tuesdays after the standup", key="deploy.window", new_key=True)
    team_fact(repo, "The ledger database is Postgres 16", key="ledger.db", new_key=True)
    repo.close()
    copy = tmp_path / "copy"
    shutil.copytree(repo.root, copy, symlinks=True)
    notes = [p for p in index_inodes(copy) if p.startswith("team/") and not p.endswith("MEMORY.md")]
    edited, unchanged = sorted(notes)[:2]
    assert all(index_inodes(copy)[p] != os.stat(copy / p).st_ino for p in notes)  # stale after the copy
    # A hand edit made in the copy before mdmem looks at it: found, and never staged.
    (copy / edited).write_text((copy / edited).read_text().replace("Billing deploys", "Billing now deploys"))

    moved = MemoryRepo.open(copy)
    hits = moved.recall("when does billing now deploy", as_user="bob")
    moved.close()

    assert any("Billing now deploys" in h.text for h in hits)
    assert index_inodes(copy)[unchanged] == os.stat(copy / unchanged).st_ino  # refreshed
    assert git(copy, "diff", "--cached", "--name-only").stdout == ""  # nothing staged
    assert git_status(copy).split() == ["M", edited]
    # Refreshed once: the marker names this work tree, the original's is untouched.
    marker = copy / ".git" / "mdmem" / "worktree-id"
    st = os.stat(copy)
    assert marker.read_text() == f"{st.st_dev} {st.st_ino}\n"
