"""The guard on a bare remote: how long a push of one remembered note takes through `mdmem guard`'s
pre-receive hook (which renders the pushed commit's views to refuse hand-written ones), against
the same push to an unguarded remote, at 1,000 notes in one team (and a private root beside it).

The data is generated here; nothing is read from ../shared/benchmarks.

    .venv/bin/python benchmarks/bench_guard.py [--notes 1000] [--pushes 5] [--json]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import bulk_notes, pct, table  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def pushes(tmp: Path, notes: int, n: int, guarded: bool) -> list[float]:
    root = tmp / ("guarded" if guarded else "plain")
    repo = MemoryRepo.init(root, teams={"payments": ["bob", "alice"]}, erasers=["alice"], as_user="alice",
                           embedder="none")
    bulk_notes(repo, notes)
    repo.render(as_user="alice")
    for i in range(20):
        repo.remember(f"Alice's private note {i}", as_user="alice", kind="fact", subject=f"topic:t{i}", key="k")
    bare = tmp / f"{root.name}.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(root, "remote", "add", "origin", str(bare))
    git(root, "push", "-q", "origin", "main")
    if guarded:
        subprocess.run([sys.executable, "-m", "mdmem.cli.main", "guard", str(bare)], check=True,
                       capture_output=True)
    times = []
    for i in range(n):
        repo.remember(f"Billing deploy window rule {i}", as_user="bob", kind="fact", subject="service:billing",
                      key=f"rule{i}", scope="team", team="payments", new_key=True)
        if i % 2:
            repo.remember(f"Alice's later note {i}", as_user="alice", kind="fact", subject="topic:later", key=f"k{i}",
                          new_key=True)
        t = time.perf_counter()
        git(root, "push", "-q", "origin", "main")
        times.append((time.perf_counter() - t) * 1000)
    repo.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--pushes", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for guarded in (False, True):
            times = pushes(Path(tmp), args.notes, args.pushes, guarded)
            rows.append(["guarded" if guarded else "no guard", f"{args.notes:,}", len(times),
                         f"{pct(times, 50):.0f}", f"{max(times):.0f}"])
    table(f"git push of one note through the guard (load average {os.getloadavg()[0]:.1f})",
          ["remote", "team notes", "pushes", "p50 ms", "max ms"], rows, as_json=args.json)


if __name__ == "__main__":
    main()
