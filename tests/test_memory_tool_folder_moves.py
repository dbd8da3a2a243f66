"""Claude's memory tool renaming a folder: every file in it is judged before the first moves, so
a refusal leaves the folder as it was (no half-moved folder the model was told failed)."""
import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818RenameCommand

from conftest import T0, git
from mdmem import MemoryRepo
from mdmem.interop.memory_tool import MdmemMemoryTool


def test_a_folder_rename_refused_for_one_of_its_files_moves_none_of_them(repo):
    toml = repo.root / "mdmem.toml"
    toml.write_text(toml.read_text().replace("[trust]\n", '[trust]\nagent_kinds = ["decision", "fact"]\n'))
    git(repo.root, "-c", "user.name=mdmem", "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "trust")
    with MemoryRepo.open(repo.root) as fresh:
        # A keyed note sorting before an episode in the same folder: the episode cannot move.
        fresh.remember("Use Postgres for the ledger", as_user="alice", kind="decision", subject="user:alice",
                       key="ledger.db", now=T0)
        fresh.remember("We met and chose Postgres", as_user="alice", kind="episode", subject="user:alice", now=T0)
        head = git(repo.root, "rev-parse", "HEAD").stdout
        tool = MdmemMemoryTool(fresh, as_user="alice", agent="claude", now="2026-10-01T10:00:00Z")
        with pytest.raises(ToolError, match="is an episode"):
            tool.execute(BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/user",
                                                             new_path="/memories/people"))
        assert git(repo.root, "rev-parse", "HEAD").stdout == head
        assert git(repo.root, "for-each-ref", "refs/heads/review").stdout == ""
        assert (repo.root / "private/alice/user/alice/decision/ledger.db.md").exists()
