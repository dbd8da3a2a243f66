"""remember p50/p95 on repos of 1,000 and 10,000 notes; the note on disk, git status clean.

Target: p50 <= 15 ms at 10,000 notes.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import bulk_notes, pct, table, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

SIZES = [int(x) for x in (sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1][0].isdigit() else ["1000", "10000"])]
WRITES = 200


def measure(n: int) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["bob"]}, as_user="mdmem")
        bulk_notes(repo, n)
        times = []
        for i in range(WRITES):
            t0 = time.perf_counter()
            r = repo.remember(f"write {i}", as_user="bob", kind="fact", subject=f"service:svc{i % 50}",
                              key=f"k{i * 50 % n}" if i % 2 else f"new{i}", scope="team", team="payments",
                              new_key=True)
            times.append((time.perf_counter() - t0) * 1000)
            assert (repo.root / r.path).exists()
        status = subprocess.run(["git", "-C", str(repo.root), "status", "--porcelain"],
                                capture_output=True, text=True).stdout
        return [f"{n:,}", WRITES, f"{pct(times, 50):.1f}", f"{pct(times, 95):.1f}", "clean" if not status else "DIRTY"]


if __name__ == "__main__":
    rows = [measure(n) for n in SIZES]
    table("remember() latency (ms), half supersessions, half new keys",
          ["notes", "writes", "p50 ms", "p95 ms", "git status"], rows, as_json=wants_json())
