"""The founder's own hand edit, committed with plain git under their normal global identity,
is theirs: `mdmem init` records the person's git address in [people.<them>] emails."""
import json
import os
import subprocess

from conftest import run_cli


def test_the_founders_hand_edit_with_their_global_git_identity_is_trusted(tmp_path):
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Alice Example\n\temail = alice@example.com\n")
    env = {"GIT_CONFIG_GLOBAL": str(gitconfig), "MDMEM_EMBEDDER": "none", "MDMEM_NO_DAEMON": "1"}
    root = tmp_path / "memory"
    r = run_cli("init", str(root), "--as", "alice", "--team", "payments=alice,bob", "--eraser", "dana", env=env)
    assert r.returncode == 0, r.stderr
    assert 'emails = ["alice@mdmem.invalid", "alice@example.com"]' in (root / "mdmem.toml").read_text()
    r = run_cli("remember", "Billing deploys on Tuesdays", "--kind", "fact", "--subject", "service:billing",
                "--key", "deploy.window", "--scope", "team", "--team", "payments", "--as", "alice", cwd=root, env=env)
    assert r.returncode == 0, r.stderr
    note = root / "team/payments/service/billing/fact/deploy.window.md"
    note.write_text(note.read_text().replace("on Tuesdays", "on Tuesdays and Thursdays"))
    full = {**os.environ, **env}
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "fix the deploy days"], check=True, env=full,
                   capture_output=True)
    verify = run_cli("verify", "--as", "alice", "--json", cwd=root, env=env)
    assert verify.returncode == 0 and json.loads(verify.stdout)["untrusted"] == [], verify.stdout
    assert "Thursdays" in (root / "team/payments/MEMORY.md").read_text()
