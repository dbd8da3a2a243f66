"""Claude's memory tool backed by mdmem, called with the SDK's own command types (no network):
every command a commit through the gate as agent:<label>, held writes answered, history kept,
delete = retire, and every path that escapes /memories refused in the tool's error form."""
import os
import re

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import (BetaMemoryTool20250818CreateCommand, BetaMemoryTool20250818DeleteCommand,
                                  BetaMemoryTool20250818InsertCommand, BetaMemoryTool20250818RenameCommand,
                                  BetaMemoryTool20250818StrReplaceCommand, BetaMemoryTool20250818ViewCommand)

from conftest import T0, git
from mdmem import MemoryRepo
from mdmem.errors import Conflict, Refused
from mdmem.interop.memory_tool import MdmemMemoryTool

T = "2026-10-01T10:00:00Z"


def view(path, view_range=None):
    return BetaMemoryTool20250818ViewCommand(command="view", path=path, view_range=view_range)


def create(path, text):
    return BetaMemoryTool20250818CreateCommand(command="create", path=path, file_text=text)


def replace(path, old, new):
    return BetaMemoryTool20250818StrReplaceCommand(command="str_replace", path=path, old_str=old, new_str=new)


def trust_agent_facts(repo):
    """[trust] agent_kinds = ["fact", ...] committed by an admin: the agent writes facts itself."""
    toml = repo.root / "mdmem.toml"
    toml.write_text(toml.read_text().replace("[trust]\n", '[trust]\nagent_kinds = ["fact", "episode", "working"]\n'))
    git(repo.root, "-c", "user.name=mdmem", "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "trust")


@pytest.fixture
def tool(repo):
    trust_agent_facts(repo)
    fresh = MemoryRepo.open(repo.root)
    yield MdmemMemoryTool(fresh, as_user="alice", agent="claude", now=T)
    fresh.close()


def log_of(repo, path):
    return git(repo.root, "log", "--format=%B%x00", "--", path).stdout.split("\x00")


def test_create_view_edit_insert_are_commits_by_the_agent_with_history_kept(tool):
    assert tool.call({"command": "view", "path": "/memories"}).startswith(
        "Here're the files and directories up to 2 levels deep in /memories")
    out = tool.execute(create("/memories/preferences/coffee.md", "Alice drinks flat whites.\nNo sugar."))
    assert out.startswith("File created successfully at: /memories/preferences/coffee.md")
    listing = tool.execute(view("/memories"))
    assert "/memories/preferences/" in listing
    line = next(x for x in listing.splitlines()[1:] if x.split("\t")[1] == "/memories/preferences/coffee.md")
    assert line.split("\t")[2] == "fact, valid from 2026-10-01T10:00:00Z"
    assert tool.execute(view("/memories/preferences/coffee.md")) == (
        "Here's the content of /memories/preferences/coffee.md with line numbers:\n"
        "     1\tAlice drinks flat whites.\n     2\tNo sugar.")
    assert tool.execute(view("/memories/preferences/coffee.md", [2, -1])).endswith("     2\tNo sugar.")
    out = tool.execute(replace("/memories/preferences/coffee.md", "flat whites", "oat flat whites"))
    assert "     1\tAlice drinks oat flat whites." in out
    tool.execute(BetaMemoryTool20250818InsertCommand(command="insert", path="/memories/preferences/coffee.md",
                                                     insert_line=2, insert_text="Decaf after 3pm.\n"))
    assert tool.execute(view("/memories/preferences/coffee.md")).splitlines()[1:] == [
        "     1\tAlice drinks oat flat whites.", "     2\tNo sugar.", "     3\tDecaf after 3pm."]
    stored = tool.repo.get(as_user="alice", subject="user:alice", kind="fact", key="preferences.coffee", now=T)
    assert stored.path == "private/alice/user/alice/fact/preferences.coffee.md"
    messages = [m for m in log_of(tool.repo, stored.path) if m.strip()]
    assert len(messages) == 3  # create, replace, insert: one commit each, every version in history
    assert all("Memory-Source: agent:claude" in m and "Memory-Actor: alice" in m for m in messages)
    first = git(tool.repo.root, "log", "--reverse", "--format=%H", "--", stored.path).stdout.split()[0]
    assert "Alice drinks flat whites." in git(tool.repo.root, "show", f"{first}:{stored.path}").stdout


def test_str_replace_errors_are_the_tools_and_nothing_is_written(tool):
    tool.execute(create("/memories/a.md", "one two one"))
    head = git(tool.repo.root, "rev-parse", "HEAD").stdout
    with pytest.raises(ToolError, match="did not appear verbatim"):
        tool.execute(replace("/memories/a.md", "three", "x"))
    with pytest.raises(ToolError, match=r"Multiple occurrences of old_str `one` in lines: 1, 1"):
        tool.execute(replace("/memories/a.md", "one", "x"))
    with pytest.raises(ToolError, match="already exists"):
        tool.execute(create("/memories/a.md", "again"))
    with pytest.raises(ToolError, match="is a file, not a directory"):
        tool.execute(create("/memories/a.md/b.md", "under a file"))
    with pytest.raises(ToolError, match="Invalid `insert_line`"):
        tool.execute(BetaMemoryTool20250818InsertCommand(command="insert", path="/memories/a.md", insert_line=9,
                                                         insert_text="x"))
    with pytest.raises(ToolError, match="Invalid `view_range`"):
        tool.execute(view("/memories/a.md", [3, 1]))
    assert git(tool.repo.root, "rev-parse", "HEAD").stdout == head


# A file the model created with CRLF was stored with its CRs, and its first str_replace was
# refused as an uncommitted edit (exit 5's Conflict) though git status was clean.
def test_a_file_created_with_crlf_is_edited_with_crlf_or_lf(tool):
    tool.execute(create("/memories/deploy.md", "Deploys on Tuesday.\r\nNever on Fridays.\r\n"))
    tool.execute(replace("/memories/deploy.md", "Tuesday.\r\nNever", "Monday.\r\nNever"))
    tool.execute(replace("/memories/deploy.md", "Monday.\nNever on Fridays.", "Monday.\nNever on Sundays."))
    assert tool.execute(view("/memories/deploy.md")).splitlines()[1:] == [
        "     1\tDeploys on Monday.", "     2\tNever on Sundays."]
    assert git(tool.repo.root, "status", "--porcelain").stdout == ""


def test_delete_retires_and_rename_moves_keeping_history(tool):
    tool.execute(create("/memories/todo.md", "Ship the importer"))
    tool.execute(create("/memories/old/name.md", "Billing deploys on Tuesdays"))
    out = tool.execute(BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/todo.md"))
    assert out.startswith("Successfully deleted /memories/todo.md") and "not erased" in out
    assert "/memories/todo.md" not in tool.execute(view("/memories"))
    path = "private/alice/user/alice/fact/todo.md"
    shown = tool.repo.show(as_user="alice", path=path)  # still there, ended: erasure is a person's act
    assert shown.note.valid_until is not None and shown.note.text == "Ship the importer"
    out = tool.execute(BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/old",
                                                           new_path="/memories/new"))
    assert "Successfully renamed /memories/old/name.md to /memories/new/name.md" in out
    listing = tool.execute(view("/memories"))
    assert "/memories/new/name.md" in listing and "/memories/old" not in listing
    assert tool.execute(view("/memories/new/name.md")).endswith("Billing deploys on Tuesdays")
    with pytest.raises(ToolError, match="does not exist"):
        tool.execute(view("/memories/old/name.md"))


def test_rename_is_one_commit_moving_the_note_with_its_history(tool):
    """A rename is a move: one commit by the agent that removes the old path and adds the new
    one (git sees a rename, `git log --follow` walks through it), and mdmem's history of the
    new path holds every version from before the move."""
    tool.execute(create("/memories/old.md", "Billing deploys on Tuesdays"))
    tool.execute(replace("/memories/old.md", "Tuesdays", "Wednesdays"))
    old = "private/alice/user/alice/fact/old.md"
    head = git(tool.repo.root, "rev-parse", "HEAD").stdout.strip()
    out = tool.execute(BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/old.md",
                                                           new_path="/memories/renamed.md"))
    assert out.startswith("Successfully renamed /memories/old.md to /memories/renamed.md")
    commits = git(tool.repo.root, "rev-list", f"{head}..HEAD").stdout.split()
    assert len(commits) == 1
    new = tool.repo.get(as_user="alice", subject="user:alice", kind="fact", key="renamed", now=T).path
    changed = git(tool.repo.root, "show", "--find-renames", "--name-status", "--format=%B", "HEAD",
                  "--", "private").stdout
    assert re.search(rf"^R\d+\t{re.escape(old)}\t{re.escape(new)}$", changed, re.M), changed
    assert "Memory-Op: move" in changed and "Memory-Source: agent:claude" in changed
    assert f"Memory-Moved-From: {old}" in changed
    assert not (tool.repo.root / old).exists()
    followed = git(tool.repo.root, "log", "--follow", "--format=%s", "--", new).stdout.splitlines()
    assert len(followed) == 3  # create, str_replace, rename
    versions = tool.repo.history(as_user="alice", path=new)
    assert [v.op for v in versions] == ["move", "supersede", "create"]
    assert [v.path for v in versions] == [new, old, old]
    assert versions[-1].note.text == "Billing deploys on Tuesdays"
    assert versions[0].note.id == versions[-1].note.id  # the same note, not a copy


def test_a_held_rename_answers_the_model_and_moves_only_when_approved(repo):
    """Without [trust] for agents' facts the move waits for review: the model is told so, the
    note stays where it was, and approving it makes the one-commit move."""
    repo.remember("Alice's locker is 12", as_user="alice", kind="fact", subject="user:alice", key="locker", now=T0)
    tool = MdmemMemoryTool(repo, as_user="alice", now=T)
    head = git(repo.root, "rev-parse", "HEAD").stdout
    out = tool.execute(BetaMemoryTool20250818RenameCommand(
        command="rename", old_path="/memories/user/alice/fact/locker.md", new_path="/memories/gym/locker.md"))
    assert "held for a person's review (review id " in out and "stays where it is until then" in out
    assert git(repo.root, "rev-parse", "HEAD").stdout == head
    assert "Alice's locker is 12" in tool.execute(view("/memories/user/alice/fact/locker.md"))
    [item] = repo.review_list(as_user="alice")
    assert item.moved_from == "private/alice/user/alice/fact/locker.md" and item.channel == "agent"
    assert item.note.extra["memory_path"] == "gym/locker.md"
    repo.approve(item.review_id, as_user="alice", now=T)
    assert tool.execute(view("/memories/gym/locker.md")).endswith("Alice's locker is 12")
    with pytest.raises(ToolError, match="does not exist"):
        tool.execute(view("/memories/user/alice/fact/locker.md"))
    assert len(git(repo.root, "rev-list", f"{head.strip()}..HEAD").stdout.split()) == 1
    versions = repo.history(as_user="alice", path=item.path)
    assert [v.op for v in versions] == ["approve", "create"]


def test_a_held_rename_is_refused_on_approval_when_the_note_changed_since(repo):
    repo.remember("Alice's locker is 12", as_user="alice", kind="fact", subject="user:alice", key="locker", now=T0)
    tool = MdmemMemoryTool(repo, as_user="alice", now=T)
    tool.execute(BetaMemoryTool20250818RenameCommand(
        command="rename", old_path="/memories/user/alice/fact/locker.md", new_path="/memories/gym.md"))
    repo.remember("Alice's locker is 14", as_user="alice", kind="fact", subject="user:alice", key="locker", now=T)
    [item] = repo.review_list(as_user="alice")
    with pytest.raises(Conflict, match="changed since version"):
        repo.approve(item.review_id, as_user="alice", now=T)
    assert repo.get(as_user="alice", subject="user:alice", kind="fact", key="locker", now=T).note.text == \
        "Alice's locker is 14"


def test_a_held_write_answers_the_model_with_what_happened(repo):
    """The gate's default is closed: without [trust] agent_kinds an agent's fact waits for review."""
    tool = MdmemMemoryTool(repo, as_user="alice", now=T)
    out = tool.execute(create("/memories/coffee.md", "Alice drinks flat whites"))
    assert "held for a person's review (review id " in out and "mdmem review approve" in out
    assert "(held for review " in tool.execute(view("/memories"))
    with pytest.raises(ToolError, match="does not exist"):
        tool.execute(view("/memories/coffee.md"))
    item = repo.review_list(as_user="alice")[0]
    assert item.note.source == "agent:claude" and item.note.extra["memory_path"] == "coffee.md"


def test_a_persons_notes_show_at_their_place_and_a_team_root_needs_membership(repo):
    repo.remember("Deploy on Tuesdays", as_user="bob", kind="fact", subject="service:billing", key="deploy",
                  scope="team", team="payments", now=T0)
    tool = MdmemMemoryTool(repo, as_user="bob", team="payments", now=T)
    assert "/memories/service/billing/" in tool.execute(view("/memories"))  # two levels deep, as the SDK's
    assert "/memories/service/billing/fact/deploy.md\tfact, valid from" in tool.execute(view("/memories/service/billing"))
    assert tool.execute(view("/memories/service/billing/fact/deploy.md")).endswith("Deploy on Tuesdays")
    out = tool.execute(replace("/memories/service/billing/fact/deploy.md", "Tuesdays", "Fridays"))
    assert "held for a person's review" in out  # an agent's write into a team root waits for a teammate
    with pytest.raises(Refused):
        MdmemMemoryTool(repo, as_user="carol", team="payments")


@pytest.mark.parametrize("path", ["/memories/../secret.md", "/memories/a/../../x.md", "/etc/passwd", "/memoriesX/a.md",
                                  "memories/a.md", "/memories/./a.md", "/memories//a.md", "/memories/a\\..\\b.md",
                                  "/memories/a\x00.md", "/memories/a\n.md", "/memories/" + "a" * 400])
def test_paths_that_escape_memories_are_refused_in_the_tools_form(tool, path):
    head = git(tool.repo.root, "rev-parse", "HEAD").stdout
    for command in (view(path), create(path, "x"), replace(path, "a", "b"),
                    BetaMemoryTool20250818DeleteCommand(command="delete", path=path),
                    BetaMemoryTool20250818RenameCommand(command="rename", old_path=path, new_path="/memories/z.md"),
                    BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/z.md", new_path=path)):
        with pytest.raises(ToolError):
            tool.execute(command)
    assert git(tool.repo.root, "rev-parse", "HEAD").stdout == head


def test_symlinks_in_the_root_are_refused(tool, tmp_path):
    outside = tmp_path / "outside"
    (outside / "fact").mkdir(parents=True)
    (outside / "fact" / "x.md").write_text("secret outside the repo")
    folder = tool.repo.root / "private" / "alice" / "user"
    folder.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, folder / "evil")
    with pytest.raises(ToolError, match="symlink"):
        tool.execute(view("/memories/user/evil/fact/x.md"))
    with pytest.raises(ToolError, match="symlink"):
        tool.execute(view("/memories/user/evil"))
    with pytest.raises(ToolError, match="symlink"):
        tool.execute(create("/memories/user/evil/fact/y.md", "x"))
    assert "secret" not in tool.execute(view("/memories"))
    assert not (outside / "fact" / "y.md").exists()


def test_the_sdk_runner_turns_a_tool_error_into_an_error_result(tool):
    """What a tool runner sends back: the SDK's own call() path, from the model's JSON input."""
    with pytest.raises(ToolError) as info:
        tool.call({"command": "view", "path": "/memories/../../etc/passwd"})
    assert "escape /memories" in str(info.value.content)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}


def test_an_agents_delete_of_a_note_it_may_not_write_itself_waits_for_review(repo):
    """Retiring is a write: over the agent channel the gate judges it like the agent's write of
    that note (a person's fact in their private root: held), and nothing ends until approved."""
    repo.remember("Alice's locker is 12", as_user="alice", kind="fact", subject="user:alice", key="locker", now=T0)
    tool = MdmemMemoryTool(repo, as_user="alice", now=T)
    out = tool.execute(BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/user/alice/fact/locker.md"))
    assert "held for a person's review" in out
    assert repo.get(as_user="alice", subject="user:alice", kind="fact", key="locker", now=T).note.valid_until is None
    [item] = repo.review_list(as_user="alice")
    assert item.note.valid_until is not None and item.channel == "agent"
    repo.approve(item.review_id, as_user="alice", now=T)  # in her private root the owner approves
    with pytest.raises(ToolError, match="does not exist"):
        tool.execute(view("/memories/user/alice/fact/locker.md"))
    assert repo.show(as_user="alice", path="private/alice/user/alice/fact/locker.md").note.valid_until is not None


def test_a_chosen_subject_narrows_memories_to_its_notes(tool):
    tool.repo.remember("Alice's own note", as_user="alice", kind="fact", subject="user:alice", key="own", now=T0)
    web = MdmemMemoryTool(tool.repo, as_user="alice", subject="project:web", now=T)
    web.execute(create("/memories/stack.md", "Next.js and Postgres"))
    listing = web.execute(view("/memories"))
    assert "/memories/stack.md\tfact" in listing and "own" not in listing
    stored = tool.repo.get(as_user="alice", subject="project:web", kind="fact", key="stack", now=T)
    assert stored.note.text == "Next.js and Postgres"
    assert "/memories/user/" in tool.execute(view("/memories"))  # the whole root, without a subject


@pytest.mark.parametrize("path", ["/memories/a\x85b.md", "/memories/\u202egnp.md", "/memories/a\u2028b.md",
                                  "/memories/\x9b31mred.md", "/memories/notes/a\u200eb.md"])
def test_names_with_c1_controls_bidi_overrides_or_line_separators_are_refused(tool, path):
    """A name that shows as another one (NEL vanishes, an override reverses it) in the listing
    the model gets and the review a person reads is refused like any control character."""
    head = git(tool.repo.root, "rev-parse", "HEAD").stdout
    with pytest.raises(ToolError, match="not a valid memory path"):
        tool.execute(create(path, "x"))
    assert git(tool.repo.root, "rev-parse", "HEAD").stdout == head
    assert tool.repo.review_list(as_user="alice") == []


def test_rename_never_puts_a_file_below_a_file_or_a_folder_into_itself(tool):
    tool.execute(create("/memories/a.md", "file a"))
    tool.execute(create("/memories/b.md", "file b"))
    tool.execute(create("/memories/d/c.md", "file c"))
    head = git(tool.repo.root, "rev-parse", "HEAD").stdout
    for old, new, says in [("/memories/b.md", "/memories/a.md/inner.md", "is a file"),
                           ("/memories/a.md", "/memories/a.md/x.md", "is a file|into itself"),
                           ("/memories/d", "/memories/d/e", "into itself")]:
        with pytest.raises(ToolError, match=says):
            tool.execute(BetaMemoryTool20250818RenameCommand(command="rename", old_path=old, new_path=new))
    assert git(tool.repo.root, "rev-parse", "HEAD").stdout == head
    assert "file a" in tool.execute(view("/memories/a.md"))


def test_in_a_workspace_the_tool_writes_into_the_mounted_repository_of_its_root(tmp_path):
    """A person's agent in a workspace: /memories maps onto their private root's own repository;
    a root not mounted is refused naming it."""
    from workspace_helpers import team_of_three, workspace

    ws = workspace(tmp_path, "alice", team_of_three(tmp_path), ["team/payments", "private/alice"])
    try:
        tool = MdmemMemoryTool(ws, as_user="alice", now=T)
        out = tool.execute(create("/memories/coffee.md", "Alice drinks flat whites"))
        assert "held for a person's review" in out  # the gate's default: an agent's fact waits
        (item,) = ws.review_list(as_user="alice")
        assert item.note.extra["memory_path"] == "coffee.md" and item.note.owner == "alice"
        # the hold is a branch of alice's private repository, nowhere else
        assert f"review/{item.review_id}" in git(ws.clone_path("private/alice"), "branch", "--list", "review/*").stdout
        assert "review/" not in git(ws.clone_path("team/payments"), "branch", "--list", "review/*").stdout
        with pytest.raises(Refused, match="team/search is not mounted"):
            MdmemMemoryTool(ws, as_user="alice", scope="team", team="search", now=T)
    finally:
        ws.close()
