"""MEMORY views: render time and size with 2,000 notes (target: within the budget, <= 200 ms)."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import bulk_notes, pct, table, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402
from mdmem.model.clock import utcnow  # noqa: E402


def main():
    rows = []
    for n in (2000, 10000):
        with tempfile.TemporaryDirectory() as tmp:
            repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["bob"]}, as_user="mdmem")
            bulk_notes(repo, n)
            now = utcnow()
            cold = time.perf_counter()
            view = repo.scope_view("team/payments", now)
            cold = (time.perf_counter() - cold) * 1000
            warm = []
            for _ in range(10):
                t = time.perf_counter()
                view = repo.scope_view("team/payments", now)
                warm.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            startup = repo.startup(as_user="bob")
            startup_ms = (time.perf_counter() - t) * 1000
            repo.close()
            reopened = MemoryRepo.open(repo.root)  # a new process: the metadata cache is on disk
            t = time.perf_counter()
            reopened.scope_view("team/payments", now)
            reopen_ms = (time.perf_counter() - t) * 1000
            reopened.close()
            rows.append([f"{n:,}", f"{cold:.0f}", f"{reopen_ms:.0f}", f"{pct(warm, 50):.1f}", f"{startup_ms:.1f}",
                         len(view.splitlines()), f"{len(view.encode()):,}", len(startup.splitlines())])
    table("MEMORY view rendering (budget 200 lines / 25 KB)",
          ["notes", "cold render ms (parses notes)", "new process ms (cache on disk)", "warm render ms", "startup ms", "view lines", "view bytes",
           "startup lines"], rows, as_json=wants_json())


if __name__ == "__main__":
    main()
