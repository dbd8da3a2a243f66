"""`mdmem hooks codex`: Codex's hooks.json gets the hooks Codex documents
(https://developers.openai.com/codex/hooks); each hook is a real process fed the JSON Codex
sends on stdin (the fields of openai/codex's codex-rs/hooks/schema/generated/*.input.schema.json)
and answers in the shape Codex reads (its *.output.schema.json: no other keys)."""
from __future__ import annotations

import json


from mdmem import MemoryRepo

from test_claude_code_hooks import cli

# The keys Codex's output schemas allow (additionalProperties: false at both levels).
OUTPUT_KEYS = {"continue", "decision", "hookSpecificOutput", "reason", "stopReason", "suppressOutput", "systemMessage"}
SPECIFIC_KEYS = {"SessionStart": {"hookEventName", "additionalContext", "env"},
                 "UserPromptSubmit": {"hookEventName", "additionalContext"}}


def common(event, mem, **fields):
    return {"session_id": "019a2d7a-41c4", "transcript_path": None, "cwd": str(mem), "hook_event_name": event,
            "model": "gpt-5-codex", "permission_mode": "default", **fields}


def hook(event, payload, mem, *extra, env=None):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return cli("hooks", "codex", "run", event, "--repo", str(mem), "--as", "bob", *extra, cwd=mem, input=raw, env=env)


def assert_codex_output(stdout: bytes, event: str) -> str:
    out = json.loads(stdout)
    assert set(out) <= OUTPUT_KEYS, out
    specific = out["hookSpecificOutput"]
    assert set(specific) <= SPECIFIC_KEYS[event] and specific["hookEventName"] == event
    assert isinstance(specific["additionalContext"], str)
    return specific["additionalContext"]


def test_install_writes_codexs_hooks_json_keeping_others_and_never_doubling(mem, tmp_path):
    hooks_file = tmp_path / "proj" / ".codex" / "hooks.json"
    hooks_file.parent.mkdir(parents=True)
    mine = {"type": "command", "command": "python3 .codex/hooks/check.py", "statusMessage": "checking"}
    hooks_file.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [mine]}]}}))
    for _ in range(2):
        r = cli("hooks", "codex", "install", "--repo", str(mem), "--as", "bob", cwd=tmp_path / "proj")
        assert r.returncode == 0, r.stderr
    data = json.loads(hooks_file.read_text())
    assert set(data["hooks"]) == {"SessionStart", "UserPromptSubmit", "PreCompact", "Stop"}
    stops = [h for g in data["hooks"]["Stop"] for h in g["hooks"]]
    assert stops[0] == mine and len(stops) == 2
    assert data["hooks"]["SessionStart"][-1]["matcher"] == "startup|resume|clear|compact"
    for event, groups in data["hooks"].items():
        ours = [h for g in groups for h in g["hooks"] if "codex run" in h["command"]]
        assert len(ours) == 1 and ours[0]["type"] == "command" and isinstance(ours[0]["timeout"], int)
        assert f"codex run {event} --repo" in ours[0]["command"] and "--as bob" in ours[0]["command"]


def test_session_start_gives_the_startup_view_in_codexs_output_shape(mem):
    r = hook("SessionStart", common("SessionStart", mem, source="startup"), mem)
    assert r.returncode == 0, r.stderr
    assert "bluebird" in assert_codex_output(r.stdout, "SessionStart")


def test_prompt_submit_adds_the_top_recalls_in_codexs_output_shape(mem):
    payload = common("UserPromptSubmit", mem, prompt="When does billing deploy?", turn_id="019d036d-c7fa")
    for env in ({"MDMEM_NO_DAEMON": "1"}, None):  # never asking a daemon, and asking (none runs)
        r = hook("UserPromptSubmit", payload, mem, env=env)
        assert r.returncode == 0, r.stderr
        text = assert_codex_output(r.stdout, "UserPromptSubmit")
        assert "bluebird" in text and "team/payments" in text
    assert hook("UserPromptSubmit", {**payload, "prompt": " "}, mem).stdout == b""


def rollout(*items):
    return "\n".join(json.dumps({"timestamp": "2026-10-01T10:00:00.000Z", "type": t, "payload": p})
                     for t, p in items) + "\n"


def message(role, text):
    kind = "input_text" if role == "user" else "output_text"
    return "response_item", {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_stop_records_the_turn_and_precompact_the_session_from_codexs_rollout(mem, tmp_path):
    t = tmp_path / "rollout-2026-10-01T10-00-00-019a2d7a.jsonl"
    t.write_text(rollout(
        ("session_meta", {"id": "019a2d7a-41c4", "cwd": "/srv/billing", "cli_version": "0.150.0"}),
        message("user", "<environment_context><cwd>/srv/billing</cwd></environment_context>"),
        message("user", "Fix the flaky billing test"),
        ("event_msg", {"type": "user_message", "message": "Fix the flaky billing test"}),
        ("response_item", {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}),
        message("assistant", "Fixed: the clock was \x1b]52;c;aGk=\x07 wrong"),
        message("user", "Now the refund test"),
        ("response_item", {"type": "function_call", "name": "apply_patch", "arguments": "{}", "call_id": "c2"}),
    ))
    stop = common("Stop", mem, transcript_path=str(t), cwd="/srv/billing", turn_id="019d036e",
                  stop_hook_active=False, last_assistant_message="Refund test fixed too.")
    r = hook("Stop", stop, mem)
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    r = hook("PreCompact", common("PreCompact", mem, transcript_path=str(t), cwd="/srv/billing", trigger="auto",
                                  turn_id="019d036e"), mem)
    assert r.returncode == 0, r.stderr
    repo = MemoryRepo.open(mem, embedder="none")
    notes = {s.note.text.split("\n")[0]: s.note for s in repo.listing(as_user="bob", kind="episode")
             if s.note.subject == "project:billing"}
    assert len(notes) == 2 and {n.source for n in notes.values()} == {"agent:codex"}
    turn = next(n.text for line, n in notes.items() if "turn 019d036e" in line)
    assert "Prompt: Now the refund test" in turn and "Reply: Refund test fixed too." in turn
    assert "apply_patch x1" in turn and "shell" not in turn  # the tools of this turn only
    session = next(n.text for line, n in notes.items() if "PreCompact" in line)
    assert "First prompt: Fix the flaky billing test" in session and "2 prompt(s)" in session
    assert "environment_context" not in session and "\x1b" not in session and "\\x1b]52" in session
    repo.close()


def test_stop_without_a_transcript_records_the_last_reply(mem):
    r = hook("Stop", common("Stop", mem, turn_id="t1", stop_hook_active=False,
                            last_assistant_message="Deployed billing to staging."), mem)
    assert r.returncode == 0, r.stderr
    repo = MemoryRepo.open(mem, embedder="none")
    [note] = [s.note for s in repo.listing(as_user="bob", kind="episode") if s.note.source == "agent:codex"]
    assert "Reply: Deployed billing to staging." in note.text
    repo.close()


def test_a_failing_codex_hook_never_exits_2_which_would_block(mem):
    for event in ("UserPromptSubmit", "SessionStart", "PreCompact", "Stop"):
        r = hook(event, b"{not json", mem, env={"MDMEM_NO_DAEMON": "1"})
        assert r.returncode == 1 and b"JSON" in r.stderr, (event, r.stderr)
