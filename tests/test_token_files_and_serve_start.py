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
from pathlib import Path

import httpx2
import pytest
from conftest import PEOPLE, T0, TEAMS
from http_server import running

from mdmem import MemoryRepo
from mdmem.auth.static_tokens import TokenFile

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
