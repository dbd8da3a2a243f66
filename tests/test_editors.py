"""The editor's loop: notes from Obsidian-style editors (tags, aliases) are kept and usable;
`check` lists every problem at once, YAML errors with line and column; `new` scaffolds a
note in $EDITOR; `ls` and `show` browse what you may see."""
import json
import stat
import subprocess
import sys

from conftest import T0, T1, run_cli, team_fact

from mdmem.model.kinds import Contracts
from mdmem.model.validate import note_problems

PATH = "team/payments/service/billing/fact/refund.window.md"
OBSIDIAN = """---
id: 01JDQ6Z4V4K3Y8N1XQ2W5T7RZC
kind: fact
subject: service:billing
key: refund.window
scope: team
team: payments
owner: bob
source: user
valid_from: 2026-10-01T09:00:00Z
tags: [billing, SLO]
aliases:
  - Refund policy
cssclasses: wide
---
Refunds within 30 days.
"""


def git(root, *args):
    r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


def hand_commit(repo, path, text):
    full = repo.root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    git(repo.root, "config", "user.name", "Bob")
    git(repo.root, "config", "user.email", "bob@mdmem.invalid")  # bob's default identity: a permitted writer
    git(repo.root, "add", path)
    git(repo.root, "commit", "-qm", "from my editor")


def test_editor_fields_are_kept_round_tripped_and_shown(repo):
    team_fact(repo, "Billing deploys any weekday", key="deploy.window")
    hand_commit(repo, PATH, OBSIDIAN)
    assert run_cli("check", "--repo", str(repo.root)).returncode == 0
    got = repo.get(as_user="dana", path=PATH, now=T1)
    assert got.note.tags == ["billing", "slo"] and got.note.extra["aliases"] == ["Refund policy"]
    # mdmem's own writes keep them: a supersede and a retire.
    team_fact(repo, "Refunds within 45 days", key="refund.window", now=T1)
    text = (repo.root / PATH).read_text()
    assert "Refunds within 45 days" in text and "- Refund policy" in text and "cssclasses: wide" in text
    assert "billing" in text and "SLO" in text
    repo.retire(as_user="bob", path=PATH, now=T1)
    assert "cssclasses: wide" in (repo.root / PATH).read_text()
    out = run_cli("show", PATH, "--repo", str(repo.root), "--as", "dana", "--json")
    shown = json.loads(out.stdout)
    extra = shown["note"]["extra"]
    assert extra["aliases"] == ["Refund policy"] and extra["cssclasses"] == "wide"
    assert shown["live"] is False  # retired: show still shows it
    out = run_cli("show", PATH, "--repo", str(repo.root), "--as", "dana")
    assert "aliases: ['Refund policy']" in out.stdout and "not live now" in out.stdout


def test_tags_filter_recall(repo):
    team_fact(repo, "Refund requests are answered within a day", key="refund.sla", new_key=True)
    hand_commit(repo, PATH, OBSIDIAN)
    hits = repo.recall("refunds", as_user="dana", now=T1, tags=["billing"])
    assert [h.path for h in hits] == [PATH]
    assert repo.recall("refunds", as_user="dana", now=T1, tags=["billing", "nope"]) == []
    assert len(repo.recall("refunds", as_user="dana", now=T1)) == 2
    out = run_cli("recall", "refunds", "--tag", "slo", "--repo", str(repo.root), "--as", "dana", "--json",
                  "--now", T1)
    assert [h["path"] for h in json.loads(out.stdout)["hits"]] == [PATH]
    # History recall filters too (now: the hand commit was made at the real time).
    hits = repo.recall("refunds", as_user="dana", tags=["billing"], include_history=True)
    assert {h.path for h in hits} == {PATH}


def test_check_lists_every_problem_of_a_note_at_once(repo):
    broken = "---\nkind: bogus\nsubject: service:billing\nkey: refund.window\nscope: team\nteam: payments\n---\nx\n"
    problems = dict(note_problems(PATH, broken, Contracts()))
    assert {"id", "owner", "source", "valid_from", "kind"} <= set(problems)
    (repo.root / PATH).parent.mkdir(parents=True)
    (repo.root / PATH).write_text(broken)
    out = run_cli("check", "--repo", str(repo.root))
    assert out.returncode == 2
    for field in ("id", "owner", "source", "valid_from", "kind"):
        assert f"{PATH}: {field}: " in out.stderr, field
    data = json.loads(run_cli("check", "--repo", str(repo.root), "--json").stdout)
    [invalid] = data["invalid"]
    assert len(invalid["problems"]) >= 5


# `show` of a note with several bad fields printed them on one line joined by a literal "\n".
def test_an_error_about_several_bad_fields_prints_one_problem_a_line(repo):
    team_fact(repo, "Refunds within 30 days", key="refund.window")
    note = repo.root / PATH
    note.write_text(note.read_text().replace("owner: bob", "owner: 42").replace("scope: team", "scope: 7"))
    out = run_cli("show", PATH, "--as", "bob", "--repo", str(repo.root))
    assert out.returncode == 2 and "\\n" not in out.stderr, out.stderr
    assert out.stderr.splitlines() == [f"mdmem: {PATH}: scope: must be a string, got int",
                                       f"mdmem: {PATH}: owner: must be a string, got int"]


def test_broken_yaml_names_line_and_column(repo):
    text = OBSIDIAN.replace("tags: [billing, SLO]", "tags: [billing, SLO")
    problems = note_problems(PATH, text, Contracts())
    [(field, reason)] = problems
    # libyaml notices the unclosed list where the next field starts.
    assert field == "frontmatter" and "line 12, column 8" in reason, reason
    (repo.root / PATH).parent.mkdir(parents=True)
    (repo.root / PATH).write_text(text)
    out = run_cli("check", "--repo", str(repo.root))
    assert out.returncode == 2 and "YAML does not parse at line 12, column 8" in out.stderr


def _editor(tmp_path, body: str | None):
    """An $EDITOR that replaces the scaffold's placeholder (or leaves it) and records what it saw."""
    script = tmp_path / "editor.py"
    seen = tmp_path / "seen.md"
    from mdmem.ops.scaffold import PLACEHOLDER
    replace = "" if body is None else f"text = text.replace({PLACEHOLDER!r}, {body!r})\n"
    script.write_text("import sys, pathlib\n"
                      "p = pathlib.Path(sys.argv[1]); text = p.read_text()\n"
                      f"pathlib.Path({str(seen)!r}).write_text(text)\n" + replace + "p.write_text(text)\n")
    wrapper = tmp_path / "editor.sh"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper), seen


def test_new_opens_the_editor_on_a_scaffold_with_every_required_field(repo, tmp_path):
    editor, seen = _editor(tmp_path, "Refunds within 30 days.")
    out = run_cli("new", "--kind", "fact", "--subject", "service:billing", "--key", "refund.window", "--scope",
                  "team", "--team", "payments", "--tag", "billing", "--repo", str(repo.root), "--as", "bob",
                  "--now", T0, env={"EDITOR": editor})
    assert out.returncode == 0, out.stderr
    scaffold = seen.read_text()
    for field in ("id", "kind", "subject", "key", "scope", "team", "owner", "source", "valid_from", "tags"):
        assert f"\n{field}:" in scaffold, field
    assert note_problems(PATH, (repo.root / PATH).read_bytes(), Contracts()) == []
    # The loop closes with plain git: the hook checks it and the view follows.
    git(repo.root, "config", "user.name", "Bob")
    git(repo.root, "config", "user.email", "bob@mdmem.invalid")
    git(repo.root, "add", PATH)
    git(repo.root, "commit", "-qm", "new note")
    assert "Refunds within 30 days." in (repo.root / "team/payments/MEMORY.md").read_text()


def test_new_discards_an_untouched_scaffold_and_refuses_what_you_may_not_write(repo, tmp_path):
    editor, _ = _editor(tmp_path, None)
    out = run_cli("new", "--kind", "fact", "--subject", "service:billing", "--key", "refund.window",
                  "--repo", str(repo.root), "--as", "bob", env={"EDITOR": editor})
    assert out.returncode == 0 and "discarded" in out.stdout
    assert not (repo.root / "private/bob").exists()
    out = run_cli("new", "--kind", "fact", "--subject", "service:search", "--key", "engine", "--scope", "team",
                  "--team", "search", "--repo", str(repo.root), "--as", "bob", env={"EDITOR": editor})
    assert out.returncode == 3
    out = run_cli("new", "--kind", "fact", "--subject", "service:billing", "--repo", str(repo.root), "--as", "bob",
                  env={"EDITOR": editor})
    assert out.returncode == 2 and "--key" in out.stderr


def test_ls_and_show_follow_the_visibility_rule(repo):
    team_fact(repo, "Billing deploys any weekday")
    repo.remember("Alice's own note", as_user="alice", kind="fact", subject="user:alice", key="private", now=T0)
    repo.remember("Carol's search fact", as_user="carol", kind="fact", subject="service:search", key="engine",
                  scope="team", team="search", now=T0)
    mine = json.loads(run_cli("ls", "--repo", str(repo.root), "--as", "alice", "--json").stdout)
    assert {r["path"] for r in mine} == {"team/payments/service/billing/fact/deploy.window.md",
                                         "private/alice/user/alice/fact/private.md"}
    bobs = json.loads(run_cli("ls", "--repo", str(repo.root), "--as", "bob", "--json").stdout)
    assert {r["path"] for r in bobs} == {"team/payments/service/billing/fact/deploy.window.md"}
    only = json.loads(run_cli("ls", "--kind", "fact", "--subject", "service:billing", "--root", "team/payments",
                              "--repo", str(repo.root), "--as", "dana", "--json").stdout)
    assert len(only) == 1
    assert run_cli("ls", "--root", "private/alice", "--repo", str(repo.root), "--as", "bob").returncode == 6
    assert run_cli("show", "private/alice/user/alice/fact/private.md", "--repo", str(repo.root),
                   "--as", "bob").returncode == 6
    assert run_cli("show", "team/search/service/search/fact/engine.md", "--repo", str(repo.root),
                   "--as", "dana").returncode == 6
    out = run_cli("show", "private/alice/user/alice/fact/private.md", "--repo", str(repo.root), "--as", "alice")
    assert out.returncode == 0 and "Alice's own note" in out.stdout


def test_new_keeps_what_you_typed_when_the_placeholder_line_is_left(repo, tmp_path):
    """Text typed below the placeholder was thrown away with exit 0."""
    from mdmem.ops.scaffold import PLACEHOLDER

    editor, _ = _editor(tmp_path, PLACEHOLDER + "\nRefunds take 30 days.")
    out = run_cli("new", "--kind", "fact", "--subject", "service:billing", "--key", "refund.window",
                  "--repo", str(repo.root), "--as", "bob", env={"EDITOR": editor})
    assert out.returncode == 2 and "placeholder" in out.stderr
    kept = repo.root / "private/bob/service/billing/fact/refund.window.md"
    assert "Refunds take 30 days." in kept.read_text()


def test_a_hand_commit_by_an_unknown_identity_is_told_why_its_note_leaves_the_view(repo, tmp_path):
    """The note silently dropped out of the views; only `mdmem verify` said why."""
    editor, _ = _editor(tmp_path, "A refund costs a 2 EUR fee")
    out = run_cli("new", "--kind", "fact", "--subject", "service:billing", "--key", "refund.fee", "--scope",
                  "team", "--team", "payments", "--repo", str(repo.root), "--as", "bob", env={"EDITOR": editor})
    assert out.returncode == 0, out.stderr
    git(repo.root, "config", "user.name", "T")
    git(repo.root, "config", "user.email", "t@x.invalid")
    git(repo.root, "add", "-A")
    commit = subprocess.run(["git", "-C", str(repo.root), "commit", "-qm", "fee"], capture_output=True, text=True)
    assert commit.returncode == 0
    assert "<t@x.invalid> is no mdmem user" in commit.stderr and "refund.fee" in commit.stderr
