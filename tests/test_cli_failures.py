"""Every failure is an exit code and one line: no tracebacks for huge durations,
far dates, non-UTF-8 arguments, lone surrogates or a closed pipe; terminal escapes in note
text are shown, never executed, and never reach MEMORY.md."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import T0, run_cli, team_fact

from mdmem.errors import BadInput

ESC_TEXT = "Deploys \x1b[31mRED\x1b[0m and \x1b]52;c;ZXZpbA==\x07 clip \u202eevil\r done"


def cli_bytes(*args: bytes, cwd=None):
    """The CLI with raw byte arguments (what a shell passes for a non-UTF-8 file name)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable.encode(), b"-m", b"mdmem.cli.main", *args], capture_output=True,
                          env=env, cwd=cwd)


def one_line_error(proc, code):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def remember_args(repo, *extra):
    return ("remember", "Billing deploys any weekday", "--kind", "working", "--subject", "service:billing",
            "--key", "deploy.window", "--as", "bob", "--repo", str(repo.root), "--now", T0, *extra)


@pytest.mark.parametrize("extra", [
    ("--ttl", "99999999999d"), ("--ttl", "1e400s"), ("--ttl=-5m",),
    ("--valid-from", "9999-12-31T23:59:59Z"), ("--valid-from", "0001-01-01T00:00:00+14:00"),
])
def test_huge_durations_and_far_dates_are_bad_input(repo, extra):
    err = one_line_error(run_cli(*remember_args(repo, *extra)), 2)
    assert "ttl" in err or "valid_from" in err


def test_a_non_utf8_argument_is_bad_input_naming_it(repo):
    proc = cli_bytes(b"recall", b"caf\xe9 deploy", b"--as", b"bob", b"--repo", str(repo.root).encode())
    err = one_line_error(proc, 2)
    assert "argument 2" in err and "UTF-8" in err


def test_a_lone_surrogate_through_the_api_is_bad_input(repo):
    with pytest.raises(BadInput, match="text: not valid Unicode"):
        team_fact(repo, "Billing \ud800 deploys")
    with pytest.raises(BadInput, match="query"):
        repo.recall("deploy \udcff", as_user="bob")


def test_a_closed_pipe_is_not_an_error(repo):
    for i in range(30):
        team_fact(repo, f"Billing deploy rule number {i} " + "words " * 40, key=f"k{i}", new_key=True)
    root = str(repo.root)
    proc = subprocess.run(f"{sys.executable} -m mdmem.cli.main recall 'billing deploy rule' -k 30 "
                          f"--as bob --repo {root} --now {T0} | head -c 10; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert proc.returncode in (0, 141) and "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_terminal_escapes_are_shown_not_sent(repo):
    r = team_fact(repo, ESC_TEXT)
    proc = run_cli("get", r.path, "--as", "bob", "--repo", str(repo.root), "--now", T0)
    assert proc.returncode == 0, proc.stderr
    for raw in ("\x1b", "\x07", "\u202e", "\r"):
        assert raw not in proc.stdout
    assert "\\x1b[31mRED" in proc.stdout and "\\x1b]52;c;" in proc.stdout and "\\u202e" in proc.stdout
    proc = run_cli("recall", "billing deploys red", "--as", "bob", "--repo", str(repo.root), "--now", T0)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "\\x1b" in proc.stdout
    # JSON keeps the text exactly, escaped the JSON way.
    proc = run_cli("get", r.path, "--as", "bob", "--repo", str(repo.root), "--now", T0, "--json")
    assert "\x1b" not in proc.stdout and "\\u001b" in proc.stdout


def test_memory_views_never_hold_control_characters(repo):
    team_fact(repo, ESC_TEXT)
    for view in repo.root.rglob("MEMORY.md"):
        data = view.read_text()
        assert not any(ch in data for ch in ("\x1b", "\x07", "\u202e", "\r")), view
    assert "\\x1b[31mRED" in (repo.root / "team/payments/MEMORY.md").read_text()
    startup = repo.startup(as_user="bob", now=T0)
    assert "\x1b" not in startup


def write_notes(repo, n):
    """``n`` notes committed in one import (no index built yet)."""
    from mdmem.model.layout import keyed_path
    from mdmem.model.note import Note
    from mdmem.model.clock import parse_time
    for i in range(n):
        note = Note(id=f"01JDQ6Z4V4K3Y8N1XQ2W5T{i:04d}", kind="fact", subject=f"service:s{i % 20}", key=f"k{i}",
                    scope="team", team="payments", owner="bob", source="user", valid_from=parse_time(T0),
                    text=f"Rule {i}: billing deploys in window {i % 13}")
        path = repo.root / keyed_path("team/payments", note.subject, "fact", note.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(note.dumps())
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "-c", "user.name=bob", "-c", "user.email=bob@mdmem.invalid",
                    "commit", "-qm", "import", "--no-verify"], check=True)


def test_an_implicit_index_build_shows_progress_on_stderr(repo):
    write_notes(repo, 120)
    env = {"MDMEM_EMBEDDER": "none"}
    proc = run_cli("recall", "billing deploy window", "--as", "bob", "--repo", str(repo.root), "--now", T0, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "mdmem: reading notes: 120 to do" in proc.stderr  # not a TTY: a line, not a bar
    proc = run_cli("recall", "billing deploy window", "--as", "bob", "--repo", str(repo.root), "--now", T0, "--json",
                   env=env)
    assert proc.returncode == 0 and "to do" not in proc.stderr  # built: nothing to report


def test_a_corrupt_git_object_is_a_git_failure_not_a_traceback(repo):
    r = repo.remember("Bob deploys billing on Mondays", as_user="bob", kind="fact", subject="service:billing",
                      key="deploy.window", now=T0)  # private: bob may erase it himself
    obj = repo.root / ".git" / "objects" / r.version[:2] / r.version[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"garbage")
    proc = run_cli("history", r.path, "--as", "bob", "--repo", str(repo.root))
    err = one_line_error(proc, 9)
    assert "failed to inflate" in err or "corrupt" in err, err


def test_the_ttl_bound_names_a_value_that_parses():
    """The message for a too-long ttl suggests a maximum written in units the parser accepts."""
    import re

    from mdmem.errors import BadInput
    from mdmem.model.clock import parse_duration

    with pytest.raises(BadInput) as e:
        parse_duration("999999d")
    suggested = re.search(r"between 0 and (\S+)", str(e.value)).group(1)
    assert parse_duration(suggested).days == 365000
