"""The team memory server under load: `mdmem serve --http` as its own process, CLIENTS concurrent
clients through the official MCP SDK client (`mcp.client.streamable_http`) over loopback HTTP,
90% recall / 10% remember, spread over 8 people, each client with its own token.

Reports per scale and embedder: throughput, p50/p99 per tool, the server's peak RSS, the
acknowledged writes found in git afterwards, and cross-person hits (a recall returning another
person's private note: must be 0). Then a run where the server is killed with SIGKILL mid-load
and started again: every write it acknowledged must be in git, and the restarted server answers.

Goals (issue 33, 2-core machine): recall p99 <= 50 ms at 10,000 notes with 32 clients; remember
p99 <= 150 ms; 0 lost acknowledged writes; 0 cross-person hits.

Usage: bench_server.py [--notes 10000[,100000]] [--clients 32] [--seconds 30] [--embedders none,minilm]
                       [--client-procs 2] [--think 0] [--no-kill] [--json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import console, pct, table  # noqa: E402

PEOPLE = [f"p{i}" for i in range(8)]
TOPICS = ["billing deploys", "staging database", "refund window", "search ranking", "feature flags",
          "invoice currency", "webhook retries", "gateway timeout", "session cache", "api versioning"]
QUERIES = ["When is billing allowed to deploy?", "What database does staging run on?",
           "How long is the refund window?", "Who owns the search ranking service?",
           "Which feature flag tool do we use?", "What currency are invoices issued in?",
           "How often are webhooks retried?", "What is the gateway timeout?"]
UNIQUE_TEXTS = 5000  # texts repeat beyond this, so large scales embed in minutes (the cache dedups)


def text(i: int, owner: str | None) -> str:
    j = i % UNIQUE_TEXTS
    mine = f" (private to {owner})" if owner else ""
    return f"{TOPICS[j % len(TOPICS)]}: setting {j} of service {j % 97} is {j * 7919 % 10007} units{mine}"


def lay_down(root: Path, n: int) -> None:
    """Half the notes in the team everyone is in, half private, spread over the 8 people; one
    commit per writer, so each note's latest commit is its owner's (verify trusts it)."""
    from ulid import ULID

    from mdmem.model.clock import resolve_now
    from mdmem.model.layout import keyed_path
    from mdmem.model.note import Note

    when = resolve_now(None)
    groups: dict[str, list[Path]] = {}
    for i in range(n):
        owner = PEOPLE[i % len(PEOPLE)]
        private = i % 2 == 1
        subject = f"service:svc{i % max(1, n // 50)}"
        scope_root = f"private/{owner}" if private else "team/eng"
        note = Note(id=str(ULID()), kind="fact", subject=subject, key=f"k{i}", scope="private" if private else "team",
                    team=None if private else "eng", owner=owner, source="user", valid_from=when,
                    text=text(i, owner if private else None))
        path = root / keyed_path(scope_root, subject, "fact", f"k{i}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(note.dumps())
        groups.setdefault(owner, []).append(path)
    for owner, paths in groups.items():
        for start in range(0, len(paths), 2000):
            subprocess.run(["git", "-C", str(root), "add", "--", *[str(p) for p in paths[start:start + 2000]]],
                           check=True)
        subprocess.run(["git", "-C", str(root), "-c", f"user.name={owner}", "-c", f"user.email={owner}@mdmem.invalid",
                        "commit", "-q", "--no-verify", "-m",
                        f"import\n\nMemory-Op: import\nMemory-Actor: {owner}\nMemory-Source: system:import"],
                       check=True)


def prepare(tmp: Path, n: int, embedder: str) -> tuple[Path, Path, list[tuple[str, str]]]:
    from mdmem import MemoryRepo
    from mdmem.auth.static_tokens import TokenFile

    repo = MemoryRepo.init(tmp / "mem", teams={"eng": PEOPLE}, as_user="mdmem")
    root = repo.root
    repo.close()
    with console.status(f"laying down {n:,} notes"):
        lay_down(root, n)
    repo = MemoryRepo.open(root, embedder=embedder)
    t0 = time.perf_counter()
    with console.status(f"building the index ({embedder})"):
        repo.reindex(rebuild=True)
    console.print(f"index of {n:,} notes ({embedder}) built in {time.perf_counter() - t0:.1f} s")
    repo.close()
    tokens = TokenFile(tmp / "tokens.json")
    return root, tokens.path, [(PEOPLE[i % len(PEOPLE)],
                                tokens.add(PEOPLE[i % len(PEOPLE)], f"bench{i}", frozenset({"read", "write"}))[1])
                               for i in range(64)]


def start_server(root: Path, tokens: Path, embedder: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "MDMEM_EMBEDDER": embedder, "MDMEM_NO_DAEMON": "1"}
    env.pop("MDMEM_USER", None)
    proc = subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", "serve", "--http", "127.0.0.1:0",
                             "--repo", str(root), "--tokens", str(tokens), "--rate", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    url: list[str] = []
    got = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if not url and line.startswith("mdmem: serving "):
                url.append(line.split()[2])
                got.set()
            elif "Traceback" in line or "error" in line.lower():
                sys.stderr.write(f"server: {line}")
        got.set()

    threading.Thread(target=drain, daemon=True).start()
    if not got.wait(120) or not url:
        proc.kill()
        raise SystemExit("the server did not start")
    import httpx2
    base = url[0].rsplit("/mcp", 1)[0]
    for _ in range(600):
        try:
            if httpx2.get(base + "/healthz", timeout=2).status_code == 200:
                break
        except httpx2.HTTPError:
            time.sleep(0.1)
    return proc, url[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used (the machine is shared: CPU per op is the number
    that load does not inflate)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def rss_mb(pid: int, field: str = "VmHWM") -> float:
    """The process's peak (VmHWM) or current (VmRSS) resident memory."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class RssSampler(threading.Thread):
    """The server's current RSS every few seconds of the run: flat, or growing?"""

    def __init__(self, pid: int, every: float = 2.0):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.samples.append(rss_mb(self.pid, "VmRSS"))


# --- the clients (in worker processes, so the client side does not eat the server's CPU in one GIL) ---

async def one_client(url: str, person: str, token: str, idx: int, deadline: float, seed: int,
                     think: float = 0.0) -> dict:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    rng = random.Random(seed)
    out: dict = {"recall": [], "remember": [], "acked": [], "cross": 0, "errors": [], "ops": 0}
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                j = 0
                while time.time() < deadline:
                    if think:  # an agent between two memory calls (exponential, mean `think` s)
                        await asyncio.sleep(rng.expovariate(1 / think))
                    j += 1
                    if rng.random() < 0.1:
                        t0 = time.perf_counter()
                        result = await client.call_tool("remember", {
                            "text": f"{TOPICS[j % len(TOPICS)]} observed by client {idx} step {j}",
                            "kind": "episode", "subject": "task:bench", "key": f"c{idx}-{j}-{seed}"})
                        out["remember"].append((time.perf_counter() - t0) * 1000)
                        if result.is_error:
                            out["errors"].append(result.content[0].text[:200])
                        else:
                            answer = result.structured_content or json.loads(result.content[0].text)
                            if answer.get("status") == "committed":
                                out["acked"].append([answer["commit"], answer["path"]])
                            else:
                                out["errors"].append(f"remember: {answer.get('status')}")
                    else:
                        t0 = time.perf_counter()
                        result = await client.call_tool("recall", {"query": rng.choice(QUERIES), "k": 5})
                        out["recall"].append((time.perf_counter() - t0) * 1000)
                        if result.is_error:
                            out["errors"].append(result.content[0].text[:200])
                        else:
                            answer = result.structured_content or json.loads(result.content[0].text)
                            for hit in answer.get("hits", []):
                                path = hit.get("path") or hit.get("note", {}).get("path", "")
                                others = path.startswith("private/") and not path.startswith(f"private/{person}/")
                                said = "(private to p" in hit.get("text", "") and \
                                    f"(private to {person})" not in hit.get("text", "")
                                if others or said:
                                    out["cross"] += 1
                    out["ops"] += 1
    except BaseException as exc:  # noqa: BLE001 -- the kill run ends clients this way
        out["errors"].append(f"{type(exc).__name__}: {str(exc)[:200]}")
    return out


def client_proc(url: str, clients: list[tuple[str, str, int]], deadline: float, queue, think: float) -> None:
    async def run():
        return await asyncio.gather(*[one_client(url, p, t, i, deadline, i * 7919 + int(deadline), think)
                                      for p, t, i in clients])
    queue.put(asyncio.run(run()))


def load(url: str, tokens: list[tuple[str, str]], clients: int, procs: int, seconds: float,
         on_half=None, think: float = 0.0) -> tuple[list[dict], float]:
    """Run the clients for ``seconds``; ``on_half`` is called once they are started (and may wait)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    deadline = time.time() + seconds
    assigned = [(tokens[i][0], tokens[i][1], i) for i in range(clients)]
    workers = [ctx.Process(target=client_proc, args=(url, assigned[k::procs], deadline, queue, think)) for k in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    if on_half is not None:
        on_half()
    results: list[dict] = []
    for _ in workers:
        results += queue.get(timeout=seconds + 300)
    for w in workers:
        w.join(30)
    return results, time.perf_counter() - t0


def in_git(root: Path, acked: list) -> int:
    log = set(subprocess.run(["git", "-C", str(root), "log", "--format=%H", "main"], capture_output=True,
                             text=True).stdout.split())
    tree = set(subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", "main"],
                              capture_output=True, text=True).stdout.split())
    return sum(1 for commit, path in acked if commit in log and path in tree)


def summarise(results: list[dict]) -> dict:
    merged: dict = {"recall": [], "remember": [], "acked": [], "cross": 0, "errors": [], "ops": 0}
    for r in results:
        for k in ("recall", "remember", "acked", "errors"):
            merged[k] += r[k]
        merged["cross"] += r["cross"]
        merged["ops"] += r["ops"]
    return merged


def run_one(n: int, embedder: str, args) -> tuple[list, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        root, tokens_path, tokens = prepare(Path(tmp), n, embedder)
        proc, url = start_server(root, tokens_path, embedder)
        console.print(f"[{n:,} notes, {embedder}] {args.clients} clients for {args.seconds:g} s against {url}")
        load_before = os.getloadavg()[0]
        cpu0 = cpu_seconds(proc.pid)
        sampler = RssSampler(proc.pid)
        sampler.start()
        results, wall = load(url, tokens, args.clients, args.client_procs, args.seconds, think=args.think)
        sampler.stop.set()
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = rss_mb(proc.pid)
        third = max(1, len(sampler.samples) // 3)
        # RSS over the run: the mean of its first third and of its last third
        drift = (f"{sum(sampler.samples[:third]) / third:.0f} -> {sum(sampler.samples[-third:]) / third:.0f}"
                 if sampler.samples else "-")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        m = summarise(results)
        found = in_git(root, m["acked"])
        row = [f"{n:,}", embedder, args.clients, f"{args.think:g}", f"{m['ops'] / wall:.0f}", f"{cpu * 1000 / max(1, m['ops']):.1f}",
               f"{pct(m['recall'], 50):.1f}", f"{pct(m['recall'], 99):.1f}",
               f"{pct(m['remember'], 50):.1f}", f"{pct(m['remember'], 99):.1f}",
               f"{rss:.0f}", drift, f"{found}/{len(m['acked'])}", m["cross"], len(m["errors"]),
               f"{load_before:.1f}", code]
        kill = {}
        if args.kill:
            proc, url = start_server(root, tokens_path, embedder)

            def commits() -> int:
                return int(subprocess.run(["git", "-C", str(root), "rev-list", "--count", "main"],
                                          capture_output=True, text=True).stdout or 0)

            def kill_mid_load():
                # Killed once the load has made some writes, in the middle of it.
                start, t0 = commits(), time.monotonic()
                while commits() < start + 20 and time.monotonic() - t0 < 60:
                    time.sleep(0.2)
                proc.send_signal(signal.SIGKILL)

            results, _ = load(url, tokens, args.clients, args.client_procs, max(20.0, args.seconds),
                              on_half=kill_mid_load)
            proc.wait(30)
            k = summarise(results)
            found_k = in_git(root, k["acked"])
            proc, url = start_server(root, tokens_path, embedder)  # the restart picks up (journal repair)
            again = asyncio.run(one_client(url, tokens[0][0], tokens[0][1], 0, time.time() + 3.0, 1))
            answered = len(again["recall"]) + len(again["remember"]) - len(again["errors"])
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
            kill = {"acked": len(k["acked"]), "found": found_k, "after_restart_answers": answered,
                    "status_clean": subprocess.run(["git", "-C", str(root), "status", "--porcelain"],
                                                   capture_output=True, text=True).stdout == ""}
        if m["errors"]:
            console.print(f"errors (first 3): {m['errors'][:3]}")
        return row, kill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", default="10000")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--embedders", default="none,minilm")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean seconds a client waits between calls (0: back to back, the worst case)")
    parser.add_argument("--no-kill", dest="kill", action="store_false")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, kills = [], []
    for n in [int(x) for x in args.notes.split(",")]:
        for embedder in args.embedders.split(","):
            row, kill = run_one(n, embedder, args)
            rows.append(row)
            if kill:
                kills.append([f"{n:,}", embedder, kill["acked"], kill["found"], kill["after_restart_answers"],
                              kill["status_clean"]])
    table("mdmem serve --http under load (SDK client, loopback)",
          ["notes", "embedder", "clients", "think s", "ops/s", "server CPU ms/op", "recall p50 ms", "recall p99 ms", "remember p50 ms",
           "remember p99 ms", "peak RSS MB", "RSS MB first->last third", "acked writes in git", "cross-person hits", "errors",
           "load before", "exit"], rows, as_json=args.json)
    if kills:
        table("SIGKILL mid-load, then restart", ["notes", "embedder", "acked before kill", "found in git",
                                                 "answers after restart", "git status clean"], kills,
              as_json=args.json)


if __name__ == "__main__":
    main()
