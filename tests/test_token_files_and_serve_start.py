"""The token file as people keep it (behind a linked folder or file, in a folder the account may
not write) under `mdmem token add`, and what `mdmem serve --http` says and allows at its
endpoint (the address it listens on, 405 for every method but POST), each run as the commands
README.md and docs/server.md give."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import pytest
from conftest import PEOPLE, T0, TEAMS
from http_server import running

from mdmem import MemoryRepo
from mdmem.auth.static_tokens import TokenFile
from mdmem.model.clock import parse_time

ENV = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
for name in ("MDMEM_CONFIG", "XDG_CONFIG_HOME", "MDMEM_USER"):
    ENV.pop(name, None)


def mdmem(*args: str, env: dict | None = None, user: int | None = None) -> subprocess.CompletedProcess:
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    return subprocess.run([*prefix, sys.executable, "-m", "mdmem.cli.main", *args], capture_output=True, text=True,
                          env={**ENV, **(env or {})})


def token_add(repo_root, *extra: str, agent: str = "ci-bot", env=None, user=None) -> subprocess.CompletedProcess:
    # docs/server.md, "Tokens": mdmem token add --person alice --agent ci-bot --allow read,write --repo ...
    return mdmem("token", "add", "--person", "bob", "--agent", agent, "--allow", "read,write", "--repo",
                 str(repo_root), *extra, env=env, user=user)


def listed(tokens_file: Path | None = None, env=None) -> list[str]:
    args = ["token", "list", "--json"] + (["--tokens", str(tokens_file)] if tokens_file else [])
    r = mdmem(*args, env=env)
    assert r.returncode == 0, r.stderr
    return sorted(t["agent"] for t in json.loads(r.stdout)["tokens"])


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trial")
    repo = MemoryRepo.init(tmp / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE, erasers=["dana"])
    repo.close()
    return repo.root


# --- token add and the token file's folder --------------------------------------------------

def test_token_add_keeps_a_symlinked_config_folder_and_the_tokens_in_it(memory, tmp_path):
    """~/.config/mdmem as a symlink (a dotfiles repo, stow, a secrets volume) is common. `mdmem
    token add` with the default token file deleted the link and made an empty folder in its
    place (the lock treats its folder as mdmem's own): the tokens already there -- every agent
    of the team -- and the user's config.toml vanished from mdmem's view."""
    home, dots = tmp_path / "home", tmp_path / "dotfiles" / "mdmem"
    (home / ".config").mkdir(parents=True)
    dots.mkdir(parents=True)
    (dots / "config.toml").write_text('[agent]\nlabel = "claude"\n')
    TokenFile(dots / "server-tokens.json").add("bob", "first", frozenset({"read"}))
    (home / ".config" / "mdmem").symlink_to(dots)
    env = {"HOME": str(home)}
    assert listed(env=env) == ["first"]

    added = token_add(memory, agent="second", env=env)

    assert added.returncode == 0, added.stderr
    assert (home / ".config" / "mdmem").is_symlink(), "the config folder's link was replaced by a folder"
    assert listed(env=env) == ["first", "second"]
    assert (home / ".config" / "mdmem" / "config.toml").exists()


def test_token_add_with_tokens_in_a_symlinked_folder_writes_through_the_link(memory, tmp_path):
    """The same through --tokens (/etc/mdmem -> /srv/secrets/mdmem): the link is removed and the
    new token lands in a fresh folder the real token file never sees."""
    real = tmp_path / "secrets"
    real.mkdir()
    TokenFile(real / "server-tokens.json").add("bob", "first", frozenset({"read"}))
    link = tmp_path / "etc-mdmem"
    link.symlink_to(real)

    added = token_add(memory, "--tokens", str(link / "server-tokens.json"), agent="second")

    assert added.returncode == 0, added.stderr
    assert link.is_symlink()
    assert listed(real / "server-tokens.json") == ["first", "second"]


def test_token_add_to_a_symlinked_token_file_updates_the_file_it_points_to(memory, tmp_path):
    """A token file that is a link (kept in a managed location) is replaced by a regular copy on
    the first add: the server reading the real file never learns the new token."""
    real = tmp_path / "managed" / "server-tokens.json"
    real.parent.mkdir()
    TokenFile(real).add("bob", "first", frozenset({"read"}))
    link = tmp_path / "server-tokens.json"
    link.symlink_to(real)

    added = token_add(memory, "--tokens", str(link), agent="second")

    assert added.returncode == 0, added.stderr
    assert link.is_symlink()
    assert listed(real) == ["first", "second"]


def test_token_add_into_a_folder_it_may_not_write_names_the_whole_path(tmp_path):
    """A --tokens file in a folder the account may not write: the error said only
    `t.json.lock: Permission denied` (the lock opened relative to its folder), not where."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another account")
    # In /tmp itself, not this worker's private temporary folder (0700, root's): the other
    # account must reach it. Removed below.
    base = Path(tempfile.mkdtemp(prefix="mdmem-trial-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        repo = MemoryRepo.init(base / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
        repo.close()
        locked = base / "readonly"
        locked.mkdir()
        for path in [base / "mem", *(base / "mem").rglob("*")]:
            os.lchown(path, 65534, 65534)
        os.chmod(locked, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        added = token_add(base / "mem", "--tokens", str(locked / "t.json"), env={"HOME": str(base)}, user=65534)
        assert added.returncode != 0
        assert str(locked) in added.stderr, added.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- serve --http -----------------------------------------------------------------------------

def test_the_first_line_says_where_the_server_listens_with_port_0_and_a_public_url(memory, tmp_path):
    """docs/server.md, "Run it": "Port 0 picks a free port; the first line on stderr says the URL".
    With --public-url (as the docs' own command gives it) the line names the public URL only:
    the port picked is written nowhere, and the server cannot be reached."""
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("bob", "ci-bot", frozenset({"read"}))
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--http", "127.0.0.1:0", "--repo",
                             str(memory), "--tokens", str(tokens.path), "--public-url",
                             "https://memory.example.com/mcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        first = proc.stderr.readline()
        assert first.startswith("mdmem: serving"), first
        port = re.search(r"127\.0\.0\.1:(\d+)", first)
        assert port and int(port.group(1)) != 0, f"no listening port in {first!r}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_every_405_on_the_mcp_endpoint_allows_only_post(memory, tmp_path):
    """GET /mcp is answered 405 with `Allow: POST` (docs/server.md, "Limits"); the other methods'
    405s (HEAD, OPTIONS, PUT, PATCH: the SDK's) say `Allow: GET, POST, DELETE` -- two methods that
    are themselves refused -- and DELETE's 405 has no Allow header at all."""
    tokens = TokenFile(tmp_path / "tokens.json")
    secret = tokens.add("bob", "ci-bot", frozenset({"read"}))[1]
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream"}
    with running(memory, tokens.path, "--rate", "0") as server:
        allowed = {}
        for method in ("GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"):
            r = httpx2.request(method, server.url, headers=headers, timeout=10)
            assert r.status_code == 405, (method, r.status_code)
            allowed[method] = r.headers.get("allow")
    assert allowed == dict.fromkeys(allowed, "POST"), allowed


# --- a token names its memory --------------------------------------------------------------
def test_a_token_added_for_one_memory_is_refused_by_the_server_of_another(memory, tmp_path):
    """One account, one token file (the default one, beside the config), two memories that both
    declare bob: the token `mdmem token add --repo` made for the first is refused (401) by a
    server over the second, which says at its start that it has no token yet; the first's server
    takes it. `token list` names each token's memory."""
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    other = MemoryRepo.init(tmp_path / "other", teams={"ops": ["bob", "erin"]}, now=T0, as_user="mdmem",
                            people=["bob", "erin"])
    other.close()
    added = token_add(memory, env=env)
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert f"the memory at {os.path.realpath(memory)}" in added.stderr
    tokens = home / ".config" / "mdmem" / "server-tokens.json"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    with running(other.root, tokens, env=env) as server:
        refused = httpx2.post(server.url, headers=headers, content=json.dumps(body), timeout=30)
        assert refused.status_code == 401, refused.text
        assert server.says("no token for this memory"), server.log()
    with running(memory, tokens, env=env) as server:
        taken = httpx2.post(server.url, headers=headers, content=json.dumps(body), timeout=30)
        assert taken.status_code == 200, taken.text
        assert "recall" in taken.text
    shown = mdmem("token", "list", "--tokens", str(tokens), env=env)
    assert shown.returncode == 0 and os.path.realpath(memory) in shown.stdout, shown


def test_a_token_follows_its_memory_when_moved_and_a_new_memory_in_its_place_refuses_it(tmp_path):
    """A memory's tokens name it, not the folder it is in: moved (`mv`), it still takes them;
    a new memory made where it was (declaring the same person) refuses them."""
    env = {"HOME": str(tmp_path / "home")}
    first = MemoryRepo.init(tmp_path / "mem", teams={"eng": ["bob"]}, now=T0, as_user="mdmem")
    first.close()
    added = token_add(first.root, env=env)
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    tokens = tmp_path / "home" / ".config" / "mdmem" / "server-tokens.json"
    (tmp_path / "mem").rename(tmp_path / "moved")
    again = MemoryRepo.init(tmp_path / "mem", teams={"ops": ["bob", "zed"]}, now=T0, as_user="mdmem")
    again.close()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    with running(tmp_path / "mem", tokens, env=env) as server:
        assert httpx2.post(server.url, headers=headers, content=body, timeout=30).status_code == 401
        assert server.says("made for the memory"), server.log()
    with running(tmp_path / "moved", tokens, env=env) as server:
        assert httpx2.post(server.url, headers=headers, content=body, timeout=30).status_code == 200


def test_token_list_says_a_token_has_expired_and_add_names_the_person_flag(memory, tmp_path):
    """An expiry passed is listed as "expired", not "expires"; an undeclared --person is refused
    naming --person (not --as, which `token add` has not got)."""
    tokens = tmp_path / "tokens.json"
    past = "2025-01-01T00:00:00Z"
    TokenFile(tokens).add("bob", "gone", frozenset({"read"}), expires="2025-06-01T00:00:00Z",
                          now=parse_time(past, field="now"))
    TokenFile(tokens).add("bob", "live", frozenset({"read"}), expires="2099-01-01T00:00:00Z")
    shown = mdmem("token", "list", "--tokens", str(tokens))
    lines = {line.split()[2]: line for line in shown.stdout.splitlines()}
    assert "expired 2025-06-01" in lines["agent:gone"] and "expires 2099-01-01" in lines["agent:live"], shown.stdout
    assert "any memory" in lines["agent:gone"]  # made without one (older tokens)
    refused = mdmem("token", "add", "--person", "mallory", "--agent", "x", "--repo", str(memory),
                    "--tokens", str(tokens))
    assert refused.returncode != 0 and "check --person" in refused.stderr and "--as" not in refused.stderr, \
        refused.stderr


def test_the_python_example_in_the_server_docs_runs_as_written(tmp_path):
    """docs/server.md, "Point an agent at it": the Python example, run as a script with the URL
    swapped for a real server's and the token in MDMEM_TOKEN, prints the hit it finds."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "server.md").read_text()
    section = doc.split("## Point an agent at it", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "https://memory.example.com/mcp" in example
    repo = MemoryRepo.init(tmp_path / "mem", teams=TEAMS, now=T0, as_user="mdmem", people=PEOPLE)
    repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact", subject="service:web",
                  key="deploy.window")
    repo.close()
    tokens = TokenFile(tmp_path / "tokens.json")
    secret = tokens.add("bob", "docs-example", frozenset({"read"}))[1]
    with running(repo.root, tokens.path) as server:
        script = tmp_path / "example.py"
        script.write_text(example.replace("https://memory.example.com/mcp", server.url))
        ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                             env={**ENV, "MDMEM_TOKEN": secret})
    assert ran.returncode == 0, ran.stderr
    assert "Billing deploys any weekday before 3pm" in ran.stdout, ran.stdout


def test_the_server_logs_a_refused_token_once(memory, tmp_path):
    """The SDK gives the root logger a handler of its own: each of mdmem's warnings came out
    twice on the server's stderr (its own line, then the SDK's)."""
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.add("bob", "ci-bot", frozenset({"read"}))
    with running(memory, tokens.path) as server:
        r = httpx2.post(server.url, headers={"Authorization": "Bearer mdmem_feedfeedfeed_nothing",
                                             "Accept": "application/json, text/event-stream",
                                             "Content-Type": "application/json"}, content=b"{}", timeout=30)
        assert r.status_code == 401
        server.says("feedfeedfeed")
        time.sleep(0.5)  # a second copy, if any, is read by then
        log = server.log()
    assert log.count("feedfeedfeed") == 1, log


def test_a_server_that_cannot_tell_its_memory_refuses_tokens_for_one_and_says_why(tmp_path):
    """The memory's id cannot be read (here a folder in its place; a read-only .git does the
    same): the server starts, says so after its first line, refuses a token added for a memory
    and takes one that names none, rather than refusing to serve (JWTs, read-only accounts)."""
    repo = MemoryRepo.init(tmp_path / "mem", teams={"eng": ["bob"]}, now=T0, as_user="mdmem")
    repo.close()
    tokens = TokenFile(tmp_path / "tokens.json")
    bound = tokens.add("bob", "bound", frozenset({"read"}), memory_id="c" * 32, memory=str(repo.root))[1]
    unbound = tokens.add("bob", "older", frozenset({"read"}))[1]
    (repo.root / ".git" / "mdmem-memory-id").mkdir()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})

    def status(secret):
        return httpx2.post(server.url, headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json",
                                                "Accept": "application/json, text/event-stream"},
                           content=body, timeout=30).status_code

    with running(repo.root, tokens.path) as server:
        assert status(bound) == 401 and status(unbound) == 200
        log = server.log()
    assert log.startswith("mdmem: serving"), log
    assert "mdmem-memory-id: not a plain file" in log and "tokens added for a memory are refused here" in log, log
