"""Team sync under contention: 3 clones of one bare remote each write 100 notes (keys overlap
between clones), syncing (with push) after every 10 writes, the clones taking turns in a
random order. After a final round every clone must hold every note, no file may hold a
conflict marker, every pair sync resolved must have both versions in history, every
committed view must equal a fresh render, and no clone may be left mid-merge or mid-rebase.
Prints time per sync (p50/p95/max) and the checks.

The data is generated here (seeded); nothing is read from ../shared/benchmarks.

    .venv/bin/python benchmarks/bench_sync.py [--seed N] [--notes 100] [--clones 3] [--json]
"""
from __future__ import annotations

import argparse
import datetime as dt
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import pct, table  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402
from mdmem.errors import Conflict  # noqa: E402
from mdmem.model.clock import format_time  # noqa: E402
from mdmem.remote import CONFLICT_TRAILER, sync  # noqa: E402

USERS = ["alice", "bob", "dana"]


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def run(seed: int, notes: int, n_clones: int) -> dict:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="mdmem-bench-sync-"))
    try:
        origin = MemoryRepo.init(tmp / "origin", teams={"payments": USERS}, as_user="alice")
        bare = tmp / "remote.git"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
        git(origin.root, "remote", "add", "origin", str(bare))
        git(origin.root, "push", "-q", "origin", "main")
        origin.close()
        clones = []
        for i in range(n_clones):
            path = tmp / f"clone{i}"
            git(tmp, "clone", "-q", str(bare), str(path))
            git(path, "config", "user.name", f"Clone {i}")
            git(path, "config", "user.email", f"clone{i}@example.org")
            clones.append(MemoryRepo.open(path))
        # Keys overlap: each write picks from a shared pool, so clones supersede each other's
        # notes and sometimes write the same key between two syncs (a conflicting pair).
        pool = [f"k{j:03d}" for j in range(int(notes * 1.5))]
        written: set[str] = set()
        clock = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)
        plans = []
        for _ in range(n_clones):
            plans.append([rng.choice(pool) for _ in range(notes)])
        cursor = [0] * n_clones
        sync_ms: list[float] = []
        refused = 0
        conflicts = 0
        while any(c < notes for c in cursor):
            i = rng.choice([k for k in range(n_clones) if cursor[k] < notes])
            repo = clones[i]
            for _ in range(10):
                if cursor[i] >= notes:
                    break
                key = plans[i][cursor[i]]
                cursor[i] += 1
                clock += dt.timedelta(seconds=rng.randint(1, 600))
                repo.remember(f"Note {key} from clone {i} at write {cursor[i]}", as_user=USERS[i % len(USERS)],
                              kind="fact", subject="service:billing", key=key, scope="team", team="payments",
                              new_key=True, now=format_time(clock))
                written.add(key)
            t = time.perf_counter()
            try:
                out = sync(repo, as_user=USERS[i % len(USERS)], push=True, now=format_time(clock))
                conflicts += len(out["conflicts"])
                if out.get("push", "pushed") != "pushed":
                    refused += 1
            except Conflict:
                refused += 1
            sync_ms.append((time.perf_counter() - t) * 1000)
            clones[i] = MemoryRepo.open(repo.root)
        # Final rounds: everyone syncs until nothing moves.
        for _ in range(2):
            for i, repo in enumerate(clones):
                t = time.perf_counter()
                out = sync(repo, as_user=USERS[i % len(USERS)], push=True, now=format_time(clock))
                sync_ms.append((time.perf_counter() - t) * 1000)
                conflicts += len(out["conflicts"])
                clones[i] = MemoryRepo.open(repo.root)
        return check(clones, written, sync_ms, conflicts, refused)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)])


def check(clones, written, sync_ms, conflicts, refused) -> dict:
    heads = {c.store.head() for c in clones}
    missing = markers = stale = unsettled = pairs = pairs_missing = 0
    for repo in clones:
        tree = set(git(repo.root, "ls-files").split())
        missing += sum(f"team/payments/service/billing/fact/{k}.md" not in tree for k in written)
        markers += len([ln for ln in subprocess.run(["git", "-C", str(repo.root), "grep", "-n", "-E",
                                                     "^(<<<<<<<|>>>>>>>|=======$)"], capture_output=True,
                                                    text=True).stdout.splitlines() if ln])
        stale += len(repo.stale_views())
        gitdir = repo.root / ".git"
        unsettled += any((gitdir / n).exists() for n in ("rebase-merge", "rebase-apply", "MERGE_HEAD"))
        unsettled += bool(git(repo.root, "status", "--porcelain").strip())
        for line in git(repo.root, "log", "--format=%B", f"--grep={CONFLICT_TRAILER}:").splitlines():
            if not line.startswith(CONFLICT_TRAILER + ": "):
                continue
            path, live, superseded = line.split(" ")[1:4]
            blobs = {e.blob for e in repo.store.log(path)}
            pairs += 1
            pairs_missing += not ({live.removeprefix("live="), superseded.removeprefix("superseded=")} <= blobs)
    return {"clones": len(clones), "notes_written": len(written), "syncs": len(sync_ms),
            "sync_ms_p50": round(pct(sync_ms, 50), 1), "sync_ms_p95": round(pct(sync_ms, 95), 1),
            "sync_ms_max": round(max(sync_ms), 1), "conflicting_pairs_resolved": conflicts,
            "syncs_refused_or_push_raced": refused, "clones_on_one_head": len(heads) == 1,
            "notes_missing": missing, "conflict_markers": markers, "pairs_checked": pairs,
            "pairs_missing_a_version": pairs_missing, "stale_views": stale, "clones_unsettled": unsettled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--notes", type=int, default=100)
    ap.add_argument("--clones", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = run(a.seed, a.notes, a.clones)
    ok = (out["notes_missing"] == 0 and out["conflict_markers"] == 0 and out["pairs_missing_a_version"] == 0
          and out["stale_views"] == 0 and out["clones_unsettled"] == 0 and out["clones_on_one_head"])
    out["pass"] = ok
    table(f"mdmem sync: {a.clones} clones x {a.notes} notes, sync every 10 writes (seed {a.seed})",
          ["measure", "value"], [[k, v] for k, v in out.items()], as_json=a.json)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
