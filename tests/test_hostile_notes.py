"""One hostile note, committed by anyone with push access, costs at most that note.

Each hostile note is committed with plain git (--no-verify skips our hook, as an attacker
would), then another user's recall, check, rebuild and writes must go on. The CLI runs in
a subprocess under resource limits, so a regression fails the test instead of the machine.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ENV, T0, git, git_status, run_cli, team_fact

from mdmem import MemoryRepo, NoteInvalid
from mdmem.errors import BadInput
from mdmem.model.kinds import Contracts
from mdmem.model.note import DEFAULT_MAX_BYTES, parse_note
from mdmem.model.validate import validate_note

DIR = "team/payments/service/billing/fact"

HEAD = """---
id: 01JDQ6Z4V4K3Y8N1XQ2W5T7RZC
kind: fact
subject: service:billing
scope: team
team: payments
owner: bob
source: user
valid_from: 2026-10-01T09:00:00Z
"""


def note_text(key: str, extra: str = "", body: str = "Hostile note body.") -> str:
    return f"{HEAD}key: {key}\n{extra}---\n{body}\n"


def alias_bomb(key: str) -> str:
    # The billion-laughs shape, 9 levels of 9 aliases: ~400 M strings if expanded.
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return f"{HEAD}key: {key}\n" + "\n".join(lines) + "\nderived_from: *a8\n---\nbomb\n"


def deep(key: str, levels: int = 999) -> str:
    return f"{HEAD}key: " + "[" * levels + "]" * levels + f"\n---\n{key}\n"


def make_hostile(root, kind: str) -> str:
    """Write one hostile note into the work tree; returns its path."""
    key = f"hostile.{kind}"
    path = f"{DIR}/{key}.md"
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    if kind == "devzero":
        os.symlink("/dev/zero", full)
    elif kind == "alias":
        full.write_text(alias_bomb(key))
    elif kind == "deep":
        full.write_text(deep(key))
    elif kind == "huge":
        with open(full, "w") as f:
            f.write(note_text(key, body="x" * 1000))
            f.write(("billing deploy window " * 40 + "\n") * 2600)  # ~50 MB
    elif kind == "fifo":
        os.mkfifo(full)
    elif kind == "types":
        full.write_text(note_text(key).replace(f"key: {key}", "key: {nested: [1, 2]}"))
    return path


def commit_as_attacker(root, message="hostile") -> None:
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=mallory", "-c", "user.email=m@x",
                    "commit", "-q", "--no-verify", "-m", message], check=True)


# --- parsing --------------------------------------------------------------------------

def test_an_alias_bomb_is_refused_before_it_expands():
    with pytest.raises(NoteInvalid) as exc:
        parse_note(f"{DIR}/b.md", alias_bomb("b"))
    assert exc.value.field == "frontmatter" and "aliases" in exc.value.reason


def test_a_single_anchor_is_refused_too():
    with pytest.raises(NoteInvalid, match="anchors"):
        parse_note(f"{DIR}/b.md", note_text("b", extra="derived_from: &x []\n"))


def test_deep_nesting_is_refused_not_a_recursion_error():
    with pytest.raises(NoteInvalid, match="nested deeper"):
        parse_note(f"{DIR}/d.md", deep("d"))
    with pytest.raises(NoteInvalid):  # libyaml's own limit answers first here
        parse_note(f"{DIR}/d.md", deep("d", 100_000))


@pytest.mark.parametrize("extra,field", [
    ("team: [payments]\n", "team"),
    ("derived_from: {a: 1}\n", "derived_from"),
    ("valid_until: [1, 2]\n", "valid_until"),
])
def test_field_types_are_checked_before_use(extra, field):
    text = note_text("x").replace("team: payments\n", "") if field == "team" else note_text("x")
    with pytest.raises(NoteInvalid) as exc:
        validate_note(f"{DIR}/x.md", text.replace("---\nHostile", extra + "---\nHostile"), Contracts())
    assert exc.value.field == field


def test_a_mapping_key_is_refused_and_a_number_key_is_read_as_text():
    with pytest.raises(NoteInvalid) as exc:
        parse_note(f"{DIR}/x.md", note_text("x").replace("key: x", "key: {a: 1}"))
    assert exc.value.field == "key"
    assert parse_note(f"{DIR}/2026.md", note_text("2026")).key == "2026"


def test_the_size_cap_applies_to_parsing():
    body = "y" * (DEFAULT_MAX_BYTES + 1)
    with pytest.raises(NoteInvalid, match="at most 262144 bytes"):
        parse_note(f"{DIR}/x.md", note_text("x", body=body))
    assert parse_note(f"{DIR}/x.md", note_text("x", body=body), max_bytes=1 << 20).text == body


def test_unclosed_frontmatter_names_the_problem():
    with pytest.raises(NoteInvalid, match="not closed"):
        parse_note(f"{DIR}/x.md", HEAD + "key: x\nbody without a closing line\n")


# --- in a repo ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["devzero", "alias", "deep", "huge", "fifo", "types"])
def test_one_hostile_note_costs_only_itself(repo, kind):
    team_fact(repo, "Billing deploys any weekday before 3pm")
    path = make_hostile(repo.root, kind)
    if kind != "fifo":  # git cannot commit a FIFO; it sits in the work tree
        commit_as_attacker(repo.root)
    repo = MemoryRepo.open(repo.root)
    hits = repo.recall("when does billing deploy", as_user="alice", now=T0)
    assert hits and hits[0].text == "Billing deploys any weekday before 3pm"
    assert path in repo.index.broken()
    good, bad = repo.check()
    assert [b.path for b in bad] == [path] and len(good) == 1
    with pytest.raises(NoteInvalid):
        repo.get(as_user="alice", path=path, now=T0)
    # Writes to the same root still work, and keys lists the good note only.
    team_fact(repo, "Refunds take 30 days", key="refund.window", new_key=True)
    assert {k.key for k in repo.keys(as_user="bob", subject="service:billing", kind="fact", now=T0)} \
        == {"deploy.window", "refund.window"}
    assert repo.reindex(rebuild=True).broken.keys() == {path}
    repo.close()


def test_a_symlinked_folder_is_not_followed(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text(note_text("x"))
    team = repo.root / "team/payments/service/leak"
    team.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, team)
    with pytest.raises(NoteInvalid, match="symbolic link"):
        repo.get(as_user="bob", path="team/payments/service/leak/x.md", now=T0)
    assert repo.check() == ([], [])  # not walked into


def test_a_write_over_a_symlinked_folder_replaces_the_link_not_its_target(repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    link = repo.root / "team/payments/service/billing"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, link)
    commit_as_attacker(repo.root)
    team_fact(repo, "Billing deploys any weekday before 3pm")
    assert list(outside.iterdir()) == []
    assert not link.is_symlink() and (link / "fact/deploy.window.md").is_file()


def test_an_import_over_symlinked_folders_writes_every_note_into_real_folders(repo, tmp_path):
    """One commit's files share their folders' checks (gitstore: each folder made sure of once
    per commit): a link met on the first note's way is replaced before any note goes there,
    and the rest of the batch follows into the real folder, never the link's target."""
    outside = tmp_path / "outside"
    (outside / "fact").mkdir(parents=True)
    links = [repo.root / "team/payments/service/billing", repo.root / "team/payments/service/ledger/fact"]
    for link in links:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(outside if link.name == "billing" else outside / "fact", link)
    commit_as_attacker(repo.root)
    items = [dict(text=f"Note {i} about {subject}", kind="fact", subject=f"service:{subject}", key=f"k.{i}",
                  scope="team", team="payments", new_key=True)
             for i in range(6) for subject in ("billing", "ledger")]
    result = repo.remember_many(items, as_user="bob", now=T0)
    assert len(result.committed) == 12 and len(result.commits) == 1
    assert list(outside.rglob("*.md")) == []
    for link in links:
        assert not link.is_symlink() and len(list(link.rglob("*.md"))) == 6
    assert git(repo.root, "status", "--porcelain").stdout == ""


def test_a_write_over_the_cap_is_refused_with_the_setting_named(repo):
    with pytest.raises(BadInput, match=r"max_bytes"):
        team_fact(repo, "z" * (DEFAULT_MAX_BYTES + 10))
    (repo.root / "mdmem.toml").write_text((repo.root / "mdmem.toml").read_text() + "\n[notes]\nmax_bytes = 1024\n")
    # committed by the repo's admin (its founder): an uncommitted edit takes no effect
    git(repo.root, "-c", "user.email=mdmem@mdmem.invalid", "commit", "-qam", "smaller notes", "--no-verify")
    small = MemoryRepo.open(repo.root)
    with pytest.raises(BadInput, match="at most 1024 bytes"):
        team_fact(small, "z" * 1200)


def test_the_cap_setting_is_checked(repo):
    (repo.root / "mdmem.toml").write_text((repo.root / "mdmem.toml").read_text() + "\n[notes]\nmax_bytes = \"big\"\n")
    with pytest.raises(BadInput, match="notes.max_bytes"):
        MemoryRepo.open(repo.root)


LIMITED = r"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
from mdmem.cli.main import main
started = time.monotonic()
code = main(sys.argv[1:])
print(f"\nRESULT {code} {time.monotonic() - started:.3f} "
      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
sys.exit(code)
"""


def limited_cli(*args):
    proc = subprocess.run([sys.executable, "-c", LIMITED, *args], capture_output=True, text=True, timeout=120)
    line = [x for x in proc.stderr.splitlines() if x.startswith("RESULT")]
    assert line, proc.stderr[-2000:]
    _, code, secs, rss_kb = line[-1].split()
    return proc, int(code), float(secs), int(rss_kb) / 1024


def test_recall_and_check_under_resource_limits_with_every_hostile_note(repo):
    team_fact(repo, "Billing deploys any weekday before 3pm")
    root = str(repo.root)
    run_cli("index", "--repo", root)
    _, code, _, clean_mb = limited_cli("recall", "billing deploy", "--as", "alice", "--repo", root, "--now", T0)
    assert code == 0
    for kind in ("devzero", "alias", "deep", "huge", "types"):
        make_hostile(repo.root, kind)
    commit_as_attacker(repo.root)
    proc, code, secs, mb = limited_cli("recall", "billing deploy", "--as", "alice", "--repo", root, "--now", T0)
    assert code == 0 and "Billing deploys any weekday" in proc.stdout, proc.stderr
    assert mb < clean_mb + 100, (clean_mb, mb)
    proc, code, _, _ = limited_cli("check", "--repo", root)
    assert code == 2 and proc.stderr.count("hostile.") == 5, proc.stderr


def test_conflict_markers_make_a_note_invalid_but_a_setext_heading_does_not():
    hunk = "<<<<<<< HEAD\nBilling deploys before 2pm\n=======\nBilling deploys before 4pm\n>>>>>>> origin/main"
    with pytest.raises(NoteInvalid, match="conflict markers"):
        parse_note(f"{DIR}/k.md", note_text("k", body=hunk))
    with pytest.raises(NoteInvalid, match="conflict markers"):  # a conflict inside the frontmatter too
        parse_note(f"{DIR}/k.md", "<<<<<<< HEAD\n" + note_text("k") + "=======\n" + note_text("j") + ">>>>>>> b\n")
    assert parse_note(f"{DIR}/k.md", note_text("k", body="Title\n=======\nquoted: <<<<<<< not a hunk")).text


@pytest.mark.parametrize("where", ["private/dana", "team/payments/MEMORY.md"])
def test_a_file_where_a_folder_belongs_or_the_reverse_costs_nothing_but_a_check_problem(tmp_path, where):
    """One plain-git commit of private/dana as a file (or a root's MEMORY.md as a
    folder) made every write, startup and render of that root crash (exit 70)."""
    repo = MemoryRepo.init(tmp_path / "mem", teams={"payments": ["alice", "bob", "dana"]}, now=T0, as_user="alice")
    team_fact(repo, "Billing deploys any weekday before 3pm")
    full = repo.root / where
    if where.endswith("MEMORY.md"):
        full.unlink()
        full.mkdir()
        (full / "x").write_text("x")
    else:
        full.parent.mkdir(exist_ok=True)
        full.write_text("file\n")
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qm", "hostile", "--no-verify"], check=True)
    root = repo.root
    repo.close()
    check = run_cli("check", "--repo", str(root))
    assert check.returncode == 2 and f"{where}: path: must be" in check.stderr, check.stderr
    for args in (["remember", "Dana prefers morning meetings", "--kind", "profile", "--subject", "user:dana",
                  "--key", "meetings", "--as", "dana"],
                 ["remember", "Billing deploys on weekdays", "--kind", "fact", "--subject", "service:billing",
                  "--key", "deploy.window", "--scope", "team", "--team", "payments", "--as", "bob"],
                 ["startup", "--as", "dana"], ["render", "--as", "bob"], ["recall", "deploy", "--as", "bob"]):
        r = run_cli(*args, "--repo", str(root))
        assert r.returncode == 0 and "bug in mdmem" not in r.stderr, (args, r.stderr)
    # the pre-commit hook refuses to commit one
    bad = root / "private" / "erin"
    bad.write_text("file\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    out = subprocess.run(["git", "-C", str(root), "commit", "-qm", "again"], capture_output=True, text=True)
    assert out.returncode != 0 and "private/erin: path: must be a folder" in out.stderr


def test_hostile_file_names_are_printed_escaped_on_one_line(tmp_path):
    """Check and the forget plan printed committed file names raw, so a name could
    write terminal escapes (OSC 52, clear screen) or fake a line of output."""
    repo = MemoryRepo.init(tmp_path / "mem", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                           now=T0, as_user="alice")
    r = team_fact(repo, "Billing deploys any weekday before 3pm")
    original = (repo.root / r.path).read_text()
    evil = repo.root / DIR / "evil\x1b]52;c;aGVsbG8=\x07\x1b[2J.md"
    evil.write_text(original)
    fake = repo.root / DIR / "deploy.window.md\nx"
    fake.mkdir()
    (fake / "k.md").write_text(original)
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "commit", "-qm", "hostile", "--no-verify"], check=True)
    root = repo.root
    repo.close()
    check = run_cli("check", "--repo", str(root))
    assert check.returncode == 2
    assert "\x1b" not in check.stderr + check.stdout and "\x07" not in check.stderr
    assert f"{DIR}/deploy.window.md\n" not in check.stderr  # the newline is shown, never obeyed
    plan = run_cli("forget", "--path", f"{DIR}/deploy.window.md", "--dry-run", "--as", "dana", "--repo", str(root))
    lines = plan.stdout.splitlines()
    assert not [ln for ln in lines if ln.strip() == "x/k.md" or ln.startswith("x/k.md")], plan.stdout
    assert "\x1b" not in plan.stdout + plan.stderr


def test_a_folder_committed_at_a_view_path_leaves_gits_index_consistent(repo):
    """A view path
    holding a folder in HEAD (committed by hand with --no-verify) is replaced by mdmem's next
    write with the rendered file, in the commit and the work tree, but _sync_worktree
    (storage/) only `index.add`s the view's path: git's index keeps the folder's
    entries under it (`team/payments/MEMORY.md/a`). `git status` is then not clean (`AD`)
    and the next plain `git commit` of anything fails: "You have both
    team/payments/MEMORY.md and team/payments/MEMORY.md/a ... Error building trees"."""
    team_fact(repo, "first")
    root = repo.root
    git(root, "rm", "-q", "team/payments/MEMORY.md")
    (root / "team/payments/MEMORY.md").mkdir()
    (root / "team/payments/MEMORY.md/a").write_text("a folder where the view belongs\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-m", "a folder at the view's path")
    assert team_fact(repo, "second", key="other.window", new_key=True).status == "committed"
    assert git(root, "ls-tree", "HEAD", "team/payments/MEMORY.md").stdout.startswith("100644 blob")
    assert git_status(root) == ""
    (root / "unrelated.txt").write_text("x\n")
    git(root, "add", "unrelated.txt")
    git(root, "commit", "-q", "--no-verify", "-m", "a person's commit")  # fails: the index is broken


# The caches lived in the work tree (.mdmem/), which a commit can fill or replace by a
# symlink: a committed verify.json laundered an untrusted edit, a committed index served fake
# text, a .mdmem symlink made every clone write (and delete) outside the repo. They live in
# .git/mdmem/ now, where no commit writes.
def test_a_committed_cache_folder_is_never_read(two_teams, tmp_path):
    root = two_teams.root
    note = "team/payments/service/billing/fact/deploy.window.md"
    two_teams.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact", subject="service:billing",
                  key="deploy.window", scope="team", team="payments", now=T0)
    assert (root / ".git" / "mdmem" / "verify.json").exists() or (root / ".git" / "mdmem" / "state.json").exists()
    assert not (root / ".mdmem").exists()
    # carol (no payments member) edits the note, and commits a verify.json that says bob did.
    path = root / note
    path.write_text(path.read_text().replace("any weekday before 3pm", "only on Sundays, per carol"))
    git(root, "-c", "user.name=carol", "-c", "user.email=carol@mdmem.invalid", "commit", "-qam", "carol edits",
        "--no-verify")
    c1 = git(root, "rev-parse", "HEAD").stdout.strip()
    forged = root / ".mdmem"
    forged.mkdir()
    (forged / "verify.json").write_text(
        '{"version": 4, "head": "%s", "touch": {"%s": ["%s", "bob@mdmem.invalid"]}, "fm": {}, "sig": {}, '
        '"deleted": {}, "config": null, "config_base": null, "founder": null}' % (c1, note, c1))
    git(root, "add", "-f", ".mdmem")
    git(root, "-c", "user.name=carol", "-c", "user.email=carol@mdmem.invalid", "commit", "-qm", "tidy", "--no-verify")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(root), str(fresh))
    with MemoryRepo(fresh, embedder="none") as repo:
        flags = {f["path"]: f for f in repo.verify()["untrusted"]}
        assert flags[note]["reason"] == "committer"
        assert repo.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window").untrusted


def test_a_cache_symlink_committed_by_a_teammate_sends_nothing_outside(two_teams, tmp_path):
    victim = tmp_path / "victimdata"
    (victim / "fulltext").mkdir(parents=True)
    (victim / "fulltext" / "keep.txt").write_text("keep")
    (two_teams.root / ".mdmem").symlink_to(victim)
    git(two_teams.root, "add", "-f", ".mdmem")
    git(two_teams.root, "-c", "user.name=carol", "-c", "user.email=carol@mdmem.invalid", "commit", "-qm", "tidy",
        "--no-verify")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(two_teams.root), str(fresh))
    r = run_cli("recall", "reindexes", "--as", "carol", env=ENV, cwd=fresh)
    assert r.returncode == 0 and "reindex" in r.stdout, (r.stdout, r.stderr)
    assert sorted(p.name for p in victim.rglob("*")) == ["fulltext", "keep.txt"]


# The hooks, forget and housekeeping ran `python -m mdmem...` with the work tree as cwd: a
# `mdmem/` package a teammate committed at the repo root ran instead of the installed one.
def test_a_committed_mdmem_package_never_runs(two_teams, tmp_path):
    marker = tmp_path / "pwned"
    evil = two_teams.root / "mdmem"
    (evil / "cli").mkdir(parents=True)
    (evil / "storage").mkdir()
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for name in ("__init__.py", "cli/__init__.py", "cli/main.py", "storage/__init__.py", "storage/housekeeping.py"):
        (evil / name).write_text(payload)
    git(two_teams.root, "add", "mdmem")
    git(two_teams.root, "-c", "user.email=carol@mdmem.invalid", "commit", "-qm", "tools", "--no-verify")
    # (the test runs the CLI as `python -m` from elsewhere; people run the `mdmem` script)
    assert run_cli("hooks", "install", "--repo", str(two_teams.root), "--as", "bob", env=ENV, cwd=tmp_path).returncode == 0
    note = two_teams.root / "team" / "search" / "service" / "search" / "fact" / "reindex.md"
    note.write_text(note.read_text().replace("nightly", "hourly"))
    committed = git(two_teams.root, "-c", "user.email=carol@mdmem.invalid", "commit", "-qam", "by hand", check=False)
    assert committed.returncode == 0, committed.stderr
    r = run_cli("forget", "--path", "private/alice/user/alice/profile/phone.md", "--repo", str(two_teams.root), "--as",
                "alice", env=ENV, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import os
    here = os.getcwd()
    os.chdir(two_teams.root)  # housekeeping inherits the cwd: a CLI write run inside the repo
    try:
        two_teams.store.housekeep_in_background().wait(timeout=60)
    finally:
        os.chdir(here)
    assert not marker.exists(), marker.read_text()
