"""prove-gone names every running long-lived mdmem process of the repository however it was
told which repository: `--repo PATH`, `--repo=PATH`, or MDMEM_REPO in its environment, from
any working folder (a watcher it misses would let the proof pass while it holds the text)."""
import os
import subprocess
import sys
import time

import pytest

from conftest import T0, TEAMS

from mdmem import MemoryRepo
from mdmem.erasure.processes import running


@pytest.mark.parametrize("how", ["--repo=", "MDMEM_REPO"])
def test_prove_gone_names_a_watcher_told_its_repository_by_an_equals_argument_or_the_environment(tmp_path, how):
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        root = repo.root
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_USER": "dana"}
    args = [sys.executable, "-m", "mdmem.cli.main", "watch", "--for", "60"]
    if how == "MDMEM_REPO":
        env["MDMEM_REPO"] = str(root)
    else:
        args.append(f"--repo={root}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    watcher = subprocess.Popen(args, cwd=elsewhere, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        named = []
        while time.monotonic() < deadline and watcher.poll() is None:
            named = [pid for pid, _ in running(root)]
            if watcher.pid in named:
                break
            time.sleep(0.2)
        assert watcher.poll() is None, "the watcher ended early"
        assert watcher.pid in named
    finally:
        watcher.kill()
        watcher.wait()


def test_prove_gone_never_says_pass_while_a_process_it_cannot_vouch_for_runs(tmp_path):
    import json

    from conftest import run_cli

    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        made = repo.remember("Dana keeps the vault key under quokkabanana plinth", as_user="dana", kind="fact",
                             subject="service:vault", key="key.place", scope="team", team="payments", now=T0)
        root = repo.root
    env = {**os.environ, "MDMEM_EMBEDDER": "none", "MDMEM_USER": "dana"}
    watcher = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "watch", "--for", "60", "--repo", str(root)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while watcher.pid not in [pid for pid, _ in running(root)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert run_cli("forget", "--path", made.path, "--repo", str(root), "--as", "dana").returncode == 0
        out = run_cli("prove-gone", "--needle", "quokkabanana", "--repo", str(root), "--as", "dana", "--json")
        report = json.loads(out.stdout)
        assert any(f"pid {watcher.pid}" in line for line in report["cannot_reach"]), report["cannot_reach"]
        assert report["verdict"] != "PASS", report
    finally:
        watcher.kill()
        watcher.wait()
