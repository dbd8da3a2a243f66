"""The team memory server under load: `mdmem serve --http` as its own process, CLIENTS concurrent
clients through the official MCP SDK client (`mcp.client.streamable_http`) over loopback HTTP,
90% recall / 10% remember, spread over 8 people, each client with its own token.

Two ways of loading it, each its own table:
- closed: every client calls again the moment it has its answer (no think time). This is the
  saturation throughput; latency is then mostly queueing (32 callers, one server).
- think: every client pauses between calls as an agent does (exponential, mean --think s,
  default 1 s): the latency an agent sees when 32 of them share the server.

Per scale, embedder and mode: throughput, the server's CPU per call (user+system: the number the
machine's load does not inflate; "the server" is its process with the ones it started, its index
catch-up child among them, throughout), the clients' CPU per call (they share the 2 cores), p50/p99 per
tool, the server's peak RSS, the acknowledged writes found in git afterwards, cross-person hits (a
recall returning another person's private note: must be 0), and the load average before and after.
Then: one run where the server is killed with SIGKILL mid-load and started again (every write it
acknowledged must be in git, the restarted server answers, git status is clean), and a long run
(think mode) sampling the server's RSS every 30 s: --rss-warmup minutes (default 5: the working
notes written, the bounded caches filled), then --rss-minutes (default 10) judged.

Goals (issue 33, 2-core machine): recall p99 <= 50 ms at 10,000 notes with 32 clients; remember
p99 <= 150 ms; 0 lost acknowledged writes; 0 cross-person hits; RSS flat over a 10-minute run.
The closing table says which are met under which mode.

Usage: bench_server.py [--notes 10000,100000] [--embedders none,minilm] [--modes closed,think]
                       [--clients 32] [--seconds 30] [--think 1.0] [--client-procs 2]
                       [--rss-warmup 5] [--rss-minutes 10] [--no-kill] [--keep-data DIR] [--json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import statistics
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


def prepare(tmp: Path, n: int, embedder: str, keep: Path | None = None) -> tuple[Path, Path, list[tuple[str, str]]]:
    """A repository of ``n`` notes with its index built, in ``tmp``; 64 tokens over the 8 people.
    ``keep``: lay it down once there and copy it for each run (100,000 notes take minutes)."""
    if keep is not None:
        kept = keep / f"{n}-{embedder}"
        meta = kept / "bench.json"
        if not meta.exists():
            shutil.rmtree(kept, ignore_errors=True)
            kept.mkdir(parents=True)
            _, _, tokens = prepare(kept, n, embedder)
            meta.write_text(json.dumps(tokens))
        with console.status(f"copying the kept {n:,}-note repository"):
            subprocess.run(["cp", "-a", str(kept / "mem"), str(kept / "tokens.json"), str(tmp)], check=True)
        return tmp / "mem", tmp / "tokens.json", [tuple(t) for t in json.loads(meta.read_text())]  # type: ignore[misc]
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
    # -P: mdmem is the one this script imports (PYTHONPATH, else the installed one), not a
    # checkout that happens to be the working folder: `python -m` puts that first, and an A/B of
    # two worktrees run from a checkout measured that checkout's code twice.
    proc = subprocess.Popen([sys.executable, "-P", "-m", "mdmem.cli.main", "serve", "--http", "127.0.0.1:0",
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
    # Load starts once the server says it is ready (index caught up, caches and model warm), as
    # a supervisor's readiness probe would hold traffic back; before that its first calls load
    # the model and build the caches, which is start-up, not serving under load.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            health = httpx2.get(base + "/healthz", timeout=2)
            if health.status_code == 200 and health.json().get("ready"):
                break
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    return proc, url[0]


def process_tree(pid: int) -> list[int]:
    """The server and the processes it started (an index catch-up), live now."""
    out, todo = [], [pid]
    while todo:
        each = todo.pop()
        out.append(each)
        try:
            for task in Path(f"/proc/{each}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU the server has used, its child processes' included (the ones it has
    waited for and the live ones: the index's catch-up to disk runs in one); the machine is
    shared: CPU per op is the number that load does not inflate."""
    total = 0.0
    for each in process_tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total if total else float("nan")


def rss_mb(pid: int, field: str = "VmHWM") -> float:
    """The resident memory of the server and its live child processes, summed: each one's peak
    (VmHWM) or current (VmRSS, or another field of /proc/PID/status)."""
    total = 0.0
    for each in process_tree(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total if total else float("nan")


class RssSampler(threading.Thread):
    """The server's memory (and the load average) every ``every`` seconds: flat, or growing?
    Each sample: (seconds in, VmRSS, RssAnon, RssFile MB, load). RssAnon is the heap (what a
    leak grows); RssFile is the index's and git's files mapped and read (page cache the kernel
    takes back under pressure, growing with the files)."""

    def __init__(self, pid: int, every: float = 2.0, on_sample=None):
        super().__init__(daemon=True)
        self.pid, self.every, self.on_sample = pid, every, on_sample
        self.samples: list[tuple[float, float, float, float, float]] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> tuple[float, float, float, float, float]:
        return (time.monotonic() - self.t0, rss_mb(self.pid, "VmRSS"), rss_mb(self.pid, "RssAnon"),
                rss_mb(self.pid, "RssFile"), os.getloadavg()[0])

    def run(self) -> None:
        while not self.stop.wait(self.every):
            sample = self.sample()
            self.samples.append(sample)
            if self.on_sample is not None:
                self.on_sample(sample)


# --- the clients (in worker processes, so the client side does not eat the server's CPU in one GIL) ---

async def one_client(url: str, person: str, token: str, idx: int, deadline: float, seed: int,
                     think: float = 0.0, protocol: str = "auto", keys: int = 0, share: float = 0.1) -> dict:
    """One agent's calls, ``share`` of them remembers. ``keys``: 0, each remember a new episode (the notes grow); N, a working
    note under one of N keys of this client's (a supersession: the notes stay as many)."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    rng = random.Random(seed)
    out: dict = {"recall": [], "remember": [], "acked": [], "cross": 0, "errors": [], "ops": 0}
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=protocol) as client:
                j = 0
                while time.time() < deadline:
                    if think:  # an agent between two memory calls (exponential, mean `think` s)
                        await asyncio.sleep(rng.expovariate(1 / think))
                    j += 1
                    if rng.random() < share:
                        t0 = time.perf_counter()
                        result = await client.call_tool("remember", {
                            "text": f"{TOPICS[j % len(TOPICS)]} observed by client {idx} step {j}",
                            **({"kind": "working", "subject": f"task:c{idx}-{j % keys}", "key": "state"} if keys else
                               {"kind": "episode", "subject": "task:bench", "key": f"c{idx}-{j}-{seed}"})})
                        out["remember"].append((time.perf_counter() - t0) * 1000)
                        if result.is_error:
                            out["errors"].append(result.content[0].text[:200])
                        else:
                            answer = result.structured_content or json.loads(result.content[0].text)
                            if answer.get("status") == "committed":
                                out["acked"].append([answer["commit"], answer["path"]])
                            else:
                                out["errors"].append(f"remember: {answer.get('status')}: {answer.get('reason')}")
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


def client_proc(url: str, clients: list[tuple[str, str, int]], ready, go, deadline, queue, think: float,
                protocol: str, nice: int = 0, keys: int = 0, share: float = 0.1) -> None:
    if nice:
        os.nice(nice)  # --client-nice: the server has the CPU first, as on a machine of its own
    import httpx2  # noqa: F401 -- imported before the clock starts (seconds on a loaded machine)
    from mcp.client import Client  # noqa: F401
    from mcp.client.streamable_http import streamable_http_client  # noqa: F401

    ready.put(os.getpid())
    go.wait()
    start = resource.getrusage(resource.RUSAGE_SELF)

    async def run():
        return await asyncio.gather(*[one_client(url, p, t, i, deadline.value, i * 7919 + int(deadline.value), think,
                                                 protocol, keys, share) for p, t, i in clients])
    results = asyncio.run(run())
    used = resource.getrusage(resource.RUSAGE_SELF)
    # This process's CPU for its calls (counted once, on its first client's result).
    results[0]["client_cpu"] = used.ru_utime + used.ru_stime - start.ru_utime - start.ru_stime
    queue.put(results)


def load(url: str, tokens: list[tuple[str, str]], clients: int, procs: int, seconds: float,
         on_half=None, think: float = 0.0, protocol: str = "auto", nice: int = 0, keys: int = 0,
         share: float = 0.1) -> tuple[list[dict], float]:
    """Run the clients for ``seconds`` from the moment every client process is ready; ``on_half``
    is called once they are started (and may wait)."""
    ctx = multiprocessing.get_context("spawn")
    queue, ready, go, deadline = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    assigned = [(tokens[i % len(tokens)][0], tokens[i % len(tokens)][1], i) for i in range(clients)]
    workers = [ctx.Process(target=client_proc, args=(url, assigned[k::procs], ready, go, deadline, queue, think,
                                                     protocol, nice, keys, share)) for k in range(procs)]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    deadline.value = time.time() + seconds
    t0 = time.perf_counter()
    go.set()
    if on_half is not None:
        on_half()
    results: list[dict] = []
    for _ in workers:
        results += queue.get(timeout=seconds + 300)
    wall = time.perf_counter() - t0
    for w in workers:
        w.join(30)
    return results, wall


def in_git(root: Path, acked: list) -> int:
    log = set(subprocess.run(["git", "-C", str(root), "log", "--format=%H", "main"], capture_output=True,
                             text=True).stdout.split())
    tree = set(subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", "main"],
                              capture_output=True, text=True).stdout.split())
    return sum(1 for commit, path in acked if commit in log and path in tree)


def count_notes(root: Path) -> int:
    """Notes at the tip of main (the long run's writes add some: memory may grow with them)."""
    tree = subprocess.run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", "main"], capture_output=True,
                          text=True).stdout.split()
    return sum(1 for path in tree if path.endswith(".md") and path.startswith(("team/", "private/")))


def summarise(results: list[dict]) -> dict:
    merged: dict = {"recall": [], "remember": [], "acked": [], "cross": 0, "errors": [], "ops": 0}
    for r in results:
        for k in ("recall", "remember", "acked", "errors"):
            merged[k] += r[k]
        merged["cross"] += r["cross"]
        merged["ops"] += r["ops"]
        merged["client_cpu"] = merged.get("client_cpu", 0.0) + r.get("client_cpu", 0.0)
    return merged


GOAL_RECALL_P99, GOAL_REMEMBER_P99 = 50.0, 150.0
COLUMNS = ["notes", "embedder", "mode", "protocol", "clients", "client nice", "think s", "ops/s", "server CPU ms/op", "clients CPU ms/op",
           "recall p50 ms", "recall p99 ms", "remember p50 ms", "remember p99 ms", "peak RSS MB",
           "acked writes in git", "cross-person hits", "errors", "load before", "load after"]


class Server:
    """A server process on a fresh copy of the prepared repository."""

    def __init__(self, root: Path, tokens: Path, embedder: str):
        self.root, self.tokens, self.embedder = root, tokens, embedder
        self.proc, self.url = start_server(root, tokens, embedder)

    def restart(self) -> None:
        self.proc, self.url = start_server(self.root, self.tokens, self.embedder)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


def warm_up(server: Server, tokens: list[tuple[str, str]]) -> None:
    """A few seconds of calls first (not counted): the first calls of a process read what later
    ones find in memory, and the question is the server's steady answer."""
    load(server.url, tokens, 4, 1, 4.0)


def measure(server: Server, tokens: list[tuple[str, str]], n: int, embedder: str, mode: str, args) -> tuple[list, dict]:
    think = args.think if mode == "think" else 0.0
    console.print(f"[{n:,} notes, {embedder}, {mode}] {args.clients} clients for {args.seconds:g} s"
                  + (f", think {think:g} s" if think else ""))
    before = os.getloadavg()[0]
    cpu0 = cpu_seconds(server.proc.pid)
    results, wall = load(server.url, tokens, args.clients, args.client_procs, args.seconds, think=think,
                         protocol=args.protocol, nice=args.client_nice, share=args.remember_share)
    cpu = cpu_seconds(server.proc.pid) - cpu0
    m = summarise(results)
    found = in_git(server.root, m["acked"])
    ops = max(1, m["ops"])
    row = [f"{n:,}", embedder, mode, args.protocol, args.clients, args.client_nice, f"{think:g}", f"{m['ops'] / wall:.0f}", f"{cpu * 1000 / ops:.1f}",
           f"{m.get('client_cpu', 0.0) * 1000 / ops:.1f}",
           f"{pct(m['recall'], 50):.1f}", f"{pct(m['recall'], 99):.1f}",
           f"{pct(m['remember'], 50):.1f}", f"{pct(m['remember'], 99):.1f}",
           f"{rss_mb(server.proc.pid):.0f}", f"{found}/{len(m['acked'])}", m["cross"], len(m["errors"]),
           f"{before:.1f}", f"{os.getloadavg()[0]:.1f}"]
    if m["errors"]:
        console.print(f"errors (first 3): {m['errors'][:3]}")
    console.print(f"  {dict(zip(COLUMNS, row))}")  # as it comes: a long run stopped early keeps its rows
    verdict = {"notes": n, "embedder": embedder, "mode": mode if not args.client_nice else f"{mode}, clients nice "
               f"{args.client_nice}", "clients": args.clients,
               "recall_p99": pct(m["recall"], 99), "remember_p99": pct(m["remember"], 99),
               "lost": len(m["acked"]) - found, "cross": m["cross"], "errors": len(m["errors"])}
    return row, verdict


def kill_run(server: Server, tokens: list[tuple[str, str]], args) -> list:
    """SIGKILL once the load has made some writes, in the middle of it; then a restart."""
    server.restart()
    root = server.root

    def commits() -> int:
        return int(subprocess.run(["git", "-C", str(root), "rev-list", "--count", "main"],
                                  capture_output=True, text=True).stdout or 0)

    def kill_mid_load():
        start, t0 = commits(), time.monotonic()
        while commits() < start + 20 and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        server.proc.send_signal(signal.SIGKILL)

    results, _ = load(server.url, tokens, args.clients, args.client_procs, max(20.0, args.seconds),
                      on_half=kill_mid_load)
    server.proc.wait(30)
    k = summarise(results)
    found = in_git(root, k["acked"])
    server.restart()  # the restart picks up (a commit's crash journal is repaired on open)
    again = asyncio.run(one_client(server.url, tokens[0][0], tokens[0][1], 0, time.time() + 8.0, 1))
    answered = len(again["recall"]) + len(again["remember"]) - len(again["errors"])
    server.stop()
    # After the stop: a running server writes git's index 0.2 s after a commit (one rewrite for a
    # burst), so a status read while its last write's entries were due said "modified".
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True).stdout
    if status:
        console.print(f"git status after the restarted server stopped:\n{status[:2000]}")
    return [len(k["acked"]), found, answered, status == "", f"{os.getloadavg()[0]:.1f}"]


def rss_run(server: Server, tokens: list[tuple[str, str]], n: int, embedder: str, args) -> tuple[list, dict]:
    """--rss-warmup minutes of think-mode load, then --rss-minutes more judged: the server's RSS
    every 30 s throughout. The warm-up writes every client's working notes (the notes then stay
    as many) and fills the server's bounded caches: libgit2's object cache (2 MB of raw objects,
    ~5 MB parsed), the validated notes (8 MB), the view bullets. A jemalloc heap profile over 20
    minutes had its live allocations peak at minute ~11 and fall after (docs/decisions.md)."""
    seconds, warmup = args.rss_minutes * 60, args.rss_warmup * 60
    console.print(f"[{n:,} notes, {embedder}] RSS over {args.rss_warmup:g} + {args.rss_minutes:g} min: "
                  f"{args.clients} clients, think {args.think:g} s, {args.remember_share:.0%} remembers")
    sampler = RssSampler(server.proc.pid, every=30.0, on_sample=lambda s: console.print(
        f"  {s[0] / 60:4.1f} min: RSS {s[1]:.0f} MB (anonymous {s[2]:.0f}, files {s[3]:.0f}), load {s[4]:.1f}"))
    sampler.samples.append(sampler.sample())
    sampler.start()
    def run(secs: float) -> list[dict]:
        return load(server.url, tokens, args.clients, args.client_procs, secs, think=args.think,
                    nice=args.client_nice, keys=args.rss_keys, share=args.remember_share)[0]

    results = run(warmup) if warmup else []
    if warmup:
        console.print(f"  warm-up over at {(time.monotonic() - sampler.t0) / 60:.1f} min; judged from here")
    judged_from = time.monotonic() - sampler.t0 - 1  # the sample taken as the warm-up ended counts
    notes_before = count_notes(server.root)
    results += run(seconds)
    sampler.stop.set()
    sampler.samples.append(sampler.sample())
    m = summarise(results)
    if m["errors"]:
        console.print(f"errors (first 3): {m['errors'][:3]}")
    found = in_git(server.root, m["acked"])
    samples = sampler.samples
    # Flat: over the judged minutes the heap (RssAnon) grows by at most 10%, from the median of its
    # first three samples to the median of its last three (one sample swings +-8 MB with what a
    # call had in hand). RSS as a whole also counts the index's and git's files read through the
    # page cache: reported beside it, not judged.
    judged = [s for s in samples if s[0] >= judged_from] or samples
    first, last = statistics.median(s[2] for s in judged[:3]), statistics.median(s[2] for s in judged[-3:])
    growth = (last - first) / first if first else float("nan")
    slope = _slope([(s[0] / 60, s[2]) for s in judged])
    rows = [[f"{t / 60:.1f}" + ("" if t >= judged_from else " (warm-up)"), f"{rss:.0f}", f"{anon:.0f}",
             f"{files:.0f}", f"{la:.1f}"] for t, rss, anon, files, la in samples]
    verdict = {"notes": n, "embedder": embedder, "minutes": args.rss_minutes, "warmup": args.rss_warmup,
               "ops": m["ops"], "notes_before": notes_before, "notes_after": count_notes(server.root),
               "from_mb": first, "end_mb": last, "growth": growth, "slope": slope, "flat": growth <= 0.10,
               "start_mb": samples[0][2], "lost": len(m["acked"]) - found, "cross": m["cross"],
               "errors": len(m["errors"]), "recall_p99": pct(m["recall"], 99),
               "remember_p99": pct(m["remember"], 99)}
    return rows, verdict


def _slope(points: list[tuple[float, float]]) -> float:
    """Least squares: MB a minute (nan with fewer than two minutes to fit)."""
    try:
        return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope
    except statistics.StatisticsError:
        return float("nan")


def goals(verdicts: list[dict], kills: list, rss: dict | None) -> list[list]:
    """Which goals are met, under which mode."""
    out = []
    for v in verdicts:
        where = f"{v['notes']:,} {v['embedder']} {v['mode']}"
        if v["notes"] == 10_000 and v["clients"] == 32:
            out.append(["recall p99 <= 50 ms (10k, 32 clients)", where, f"{v['recall_p99']:.0f} ms",
                        "met" if v["recall_p99"] <= GOAL_RECALL_P99 else "NOT met"])
        out.append(["remember p99 <= 150 ms", where, f"{v['remember_p99']:.0f} ms",
                    "met" if v["remember_p99"] <= GOAL_REMEMBER_P99 else "NOT met"])
        out.append(["0 lost acknowledged writes", where, v["lost"], "met" if v["lost"] == 0 else "NOT met"])
        out.append(["0 cross-person hits", where, v["cross"], "met" if v["cross"] == 0 else "NOT met"])
    for k in kills:
        out.append(["SIGKILL mid-load: every acknowledged write in git", f"{k[0]} {k[1]}", f"{k[3]}/{k[2]}",
                    "met" if k[2] == k[3] and k[4] > 0 and k[5] else "NOT met"])
    if rss is not None:
        out.append(["RSS flat over the long run (the heap, RssAnon)",
                    f"{rss['notes']:,} {rss['embedder']} think, {rss['minutes']:g} min after "
                    f"{rss['warmup']:g} min of warm-up",
                    f"{rss['from_mb']:.0f} -> {rss['end_mb']:.0f} MB ({rss['growth']:+.1%}, "
                    f"{rss['slope']:+.2f} MB/min; {rss['start_mb']:.0f} MB at the start); notes "
                    f"{rss['notes_before']:,} -> {rss['notes_after']:,}",
                    "met" if rss["flat"] else "NOT met"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", default="10000,100000")
    parser.add_argument("--embedders", default="none,minilm")
    parser.add_argument("--modes", default="closed,think", help="closed (no think time), think (--think s mean)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--think", type=float, default=1.0,
                        help="think mode: mean seconds a client waits between calls (exponential; default 1)")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--client-nice", type=int, default=0,
                        help="run the client processes at this niceness (10: the kernel gives the server the CPU "
                             "first, as when the agents run on other machines; the clients' CPU still counts)")
    parser.add_argument("--protocol", default="auto", choices=["auto", "legacy"],
                        help="the SDK client's mode: auto (2026-07-28, one exchange per call) or legacy (the "
                             "initialize handshake, which clients of earlier protocol versions speak)")
    parser.add_argument("--rss-minutes", type=float, default=10.0,
                        help="the long run sampling RSS every 30 s, at the first scale and embedder (0: none)")
    parser.add_argument("--rss-warmup", type=float, default=5.0,
                        help="minutes of the same load before the long run's judged minutes: every client's "
                             "working notes written, the server's bounded caches filled (0: none)")
    parser.add_argument("--rss-keys", type=int, default=8,
                        help="the long run's remembers: working notes under this many keys per client, superseded "
                             "in turn (the notes stay as many: memory that grows then is a leak); 0: a new episode "
                             "each (memory grows with the index, which the server holds in memory)")
    parser.add_argument("--remember-share", type=float, default=0.1,
                        help="each client's share of remembers (default 0.1, the issue's mix; 0: recall "
                             "alone; 0.5 in the long run: five times the writes, to see in minutes "
                             "whether memory that grows with writes levels off)")
    parser.add_argument("--no-kill", dest="kill", action="store_false",
                        help="skip the SIGKILL-mid-load run (made at the first scale and embedder)")
    parser.add_argument("--keep-data", type=Path, metavar="DIR",
                        help="lay each scale down once in DIR and copy it per run (100,000 notes take minutes)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"closed", "think"}:
        raise SystemExit(f"--modes: {args.modes!r}; give closed, think or both")
    rows, verdicts, kills, rss_rows, rss = [], [], [], [], None
    first = True
    for n in [int(x) for x in args.notes.split(",")]:
        for embedder in args.embedders.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                root, tokens_path, tokens = prepare(Path(tmp), n, embedder, args.keep_data)
                server = Server(root, tokens_path, embedder)
                warm_up(server, tokens)
                for mode in modes:
                    row, verdict = measure(server, tokens, n, embedder, mode, args)
                    rows.append(row)
                    verdicts.append(verdict)
                if first and args.rss_minutes > 0:
                    rss_rows, rss = rss_run(server, tokens, n, embedder, args)
                code = server.stop()
                if code != 0:
                    console.print(f"the server ended with {code} on SIGTERM")
                if first and args.kill:
                    kills.append([f"{n:,}", embedder, *kill_run(server, tokens, args)])
                first = False
    table("mdmem serve --http under load (SDK client, loopback; load = 1-min load average of the machine)",
          COLUMNS, rows, as_json=args.json)
    if kills:
        table("SIGKILL mid-load, then restart", ["notes", "embedder", "acked before kill", "found in git",
                                                 "answers after restart", "git status clean", "load"], kills,
              as_json=args.json)
    if rss is not None:
        table(f"server RSS every 30 s over {args.rss_warmup:g} + {args.rss_minutes:g} min ({rss['notes']:,} notes, {rss['embedder']}, "
              f"think {args.think:g} s; {rss['ops']} calls, {rss['lost']} lost writes, {rss['cross']} cross hits, "
              f"{rss['errors']} errors, recall/remember p99 {rss['recall_p99']:.0f}/{rss['remember_p99']:.0f} ms)",
              ["minute", "RSS MB", "anonymous MB", "files MB", "load"], rss_rows, as_json=args.json)
    table("goals (issue 33)", ["goal", "run", "measured", "verdict"], goals(verdicts, kills, rss), as_json=args.json)


if __name__ == "__main__":
    main()
