"""An HTTP server's remembers, made in a process of its own (mcp/write_process.py): the answer,
the errors and what the server's caches then hold are what they would be had it written them
itself; the process is replaced when it dies and ends with the server."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import PEOPLE, TEAMS, T0

from mdmem import MemoryRepo, errors
from mdmem.erasure import processes
from mdmem.mcp import write_process
from mdmem.mcp.write_process import WriteProcess
from mdmem.policy.gate import AGENT

AS_AGENT = {"as_user": "alice", "source": "agent:test-bot", "channel": AGENT}


def write_children(pid: int) -> list[int]:
    """The server's live children running the write process."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                if write_process.__name__.encode() in Path(f"/proc/{child}/cmdline").read_bytes():
                    out.append(int(child))
            except OSError:
                continue
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(check, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def every_error() -> list[errors.MdmemError]:
    made: list[errors.MdmemError] = [errors.Refused("the gate said no", ["deploy.window", "deploy.days"]),
                                     errors.Refused("no keys here"),
                                     errors.NoteInvalid("team/x/fact/k.md", "valid_to", "before valid_from",
                                                        problems=[("valid_to", "before valid_from"),
                                                                  ("kind", "unknown")])]
    for cls in errors._kinds().values():
        if cls not in (errors.Refused, errors.NoteInvalid):
            made.append(cls(f"{cls.__name__}: what went wrong, in words"))
    return made


def test_every_error_crosses_a_process_boundary_as_itself():
    crossed = [errors.from_dict(e.to_dict()) for e in every_error()]
    assert [type(c) for c in crossed] == [type(e) for e in every_error()]
    assert [(c.to_dict(), str(c), c.exit_code) for c in crossed] == \
        [(e.to_dict(), str(e), e.exit_code) for e in every_error()]
    assert len({type(c) for c in crossed}) == len(errors._kinds())  # every kind of the tree


def test_prove_gone_names_the_write_process_by_its_module():
    assert processes.WRITE_PROCESS == write_process.__name__


@pytest.fixture
def served(tmp_path):
    """A repository with MiniLM, its index built and its embedder made (as a server's), and a
    write process over it."""
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE,
                           embedder="minilm")
    repo.remember("The web app deploys any weekday before 3pm", as_user="alice", kind="fact",
                  subject="service:web", key="deploy.window", source="user")
    repo.recall("deploys", as_user="alice")
    writer = WriteProcess(repo)
    writer.start()
    yield repo, writer
    writer.stop()
    repo.close()


def test_a_note_remembered_by_the_write_process_is_recalled_with_the_vector_made_there(served, monkeypatch):
    repo, writer = served
    embedder = repo.index.embedder
    documents: list[str] = []
    real = embedder.embed_documents
    monkeypatch.setattr(embedder, "embed_documents", lambda texts: documents.extend(texts) or real(texts))
    text = "Staging runs Postgres 16 on the shared cluster"
    result = writer.remember(text, kind="fact", subject="service:db", key="staging.engine", **AS_AGENT)
    assert result.status == "committed" and result.path.startswith("private/alice/")
    hits = repo.recall("which database engine does staging use", as_user="alice")
    assert hits[0].path == result.path and hits[0].cosine is not None and hits[0].cosine > 0.3
    assert documents == []  # this process embedded nothing for the note: its vector came over
    # ... and it is the vector this process would have made (what the catch-up stored).
    from mdmem.search.embed_ahead import note_texts
    note = repo.get(as_user="alice", subject="service:db", kind="fact", key="staging.engine").note
    [(key, embedded)] = note_texts(repo.index.model_id, [note]).items()
    [stored] = repo.index.cache.get_many([key]).values()
    assert np.allclose(stored, real([embedded])[0], atol=1e-4)
    # The commit is the agent's, with the trailers an in-process write gives.
    trailers = subprocess.run(["git", "-C", str(repo.root), "log", "-1", "--format=%B", result.commit],
                              capture_output=True, text=True, check=True).stdout
    assert "Memory-Source: agent:test-bot" in trailers and "Memory-Actor: alice" in trailers


def test_the_write_process_refuses_what_the_repository_refuses_with_the_same_error(served):
    repo, writer = served
    for kwargs in [{"kind": "fact", "subject": "service:db"},  # a keyed kind without a key
                   {"kind": "fact", "subject": "service:db", "key": "k", "scope": "team", "team": "nope"},
                   {"kind": "fact", "subject": "service:db", "key": "k", "as_user": "nobody"}]:
        call = {**AS_AGENT, **kwargs}
        with pytest.raises(errors.MdmemError) as here:
            repo.remember("Some text", **call)
        with pytest.raises(errors.MdmemError) as there:
            writer.remember("Some text", **call)
        assert (type(there.value), str(there.value)) == (type(here.value), str(here.value))
    # The gate's refusal keeps its keys (the agent updates under one of them).
    writer.remember("The web app deploys on weekdays", kind="fact", subject="service:web", key="deploy.days",
                    **AS_AGENT)
    with pytest.raises(errors.Refused) as refused:
        writer.remember("The web app deploys before 3pm", kind="fact", subject="service:web", key="deploy.hours",
                        **AS_AGENT)
    assert refused.value.existing_keys


def test_a_write_process_that_died_is_replaced_by_the_next_remember(served):
    repo, writer = served
    writer.remember("First note before the crash", kind="episode", subject="task:crash", **AS_AGENT)
    first = writer.pid
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: not alive(first))
    result = writer.remember("Second note after the crash", kind="episode", subject="task:crash", **AS_AGENT)
    assert result.status == "committed" and writer.pid not in (None, first)
    assert "Second note after the crash" in repo.store.read_at(result.path, "HEAD").decode()


def test_the_write_process_ignores_sigterm_and_ends_when_the_server_lets_it_go(served):
    """A supervisor signals the whole group: the write process goes on until the server, done
    with its calls, closes the pipe; it then writes git's index and exits."""
    repo, writer = served
    pid = writer.pid
    os.kill(pid, signal.SIGTERM)
    result = writer.remember("Written after the group was signalled", kind="episode", subject="task:term",
                             **AS_AGENT)
    assert result.status == "committed" and writer.pid == pid
    writer.stop()
    assert wait_for(lambda: not alive(pid), 10)
    status = subprocess.run(["git", "-C", str(repo.root), "status", "--porcelain"], capture_output=True,
                            text=True, check=True).stdout
    assert status == ""


def test_the_write_process_ends_when_its_server_is_killed(tmp_path):
    """A server killed with SIGKILL leaves no write process behind (it reads the end of the pipe)."""
    from http_server import data, session_calls, start_server

    import asyncio

    from mdmem.auth.static_tokens import TokenFile

    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.close()
    tokens = TokenFile(tmp_path / "tokens.json")
    token = tokens.add("alice", "alice-bot", frozenset({"read", "write"}))[1]
    server = start_server(repo.root, tokens.path, "--rate", "0")
    try:
        [answer] = asyncio.run(session_calls(server.url, token, [("remember", {
            "text": "Remembered through the write process", "kind": "episode", "subject": "task:kill"})]))
        assert data(answer)["status"] == "committed"
        [child] = write_children(server.proc.pid)
        assert processes.running(repo.root) and any(p == child for p, _ in processes.running(repo.root))
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)
        assert wait_for(lambda: not alive(child), 20)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
