"""Claude Code's UserPromptSubmit hook: how long a prompt waits for its recalls, measured as
Claude Code runs the hook -- a new process fed the documented JSON on stdin -- at 10,000 notes,
through the repo's daemon (cli/prompt_hook.py) and, for comparison, in the hook's own process.

Target: p50 <= 100 ms through the daemon at 10,000 notes (process start included).
Usage: bench_hooks.py [--notes N] [--embedder minilm|none] [--rounds R] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import bulk_notes, pct, table  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

PROMPTS = ["When is billing allowed to deploy?", "What database does staging run on?",
           "How long is the refund window?", "Who owns the search ranking service?",
           "Which feature flag tool do we use?", "What currency are invoices issued in?"]
TOPICS = ["billing deploys", "staging database", "refund window", "search ranking", "feature flags",
          "invoice currency", "webhook retries", "gateway timeout", "session cache", "api versioning"]


def text(i: int) -> str:
    return f"{TOPICS[i % len(TOPICS)]}: setting {i} of service {i % 97} is {i * 7919 % 10007} units"


def mdmem(args, env, cwd, stdin=None):
    return subprocess.run([sys.executable, "-m", "mdmem.cli.launch", *args], env=env, cwd=cwd, input=stdin,
                          capture_output=True, timeout=900)


def hook_times(root: Path, env: dict, rounds: int) -> list[float]:
    times = []
    for r in range(rounds):
        for prompt in PROMPTS:
            payload = json.dumps({"session_id": "bench", "hook_event_name": "UserPromptSubmit", "cwd": str(root),
                                  "prompt": f"{prompt} ({r})"}).encode()
            t0 = time.perf_counter()
            out = mdmem(["hooks", "claude-code", "run", "UserPromptSubmit", "--repo", str(root), "--as", "bob"],
                        env, root, payload)
            times.append((time.perf_counter() - t0) * 1000)
            if out.returncode != 0 or b"additionalContext" not in out.stdout:
                raise SystemExit(f"bench_hooks: the hook failed: {out.stderr.decode()[:500]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--embedder", default="minilm", choices=["minilm", "none"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "MDMEM_EMBEDDER": args.embedder, "MDMEM_DAEMON_AUTOSTART": "0"}
    env.pop("MDMEM_NO_DAEMON", None)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "mem"
        repo = MemoryRepo.init(root, teams={"payments": ["bob"]}, as_user="bob", embedder="none")
        bulk_notes(repo, args.notes, texts=text)
        repo.close()
        t0 = time.perf_counter()
        built = mdmem(["index", "--rebuild", "--json"], env, root)
        index_s = time.perf_counter() - t0
        if built.returncode != 0:
            raise SystemExit(f"bench_hooks: index failed: {built.stderr.decode()[:500]}")
        started = mdmem(["daemon", "start", "--json"], env, root)
        if started.returncode != 0:
            raise SystemExit(f"bench_hooks: the daemon did not start: {started.stderr.decode()[:500]}")
        try:
            mdmem(["recall", "warm up", "--as", "bob"], env, root)
            through = hook_times(root, env, args.rounds)
            plain = []
            for prompt in PROMPTS * args.rounds:  # the same recall as a plain CLI call, for reference
                t0 = time.perf_counter()
                mdmem(["recall", prompt, "-k", "3", "--json", "--as", "bob"], env, root)
                plain.append((time.perf_counter() - t0) * 1000)
        finally:
            mdmem(["daemon", "stop"], env, root)
        here = hook_times(root, {**env, "MDMEM_NO_DAEMON": "1"}, 1)
    rows = [["through the daemon", args.notes, args.embedder, len(through), f"{pct(through, 50):.0f}",
             f"{pct(through, 95):.0f}", "<= 100" if pct(through, 50) <= 100 else "MISSED (target 100)"],
            ["`mdmem recall` through the daemon", args.notes, args.embedder, len(plain), f"{pct(plain, 50):.0f}",
             f"{pct(plain, 95):.0f}", "(reference)"],
            ["in the hook's process", args.notes, args.embedder, len(here), f"{pct(here, 50):.0f}",
             f"{pct(here, 95):.0f}", "(reference)"]]
    if args.json:
        print(json.dumps({"notes": args.notes, "embedder": args.embedder, "index_seconds": round(index_s, 1),
                          "daemon": {"n": len(through), "p50_ms": round(pct(through, 50), 1),
                                     "p95_ms": round(pct(through, 95), 1)},
                          "recall_cli": {"n": len(plain), "p50_ms": round(pct(plain, 50), 1),
                                         "p95_ms": round(pct(plain, 95), 1)},
                          "in_process": {"n": len(here), "p50_ms": round(pct(here, 50), 1),
                                         "p95_ms": round(pct(here, 95), 1)}}))
    else:
        table("UserPromptSubmit hook: a new process per prompt, as Claude Code runs it",
              ["path", "notes", "embedder", "prompts", "p50 ms", "p95 ms", "target"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
