"""Recall speed: p50/p95 on 1,000, 10,000 and 100,000 notes (query embedding included),
catch-up after one write (and the first recall after it), cold rebuild of 10,000 notes with
MiniLM and with BM25 only,
and a rebuild that finds every vector in the embedding cache.

Targets: recall p50 <= 10 ms at 10k and <= 60 ms at 100k; catch-up <= 50 ms;
cold rebuild of 10k <= 60 s (MiniLM) and <= 10 s (BM25 only).
Usage: bench_recall_speed.py [SIZES] [--json], SIZES like 1000,10000,100000
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from mdmem.storage.gitdir import cache_dir

sys.path.insert(0, str(Path(__file__).parent))
from _common import bulk_notes, pct, table, use_embedder, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

QUERIES = ["When is billing allowed to deploy?", "What database does staging run on?",
           "How long is the refund window?", "Who owns the search ranking service?",
           "Which feature flag tool do we use?", "What currency are invoices issued in?"]
TOPICS = ["billing deploys", "staging database", "refund window", "search ranking", "feature flags",
          "invoice currency", "webhook retries", "gateway timeout", "session cache", "api versioning"]
UNIQUE_TEXTS = 5000  # texts repeat beyond this, so 100k notes embed in seconds (the cache dedups)


def text(i: int) -> str:
    j = i % UNIQUE_TEXTS
    return f"{TOPICS[j % len(TOPICS)]}: setting {j} of service {j % 97} is {j * 7919 % 10007} units"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def run(n: int, mode: str) -> tuple[list, list]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["bob", "dana"]}, as_user="mdmem")
        bulk_notes(repo, n, texts=text)
        use_embedder(repo, mode)
        build_ms = timed(lambda: repo.reindex(rebuild=True))
        repo.recall("warm up", as_user="dana")
        times = [timed(lambda q=q: repo.recall(q, as_user="dana", k=5)) for _ in range(5) for q in QUERIES]
        catch, first = [], []
        for i in range(10):
            repo.remember(f"fresh fact {i} about billing", as_user="bob", kind="fact", subject="service:svc1",
                          key=f"fresh{i}", scope="team", team="payments", new_key=True)
            catch.append(timed(lambda: repo.index.sync(worktree=False)))
            # The first recall after a write also opens the new segment and its columns.
            first.append(timed(lambda q=QUERIES[i % len(QUERIES)]: repo.recall(q, as_user="dana", k=5)))
        rows = [[f"{n:,}", mode, f"{pct(times, 50):.1f}", f"{pct(times, 95):.1f}", f"{pct(catch, 50):.1f}",
                 f"{pct(first, 50):.1f}", f"{build_ms / 1000:.1f}"]]
        cached = []
        if n == 10000:
            repo.close()
            shutil.rmtree(cache_dir(repo.root) / "fulltext")  # the vectors go with it; the cache stays
            fresh = MemoryRepo.open(repo.root)
            use_embedder(fresh, mode)
            t = timed(lambda: fresh.reindex(rebuild=True))
            cached = [[f"{n:,}", mode, f"{t / 1000:.1f}"]]
            fresh.close()
        repo.close()
        return rows, cached


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    SIZES = [int(x) for x in args[0].split(",")] if args else [1000, 10000, 100000]
    rows, cached = [], []
    for n in SIZES:
        for mode in ("minilm", "none"):
            r, c = run(n, mode)
            rows += r
            cached += c
    table("recall speed (ms) and rebuild (s)", ["notes", "embedder", "recall p50", "recall p95",
          "catch-up after a write p50", "first recall after it p50", "cold rebuild s"], rows, as_json=wants_json())
    if cached:
        table("rebuild with every vector in the embedding cache (s)", ["notes", "embedder", "rebuild s"], cached,
              as_json=wants_json())
