"""`mdmem hooks claude-code`: settings.json gets Claude Code's documented hooks; each hook is fed
the documented JSON on stdin (a real process) and answers in the documented shape."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mdmem import MemoryRepo
from mdmem.cli import daemon

from conftest import T0

ENV = {"MDMEM_EMBEDDER": "none", "MDMEM_DAEMON_AUTOSTART": "0"}


def cli(*args, cwd, input=None, env=None):
    full = {k: v for k, v in os.environ.items() if k not in ("MDMEM_USER", "MDMEM_NO_DAEMON")}
    full.update({**ENV, **(env or {})})
    return subprocess.run([sys.executable, "-m", "mdmem.cli.launch", *args], capture_output=True,
                          env=full, cwd=cwd, timeout=120, input=input)


def hook(event, payload, mem, *extra, env=None):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return cli("hooks", "claude-code", "run", event, "--repo", str(mem), "--as", "bob", *extra, cwd=mem,
               input=raw, env=env)


def test_install_adds_the_four_hooks_keeps_others_and_never_doubles(mem, tmp_path):
    settings = tmp_path / "proj" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = {"type": "command", "command": "echo mine"}
    settings.write_text(json.dumps({"model": "x", "hooks": {"SessionStart": [{"matcher": "", "hooks": [mine]}]}}))
    for _ in range(2):
        r = cli("hooks", "claude-code", "install", "--settings", str(settings), "--repo", str(mem), "--as", "bob",
                cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    data = json.loads(settings.read_text())
    assert data["model"] == "x"
    assert set(data["hooks"]) == {"SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"}
    starts = [h for g in data["hooks"]["SessionStart"] for h in g["hooks"]]
    assert starts[0] == mine and len(starts) == 2
    for event, groups in data["hooks"].items():
        ours = [h for g in groups for h in g["hooks"] if "claude-code run" in h["command"]]
        assert len(ours) == 1 and ours[0]["type"] == "command"
        assert f"claude-code run {event} --repo" in ours[0]["command"] and "--as bob" in ours[0]["command"]


def test_session_start_gives_the_startup_view_as_added_context(mem):
    r = hook("SessionStart", {"session_id": "s1", "transcript_path": "/nope", "cwd": str(mem),
                              "hook_event_name": "SessionStart", "source": "startup"}, mem)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    text = out["hookSpecificOutput"]["additionalContext"]
    assert text.startswith("# Startup view for bob") and "deploy.window" in text


def test_a_startup_view_beyond_the_budget_says_what_was_left_out(mem):
    repo = MemoryRepo.open(mem, embedder="none")
    repo.remember_many([dict(text=f"Procedure {i}: " + "check the dashboards and the runbook " * 8, kind="procedure",
                             subject=f"service:s{i}", key="runbook", scope="team", team="payments", new_key=True)
                        for i in range(120)], as_user="bob", now=T0)
    repo.close()
    r = hook("SessionStart", {"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup"}, mem)
    text = json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(text) <= 9000
    assert "left out" in text and "mdmem startup --as bob" in text


def test_prompt_submit_adds_the_top_recalls_in_process_and_through_the_daemon(mem):
    payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "cwd": str(mem),
               "prompt": "when does billing deploy?"}
    here = hook("UserPromptSubmit", payload, mem, env={"MDMEM_NO_DAEMON": "1"})
    assert here.returncode == 0, here.stderr
    out = json.loads(here.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "UserPromptSubmit"
    assert "team/payments/service/billing/fact/deploy.window.md" in out["additionalContext"]
    started = cli("daemon", "start", "--json", cwd=mem)
    pid = json.loads(started.stdout)["pid"]
    try:
        before = daemon.ask(mem, "ping")["served"]
        there = hook("UserPromptSubmit", payload, mem)
        assert there.returncode == 0 and there.stdout == here.stdout
        assert daemon.ask(mem, "ping")["served"] == before + 1  # the daemon answered it
        assert hook("UserPromptSubmit", {**payload, "prompt": "  "}, mem).stdout == b""
    finally:
        cli("daemon", "stop", cwd=mem)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_failing_hook_never_exits_2_which_would_block_the_prompt(mem):
    for event in ("UserPromptSubmit", "SessionStart", "PreCompact", "SessionEnd"):
        r = hook(event, b"{not json", mem, env={"MDMEM_NO_DAEMON": "1"})
        assert r.returncode == 1 and b"JSON" in r.stderr, (event, r.stderr)
    r = cli("hooks", "claude-code", "run", "UserPromptSubmit", "--repo", str(mem), cwd=mem,
            input=json.dumps({"prompt": "deploys?"}).encode(), env={"MDMEM_NO_DAEMON": "1"})
    assert r.returncode == 1  # no --as: said on stderr, the prompt goes on


def transcript_line(kind, content):
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}, "timestamp": "2026-10-01"})


def test_precompact_and_session_end_record_an_episode_of_the_session(mem, tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text("\n".join([
        transcript_line("user", "Fix the flaky billing test"),
        transcript_line("assistant", [{"type": "text", "text": "Looking at it."},
                                      {"type": "tool_use", "name": "Bash", "input": {"command": "pytest"}}]),
        transcript_line("user", [{"type": "tool_result", "content": "ok"}]),
        transcript_line("assistant", [{"type": "text", "text": "Fixed: \x1b]52;c;aGk=\x07 the clock was \u202e wrong"}]),
    ]) + "\n")
    for event, extra in (("PreCompact", {"trigger": "auto"}), ("SessionEnd", {"reason": "exit"})):
        r = hook(event, {"session_id": "abc", "transcript_path": str(t), "cwd": "/srv/billing",
                         "hook_event_name": event, **extra}, mem)
        assert r.returncode == 0, r.stderr
    repo = MemoryRepo.open(mem, embedder="none")
    notes = [s for s in repo.listing(as_user="bob", kind="episode") if s.note.subject == "project:billing"]
    assert len(notes) == 2 and {n.note.source for n in notes} == {"agent:claude-code"}
    text = notes[0].note.text
    assert "First prompt: Fix the flaky billing test" in text and "Bash x1" in text
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b]52" in text
    repo.close()


def test_a_50_mb_transcript_with_escapes_is_read_bounded(mem, tmp_path):
    t = tmp_path / "big.jsonl"
    junk = "A" * 2_000_000
    with open(t, "w") as f:
        f.write(transcript_line("user", "start here") + "\n")
        for _ in range(24):  # 24 lines of 2 MB: over the line limit, skipped unread
            f.write(transcript_line("assistant", [{"type": "text", "text": junk}]) + "\n")
        f.write("[" * 100_000 + "\n")  # deeply nested: a recursion error, not an answer
        f.write(transcript_line("user", "\x00\ud800 last \x1b[2J words") + "\n")
    assert t.stat().st_size > 48_000_000
    started = time.monotonic()
    r = hook("SessionEnd", {"session_id": "big", "transcript_path": str(t), "cwd": "/x/y",
                            "hook_event_name": "SessionEnd", "reason": "exit"}, mem)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 60
    repo = MemoryRepo.open(mem, embedder="none")
    note = next(s.note for s in repo.listing(as_user="bob", kind="episode") if s.note.subject == "project:y")
    assert len(note.text) <= 3000 and "skipped" in note.text and "start here" in note.text
    assert "\\x1b[2J" in note.text and "\x00" not in note.text
    repo.close()


def test_install_keeps_the_settings_files_permissions(mem, tmp_path):
    settings = tmp_path / "proj" / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-ant-not-for-others"}}))
    os.chmod(settings, 0o600)
    r = cli("hooks", "claude-code", "install", "--settings", str(settings), "--repo", str(mem), "--as", "bob",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert oct(settings.stat().st_mode & 0o777) == oct(0o600)
    assert json.loads(settings.read_text())["env"] == {"ANTHROPIC_API_KEY": "sk-ant-not-for-others"}
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]


@pytest.mark.parametrize("hooks", [
    {"SessionStart": [{"hooks": ["echo mine"]}]},
    {"SessionStart": [{"hooks": "echo mine"}]},
    {"SessionStart": {"matcher": "", "hooks": [{"type": "command", "command": "echo mine"}]}},
    {"SessionEnd": "echo mine"},
])
def test_install_refuses_a_hooks_entry_of_another_shape_naming_it_and_leaves_the_file(mem, tmp_path, hooks):
    settings = tmp_path / "settings.json"
    before = json.dumps({"model": "x", "hooks": hooks})
    settings.write_text(before)
    r = cli("hooks", "claude-code", "install", "--settings", str(settings), "--repo", str(mem), "--as", "bob",
            cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr.decode(), r.stderr
    assert f"hooks.{next(iter(hooks))}" in r.stderr.decode() and "a list of objects" in r.stderr.decode()
    assert settings.read_text() == before


@pytest.mark.parametrize("prompt", ["-k", "--as=alice", "--help", "--json=1 bluebird"])
def test_a_prompt_that_looks_like_an_option_is_a_question_never_an_option(mem, prompt):
    # Run as MDMEM_USER (no --as on the hook's line): "--as=alice" must not act as alice, and an
    # option argparse refuses must not exit 2, which would block the person's prompt.
    repo = MemoryRepo(mem)
    repo.remember("Alice's bluebird vault code is 4455", as_user="alice", kind="fact", subject="user:alice",
                  key="vault", source="user")
    repo.close()
    r = cli("hooks", "claude-code", "run", "UserPromptSubmit", "--repo", str(mem), cwd=mem,
            input=json.dumps({"prompt": prompt}).encode(), env={"MDMEM_NO_DAEMON": "1", "MDMEM_USER": "bob"})
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert b"4455" not in r.stdout and b"usage" not in r.stdout.lower()
    if "bluebird" in prompt:
        assert b"deploy.window.md" in r.stdout


def test_a_prompt_with_a_lone_surrogate_is_recalled_not_a_crash(mem):
    raw = b'{"prompt": "\\ud800 when does billing deploy?"}'
    r = hook("UserPromptSubmit", raw, mem, env={"MDMEM_NO_DAEMON": "1"})
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert b"deploy.window.md" in r.stdout


def test_the_installed_commands_answer_each_event_as_the_agent_runs_them(mem, tmp_path):
    """The settings hold a command a shell runs (as Claude Code does): this interpreter without
    `site`, loading mdmem by its path. Each event is answered by it -- the prompt's recall, and
    the commands that must run in the hook's own process after taking `site` back."""
    settings = tmp_path / "settings.json"
    r = cli("hooks", "claude-code", "install", "--settings", str(settings), "--repo", str(mem), "--as", "bob",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    commands = {event: groups[-1]["hooks"][0]["command"]
                for event, groups in json.loads(settings.read_text())["hooks"].items()}
    assert " -S -P -c " in commands["UserPromptSubmit"]
    env = {k: v for k, v in os.environ.items() if k not in ("MDMEM_USER", "PYTHONPATH")}
    env.update({**ENV, "MDMEM_NO_DAEMON": "1"})

    def run(event, payload):
        return subprocess.run(["sh", "-c", commands[event]], input=json.dumps(payload).encode(), env=env,
                              cwd=tmp_path, capture_output=True, timeout=120)

    r = run("UserPromptSubmit", {"hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": str(tmp_path),
                                 "prompt": "When does billing deploy?"})
    assert r.returncode == 0, r.stderr
    assert "bluebird" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    r = run("SessionStart", {"hook_event_name": "SessionStart", "session_id": "s", "cwd": str(tmp_path),
                             "source": "startup"})
    assert r.returncode == 0, r.stderr
    assert "bluebird" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]


def test_the_prompt_hooks_fast_path_imports_nothing_heavy():
    """What a prompt waits for before the daemon answers: the hook's process (no `site`) loads
    the launcher, the hook's parsing and the output's formatting -- the standard library's
    cheap parts only: no pathlib, typing, git, index or numpy."""
    from mdmem.cli.launch import hook_command

    python, *flags, boot, init = hook_command("claude-code")[:6]
    probe = boot.replace("from mdmem.cli.launch import entry\nentry()\n",
                         "import mdmem.cli.launch, mdmem.cli.prompt_hook, mdmem.interop.hook_output\n"
                         "print(' '.join(sorted(sys.modules)))\n")
    r = subprocess.run([python, *flags, probe, init], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.split())
    assert "mdmem.cli.prompt_hook" in loaded and "site" not in loaded
    heavy = {"pathlib", "typing", "importlib.metadata", "mdmem.repo", "mdmem.cli.main", "pygit2", "numpy", "whoosh",
             "onnxruntime", "yaml"}
    assert not loaded & heavy, loaded & heavy


def test_the_installed_prompt_hook_is_answered_by_the_daemon_a_plain_call_started(mem, tmp_path):
    """The hook's process runs without `site` (so its sys.prefix is not the venv's): it must
    still be the same code to the daemon a person's `mdmem` call started, which answers it and
    goes on running (a differing code stamp stopped the daemon at every prompt)."""
    settings = tmp_path / "settings.json"
    assert cli("hooks", "claude-code", "install", "--settings", str(settings), "--repo", str(mem), "--as", "bob",
               cwd=tmp_path).returncode == 0
    command = json.loads(settings.read_text())["hooks"]["UserPromptSubmit"][-1]["hooks"][0]["command"]
    env = {k: v for k, v in os.environ.items() if k not in ("MDMEM_USER", "MDMEM_NO_DAEMON")}
    env.update(ENV)
    pid = json.loads(cli("daemon", "start", "--json", cwd=mem).stdout)["pid"]
    try:
        before = daemon.ask(mem, "ping")["served"]
        for _ in range(2):
            r = subprocess.run(["sh", "-c", command], input=json.dumps(
                {"hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": str(tmp_path),
                 "prompt": "When does billing deploy?"}).encode(), env=env, cwd=tmp_path, capture_output=True,
                timeout=120)
            assert r.returncode == 0 and b"bluebird" in r.stdout, r.stderr
            assert b"other mdmem code" not in r.stderr
        status = daemon.ask(mem, "ping")
        assert status is not None and status["pid"] == pid and status["served"] == before + 2
    finally:
        cli("daemon", "stop", cwd=mem)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
