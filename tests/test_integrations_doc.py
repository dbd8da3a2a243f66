"""docs/integrations.md's memory-tool example, run as written: the official SDK's tool runner
against a stand-in Messages API on loopback (the model's turns are scripted), the memory tool
carrying out the model's command on a real repo through the gate."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mdmem import MemoryRepo

from conftest import PEOPLE, T0, TEAMS

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"


def example() -> str:
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def message(n, content, stop):
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10}}


class FakeMessages(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 -- http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.requests.append({"path": self.path, "beta": self.headers.get("anthropic-beta"), "body": body})
        if len(self.requests) == 1:
            reply = message(1, [{"type": "tool_use", "id": "toolu_1", "name": "memory",
                                 "input": {"command": "create", "path": "/memories/coffee.md",
                                           "file_text": "Alice drinks flat whites."}}], "tool_use")
        else:
            reply = message(2, [{"type": "text", "text": "Noted: I will remember."}], "end_turn")
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_documented_tool_runner_example_works_as_written(tmp_path):
    MemoryRepo.init(tmp_path / "memory", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE).close()
    FakeMessages.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}",
               "ANTHROPIC_API_KEY": "sk-test", "MDMEM_EMBEDDER": "none"}
        r = subprocess.run([sys.executable, "-c", example()], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stderr
    assert "Noted: I will remember." in r.stdout
    first, second = FakeMessages.requests
    assert first["body"]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    assert "context-management-2025-06-27" in first["beta"]
    result = second["body"]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    text = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert "held for a person's review" in text  # the gate's closed default, answered to the model
    repo = MemoryRepo.open(tmp_path / "memory", embedder="none")
    [item] = repo.review_list(as_user="alice")
    assert item.note.text == "Alice drinks flat whites." and item.note.source == "agent:claude"
    repo.close()


def test_every_command_line_on_the_page_parses():
    """The page's `mdmem ...` lines name commands and options that exist, as written."""
    import shlex

    from mdmem.cli.main import build_parser

    parser = build_parser()
    lines = [line.split("&&")[-1].split("#")[0].strip() for line in DOC.read_text().splitlines()
             if line.startswith("    ") and "mdmem " in line and "import " not in line.split("mdmem")[0]]
    commands = [shlex.split(line) for line in lines if line.startswith("mdmem ")]
    assert len(commands) >= 12
    for argv in commands:
        parser.parse_args(argv[1:])  # SystemExit (argparse's error) fails the test
