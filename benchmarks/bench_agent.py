"""Speed as an agent sees it: notes of ordinary length (~60 words), recall back to
back AND after idle pauses (an agent thinks between calls), write until searchable (remember
returns, then the next recall finds the note), a hand edit found by the next recall, bulk
import, a cold rebuild, and one CLI call (wall time and peak memory), at 1k/10k/100k notes.

Targets: recall p50 <= 10 ms at 10k and <= 25 ms at 100k (default embedder), p95 <= 2x p50,
back to back and after pauses; write-until-searchable p50 <= 25 ms at 10k, <= 50 ms at 100k;
remember p50 <= 15 ms at 100k; import of 10,000 notes written and searchable <= 60 s (default
embedder) / <= 10 s (BM25 only); cold rebuild of 10k <= 60 s (default embedder); `mdmem recall`
<= 300 ms wall and <= 250 MB peak at 10k.

At 100k the default embedder is skipped unless --embed-100k is given: embedding 100,000
unique notes takes tens of minutes on 2 cores, so 100k is measured BM25 only (said in the table).

basic-memory (a peer) has no side-by-side row: every release on PyPI requires Python >= 3.12
and this project runs on 3.11, so it cannot be installed into this process.

The process keeps its search caches warm, as the MCP server and the daemon do (NoteIndex.keep_warm,
search/warm.py: every long posting list read and weighed when it starts, again when idle after a
write); "warm" says how long that took; --skip warm measures a process that does not.

"(git index deferred)": the same writes with GitStore.index_delay set, as the MCP server runs
(git's index written 0.2 s after a burst of writes instead of with every commit).

Usage: bench_agent.py [--sizes 1000,10000,100000] [--modes minilm,none] [--pause 1.2]
                      [--skip import,cli,rebuild,warm] [--embed-100k] [--cache DIR] [--bulk N]
                      [--fixtures DIR] [--bulk-only] [--json]
--cache DIR keeps each size's embedding cache there between runs (the rebuild column then
says "cached vectors": it measures reading, indexing and cache lookups, not the embedder).
--bulk-only prints only the bulk table: import of --bulk N (default 10,000) ~60-word notes through
remember_many, written and searchable, then a cold rebuild of that repo (index and embedding
cache removed), per --modes; wall and CPU seconds with the load average (--skip rebuild: import only);
"(writes N)": when the last batch was committed (the rest is the catch-up that makes them searchable).
--fixtures DIR keeps each size's filled repo there (built once, reused; with --skip rebuild the
index is only caught up), so a 100k run need not fill 100,000 notes every time.
Temporary repos (the bulk import, sizes without --fixtures) go under $TMPDIR (Python's tempfile):
on one test machine /tmp made and filled folders ~8x slower than the same disk elsewhere
(mkdir 0.39-0.77 ms against 0.04-0.09, a 500-byte file 0.46-0.63 against 0.04-0.07), which a
bulk import (a file and ~0.7 folders a note) pays; say where the run was made.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from mdmem.storage.gitdir import cache_dir

sys.path.insert(0, str(Path(__file__).parent))
from _common import pct, table, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

# --- a generator of ordinary notes ----------------------------------------------------
SERVICES = ["billing", "checkout", "search", "ledger", "payouts", "gateway", "auth", "invoicing", "catalog",
            "shipping", "notifications", "reporting", "fraud", "onboarding", "pricing", "inventory"]
THINGS = ["deploy window", "database", "cache", "queue", "feature flag", "rate limit", "retry policy", "timeout",
          "on-call rotation", "runbook", "schema migration", "backup schedule", "alert threshold", "api version",
          "dashboard", "load balancer", "certificate", "secret rotation", "batch job", "webhook"]
PEOPLE = ["alice", "bob", "carol", "dana", "erin", "frank", "grace", "heidi", "ivan", "judy"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
OPENERS = [
    "The {svc} team agreed that the {thing} is {val} from now on, after {who} raised it in the weekly review.",
    "For {svc}, the {thing} changed to {val}; {who} made the change and wrote the runbook entry.",
    "{who} confirmed the {svc} {thing} stays at {val} until the next quarterly planning session.",
    "We moved the {svc} {thing} to {val} because the old setting caused pages on {day} nights.",
]
MIDDLES = [
    "Before changing it again, check the {other} and ask {who2} who owns the dependency on the {svc2} side.",
    "The reason is that the {svc2} service reads the same {other} and broke twice when it drifted.",
    "Staging mirrors production here, except that staging resets the {other} every {day} morning.",
    "There is a dashboard for this in the {svc2} folder; the alert fires when the {other} exceeds {num} per minute.",
    "Customers noticed the last incident, so support wants a heads-up in the {svc} channel before any change.",
]
CLOSERS = [
    "Ticket {ticket} has the full discussion and the numbers from the load test.",
    "If in doubt, {who} is the person to ask; {who2} is the backup during holidays.",
    "This was last verified on {day} and should be reviewed again in {num} days.",
    "Do not change it during the freeze that starts every {day} at {hour}:00 UTC.",
]


def note_text(i: int, seed: int = 0) -> tuple[str, str, str]:
    """(subject, key, ~60-word text) for note ``i``: every text is distinct."""
    r = random.Random(i * 1000003 + seed)
    svc, svc2 = r.choice(SERVICES), r.choice(SERVICES)
    thing, other = r.choice(THINGS), r.choice(THINGS)
    who, who2 = r.sample(PEOPLE, 2)
    slots = dict(svc=svc, svc2=svc2, thing=thing, other=other, who=who, who2=who2, day=r.choice(DAYS),
                 val=f"{r.randint(2, 900)} {r.choice(['ms', 'seconds', 'minutes', 'requests', 'GB', 'workers'])}",
                 num=r.randint(2, 90), ticket=f"OPS-{1000 + i}", hour=r.randint(0, 23))
    parts = [r.choice(OPENERS), r.choice(MIDDLES), r.choice(MIDDLES), r.choice(CLOSERS)]
    text = " ".join(p.format(**slots) for p in parts)
    return f"service:{svc}{i % 97}", f"{thing.replace(' ', '-')}.{i}", text


def question(i: int) -> str:
    r = random.Random(i)
    return f"What is the {r.choice(SERVICES)} {r.choice(THINGS)} and who decided it?"


def fill(repo, n: int, *, team="payments", owner="bob") -> None:
    """Lay down ``n`` notes in one commit with git itself (a fixture, not the path measured)."""
    from mdmem.model.clock import resolve_now
    from mdmem.model.layout import keyed_path
    from mdmem.model.note import Note
    from ulid import ULID

    when = resolve_now(None)
    for i in range(n):
        subject, key, text = note_text(i)
        note = Note(id=str(ULID()), kind="fact", subject=subject, key=key, scope="team", team=team, owner=owner,
                    source="user", valid_from=when, text=text)
        path = repo.root / keyed_path(f"team/{team}", subject, "fact", key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(note.dumps())
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo.root), "-c", f"user.name={owner}", "-c", f"user.email={owner}@mdmem.invalid",
                    "commit", "-q", "--no-verify", "-m",
                    f"import {n} notes\n\nMemory-Op: import\nMemory-Actor: {owner}\nMemory-Source: system:import"],
                   check=True)


def use_embedder(repo, mode: str) -> None:
    """Switch the repo's embedder in process (this script also drives older mdmem versions,
    for the before/after tables)."""
    from mdmem.config import EmbedderConfig

    repo.config.embedder = EmbedderConfig(backend=mode)
    os.environ.pop("MDMEM_EMBEDDER", None)
    repo.close()
    repo._index = None
    repo._recall = None


def seed_cache(repo, cache: Path | None) -> None:
    """Copy a saved embedding cache in (same texts, same model: every vector a hit), so a
    10k-note run does not spend half an hour embedding what an earlier run embedded."""
    if cache is not None and cache.exists():
        (cache_dir(repo.root)).mkdir(exist_ok=True)
        shutil.copy(cache, cache_dir(repo.root) / "embeddings.sqlite")


def save_cache(repo, cache: Path | None) -> None:
    if cache is not None and (cache_dir(repo.root) / "embeddings.sqlite").exists():
        repo.close()
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(cache_dir(repo.root) / "embeddings.sqlite", cache)


def ms(fn):
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def fmt(values, p=50):
    return f"{pct(values, p):.1f}" if values else "-"


def rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the measurements ------------------------------------------------------------------
def filled(folder: Path, n: int):
    """A repo of ``n`` notes at ``folder``: made (and filled) if absent, else reopened. A 100k
    fill takes most of an hour on a busy machine: --fixtures DIR builds it once and reuses it
    (the notes a run writes stay: later runs see n + 20 per earlier run, said in the JSON)."""
    if (folder / ".git").is_dir():
        return MemoryRepo.open(folder)
    repo = MemoryRepo.init(folder, teams={"payments": ["bob", "dana"]}, as_user="bob")
    fill(repo, n)
    return repo


def measure(n: int, mode: str, pause: float, skip: set[str], cache: Path | None = None,
            fixtures: Path | None = None) -> dict:
    out: dict = {"notes": n, "embedder": mode, "load_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        repo = filled((fixtures or Path(tmp)) / f"mem-{n}", n)
        run = int(time.time()) % 100_000  # codenames unique to this run, in a reused fixture
        use_embedder(repo, mode)
        if mode != "none" and cache is not None:
            seed_cache(repo, cache)
            out["rebuild_cached"] = cache.exists()
        if "rebuild" in skip:
            repo.reindex()  # a reused fixture's index is caught up, not rebuilt
        else:
            out["rebuild_s"] = ms(lambda: repo.reindex(rebuild=True))[0] / 1000
        if "warm" not in skip:
            # As the MCP server and the daemon do when they start (search/warm.py).
            out["warm_ms"] = ms(lambda: repo.keep_warm(as_user="dana"))[0]
        for i in range(3):
            repo.recall(question(i), as_user="dana")
        cpu0 = time.process_time()
        back = [ms(lambda q=question(i): repo.recall(q, as_user="dana", k=5))[0] for i in range(40)]
        # CPU per recall as well: on the shared 2-core machine wall time is mostly waiting for a core.
        out["recall_cpu_ms"] = (time.process_time() - cpu0) * 1000 / len(back)
        idle = []
        for i in range(12):
            time.sleep(pause)
            idle.append(ms(lambda q=question(100 + i): repo.recall(q, as_user="dana", k=5))[0])
        until_cpu: list = []
        writes, until, found = write_until_searchable(repo, n, run, pause, "r", until_cpu)
        if hasattr(repo.store, "index_delay"):
            # As the MCP server runs: git's index written after a burst of writes (0.2 s later).
            from mdmem.storage.gitindex import INDEX_DELAY_SECONDS

            repo.store.index_delay = INDEX_DELAY_SECONDS
            d_cpu: list = []
            d_writes, d_until, d_found = write_until_searchable(repo, n, run, pause, "d", d_cpu)
            repo.store.index_delay = None
            repo.store.flush_index()
            out.update(deferred_remember_p50=pct(d_writes, 50), deferred_remember_p95=pct(d_writes, 95),
                       deferred_until_p50=pct(d_until, 50), deferred_until_p95=pct(d_until, 95),
                       deferred_until_cpu_p50=pct(d_cpu, 50),
                       deferred_found=f"{d_found}/{len(d_until)}")
        # A person edits a note by hand; the very next recall must see it.
        hand, hand_found = [], 0
        for i in range(6):
            subject, key, text = note_text(i)
            from mdmem.model.layout import keyed_path
            path = repo.root / keyed_path("team/payments", subject, "fact", key)
            time.sleep(pause / 2)
            path.write_text(path.read_text().replace("Ticket", f"Ticket handmark{i}y", 1)
                            .rstrip("\n") + f" Edited by hand handmark{i}y.\n")
            r, hits = ms(lambda: repo.recall(f"handmark{i}y", as_user="dana", k=5))
            hand.append(r)
            hand_found += any(f"handmark{i}y" in h.text for h in hits)
            subprocess.run(["git", "-C", str(repo.root), "checkout", "-q", "--", str(path)], check=True)
        status = subprocess.run(["git", "-C", str(repo.root), "status", "--porcelain"], capture_output=True,
                                text=True).stdout
        out.update(recall_p50=pct(back, 50), recall_p95=pct(back, 95), idle_p50=pct(idle, 50),
                   idle_p95=pct(idle, 95), remember_p50=pct(writes, 50), remember_p95=pct(writes, 95),
                   until_p50=pct(until, 50), until_p95=pct(until, 95), until_cpu_p50=pct(until_cpu, 50),
                   found=f"{found}/{len(until)}",
                   hand_p50=pct(hand, 50), hand_found=f"{hand_found}/{len(hand)}",
                   git_status="clean" if not status.strip() else "DIRTY")
        if "cli" not in skip:
            out.update(cli(repo.root, mode))
        if mode != "none":
            save_cache(repo, cache)
        repo.close()
    out["load_end"] = os.getloadavg()[0]  # the machine is shared: numbers mean little without it
    return out


def write_until_searchable(repo, n: int, run: int, pause: float, tag: str,
                           cpu: list | None = None) -> tuple[list, list, int]:
    """20 times: remember a note, then recall it (the agent's next turn). (remember ms, remember +
    recall ms, how many recalls found the note). ``cpu`` gets the CPU time of each pair (this
    process, all threads): on the shared 2-core machine the wall time is mostly waiting for a
    core, the CPU time is about what a quiet machine's wall time would be."""
    writes, until, found = [], [], 0
    for i in range(20):
        subject, key, text = note_text(10_000_000 + i, seed=7 + run + ord(tag))
        key = f"{key}.{tag}{run}"
        code = f"zq{i}x{n}{tag}{run}"
        cpu_start = time.process_time()
        w, _ = ms(lambda: repo.remember(f"{text} Codename {code}.", as_user="bob", kind="fact", subject=subject,
                                        key=key, scope="team", team="payments", new_key=True))
        r, hits = ms(lambda: repo.recall(f"which note mentions codename {code}?", as_user="dana", k=5))
        if cpu is not None:
            cpu.append((time.process_time() - cpu_start) * 1000)
        writes.append(w)
        until.append(w + r)
        found += any(code in h.text for h in hits)
        if pause:
            time.sleep(pause / 4)
    return writes, until, found


# The CLI is started from this small launcher, not from the benchmark itself: Linux gives a
# child the peak RSS of the process it was forked from (ru_maxrss is inherited across exec),
# so a CLI forked from this process (hundreds of MB of fixtures and models) reported that size.
_LAUNCH = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
wall = (time.perf_counter() - t0) * 1000
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "wall_ms": wall, "peak_mb": usage.ru_maxrss / 1024,
                  "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000, "stderr": proc.stderr.read().decode()[-2000:]}))
"""


def cli(root: Path, mode: str) -> dict:
    """`mdmem recall` as a fresh process: wall time and peak RSS (median of 5); then as a person
    calls it by default (the `mdmem` script): the first call runs in its own process and starts
    the repo's daemon (cli_first: its wall), the calls after it are answered by that daemon."""
    # Bytecode written as on a person's machine (this sandbox sets PYTHONDONTWRITEBYTECODE,
    # which makes an editable install compile every module on every call).
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "MDMEM_NO_DAEMON", "MDMEM_DAEMON_AUTOSTART")}
    env["MDMEM_EMBEDDER"] = mode
    script = str(Path(sys.executable).with_name("mdmem"))
    out = {}

    def launch(command: list[str], i: int) -> dict:
        got = json.loads(subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCH, *command, "recall", question(200 + i), "--as", "dana",
             "--repo", str(root), "--json"], capture_output=True, text=True, env=env, check=True).stdout)
        if got["rc"] != 0:
            raise SystemExit(f"mdmem recall failed: {got['stderr']}")
        return got

    subprocess.run([script, "daemon", "stop", "--repo", str(root)], env=env, capture_output=True)
    for label, command in (("cli", [sys.executable, "-m", "mdmem.cli.main"]), ("cli_daemon", [script])):
        walls, peaks, cpus = [], [], []
        try:
            for i in range(6):
                got = launch(command, i)
                if label == "cli_daemon" and i == 0:
                    out["cli_first_wall_ms"] = got["wall_ms"]
                    deadline = time.monotonic() + 600
                    while time.monotonic() < deadline:  # the daemon it started warms up
                        info = subprocess.run([script, "daemon", "status", "--repo", str(root)], env=env,
                                              capture_output=True)
                        if info.returncode == 0:
                            break
                        time.sleep(0.1)
                if i:  # the first call may pay for building state another call reuses
                    walls.append(got["wall_ms"])
                    peaks.append(got["peak_mb"])
                    # CPU time (user + system) as well: on this shared machine the wall time is mostly
                    # waiting for a core; the CPU a call uses is what a quiet machine's wall would be.
                    cpus.append(got["cpu_ms"])
            if label == "cli_daemon":  # how many of the calls the daemon answered (the rest ran here)
                info = subprocess.run([script, "daemon", "status", "--repo", str(root), "--json"], env=env,
                                      capture_output=True, text=True)
                out["cli_daemon_served"] = json.loads(info.stdout)["served"] if info.returncode == 0 else 0
        finally:
            if label == "cli_daemon":
                subprocess.run([script, "daemon", "stop", "--repo", str(root)], env=env, capture_output=True)
        out.update({f"{label}_wall_ms": pct(walls, 50), f"{label}_peak_mb": pct(peaks, 50),
                    f"{label}_cpu_ms": pct(cpus, 50)})
    return out


def bulk(n: int, mode: str, *, rebuild: bool = True) -> dict:
    """n notes written through the gate and searchable: remember_many (one commit per batch)
    when the API has it, else one remember per note (timed on a sample, then scaled). Then a
    cold rebuild of the same repo: the index and the embedding cache removed, reindex from the
    notes, first recall. Wall and CPU seconds with the load average beside them (the machine
    is shared: CPU seconds are what a quiet core would take)."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["bob", "dana"]}, as_user="bob")
        use_embedder(repo, mode)
        items = []
        for i in range(n):
            subject, key, text = note_text(i, seed=3)
            items.append(dict(text=text, kind="fact", subject=subject, key=key, scope="team", team="payments",
                              new_key=True))
        how = "remember_many"
        load = os.getloadavg()[0]
        t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
        written: list[float] = []  # when the last batch was committed: the rest is the catch-up

        def progress(done, total, what):
            if what == "writing notes" and done == total and not written:
                written.append(time.perf_counter() - t0)

        if hasattr(repo, "remember_many"):
            repo.remember_many(items, as_user="bob", progress=progress)
            sample = n
        else:
            how = "remember loop (sampled)"
            sample = min(n, 500)
            for item in items[:sample]:
                repo.remember(item.pop("text"), as_user="bob", **item)
        repo.recall(question(1), as_user="dana")
        secs = (time.perf_counter() - t0) * n / sample
        cpu = (time.process_time() - c0) * n / sample
        worker_cpu = (children_cpu() - k0) * n / sample  # child processes: the index worker, git
        hits = repo.recall(items[-1]["text"] if "text" in items[-1] else question(2), as_user="dana", k=3)
        out = {"notes": n, "embedder": mode, "how": how, "seconds": secs, "cpu_seconds": cpu,
               "worker_cpu_seconds": worker_cpu, "load": load, "writes_seconds": written[0] if written else None,
               "load_end": os.getloadavg()[0], "found_last": bool(hits), "tmpdir": tempfile.gettempdir()}
        repo.close()
        if rebuild:
            root = Path(tmp) / "mem"
            caches = cache_dir(root)
            shutil.rmtree(caches / "fulltext", ignore_errors=True)
            for name in ("state.json", "embeddings.sqlite"):
                (caches / name).unlink(missing_ok=True)
            repo = MemoryRepo.open(root)
            use_embedder(repo, mode)
            out["rebuild_load"] = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            repo.reindex(rebuild=True)
            hits = repo.recall(question(1), as_user="dana")
            out["rebuild_seconds"] = time.perf_counter() - t0
            out["rebuild_cpu_seconds"] = time.process_time() - c0
            out["rebuild_load_end"] = os.getloadavg()[0]
            out["rebuild_found"] = bool(hits)
            repo.close()
        return out


def children_cpu() -> float:
    """User+sys seconds of this process's finished child processes."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bulk_table(n: int, modes: list[str], rebuild: bool) -> None:
    """Import and cold-rebuild rows, one pair per embedder (CPU: this process's user+sys;
    onnxruntime's threads count too; "+ children": its child processes: the index worker, git)."""
    rows = []
    for mode in modes:
        b = bulk(n, mode, rebuild=rebuild)
        target = 60 if mode == "minilm" else 10
        writes = f" (writes {b['writes_seconds']:.1f})" if b.get("writes_seconds") else ""
        rows.append([f"{b['notes']:,}", mode, f"import ({b['how']})", f"{b['seconds']:.1f}{writes}",
                     f"{b['cpu_seconds']:.1f} + children {b.get('worker_cpu_seconds', 0):.1f}",
                     f"{b['load']:.1f} -> {b['load_end']:.1f}", b["found_last"], f"<= {target}"])
        if "rebuild_seconds" in b:
            rows.append([f"{b['notes']:,}", mode, "cold rebuild", f"{b['rebuild_seconds']:.1f}",
                         f"{b['rebuild_cpu_seconds']:.1f}", f"{b['rebuild_load']:.1f} -> {b['rebuild_load_end']:.1f}",
                         b["rebuild_found"], "<= 60" if mode == "minilm" else "-"])
        print(json.dumps(b), file=sys.stderr)
    table("bulk import and cold rebuild: written and searchable (s)",
          ["notes", "embedder", "what", "wall s", "CPU s", "load avg", "searchable", "target s"],
          rows, as_json=wants_json())


if __name__ == "__main__":
    argv = sys.argv[1:]
    known = {"--sizes", "--modes", "--pause", "--skip", "--embed-100k", "--cache", "--bulk", "--fixtures",
             "--bulk-only", "--json"}
    flags = [a for a in argv if a.startswith("-")]
    if "-h" in flags or "--help" in flags or not set(flags) <= known:
        print(__doc__, file=sys.stderr)
        raise SystemExit(0 if {"-h", "--help"} & set(flags) else f"unknown option(s): {set(flags) - known}")

    def opt(name, default):
        return argv[argv.index(name) + 1] if name in argv else default

    # --bulk-only: just the import and cold-rebuild rows (--bulk N notes, --modes).
    sizes = [] if "--bulk-only" in argv else [int(x) for x in opt("--sizes", "1000,10000,100000").split(",")]
    modes = opt("--modes", "minilm,none").split(",")
    pause = float(opt("--pause", "1.2"))
    skip = set(opt("--skip", "").split(",")) - {""}
    load = os.getloadavg()
    import _common
    _common.console.width = max(_common.console.width, 200)  # 13 columns
    rows, results = [], []
    for n in sizes:
        for mode in modes:
            if n >= 100_000 and mode != "none" and "--embed-100k" not in argv:
                rows.append([f"{n:,}", mode, "skipped: embedding 100k unique notes takes tens of minutes here"]
                            + [""] * 12)
                continue
            cache = Path(opt("--cache", "")) / f"embeddings-{n}.sqlite" if "--cache" in argv else None
            fixtures = Path(opt("--fixtures", "")) if "--fixtures" in argv else None
            r = measure(n, mode, pause, skip, cache, fixtures)
            results.append(r)
            deferred = (f" ({r['deferred_remember_p50']:.1f})" if "deferred_remember_p50" in r else "",
                        f" ({r['deferred_until_p50']:.1f}, {r['deferred_found']})" if "deferred_until_p50" in r else "")
            warmed = f"; warmed in {r['warm_ms']:.0f} ms" if "warm_ms" in r else "; not warmed"
            cpu = f" ({r['recall_cpu_ms']:.1f} CPU{warmed})" if "recall_cpu_ms" in r else ""
            rows.append([f"{n:,}", mode, f"{r['recall_p50']:.1f} / {r['recall_p95']:.1f}{cpu}",
                         f"{r['idle_p50']:.1f} / {r['idle_p95']:.1f}", f"{r['remember_p50']:.1f}{deferred[0]}",
                         f"{r['until_p50']:.1f} / {r['until_p95']:.1f}{deferred[1]}", r["found"],
                         f"{r['hand_p50']:.1f}", r["hand_found"], r["git_status"],
                         (f"{r['rebuild_s']:.1f}" + (" (cached vectors)" if r.get("rebuild_cached") else ""))
                         if "rebuild_s" in r else "-",
                         (f"{r['cli_wall_ms']:.0f}" + (f" ({r['cli_cpu_ms']:.0f} CPU)" if "cli_cpu_ms" in r else ""))
                         if "cli_wall_ms" in r else "-",
                         f"{r['cli_peak_mb']:.0f}" if "cli_peak_mb" in r else "-",
                         f"{r['cli_first_wall_ms']:.0f}, then {r['cli_daemon_wall_ms']:.0f} ({r['cli_daemon_cpu_ms']:.0f} CPU), "
                         f"{r['cli_daemon_peak_mb']:.0f} MB, served {r.get('cli_daemon_served', '?')}/5"
                         if "cli_daemon_wall_ms" in r else "-",
                         f"{r['load_start']:.1f} -> {r['load_end']:.1f}",
                         f"{r['until_cpu_p50']:.1f}" + (f" ({r['deferred_until_cpu_p50']:.1f})"
                                                       if "deferred_until_cpu_p50" in r else "")])
            print(json.dumps(r), file=sys.stderr)
    cols = ["notes", "embedder", "recall p50/p95 ms (CPU per recall)", f"after {pause}s idle p50/p95",
            "remember p50 (git index deferred)", "until searchable p50/p95 (deferred p50, found)", "found", "hand edit recall p50", "hand edit found", "git status",
            "cold rebuild s", "CLI recall wall (CPU) ms", "CLI peak MB", "`mdmem` script: first call ms (starts the daemon), then (CPU), MB",
            "load avg (1 min)",
            "until searchable CPU p50 ms (deferred)"]
    if sizes:
        table(f"mdmem as an agent sees it (load avg at start {load[0]:.1f}, {os.cpu_count()} cores)", cols,
              rows, as_json=wants_json())
    if "import" not in skip:
        bulk_table(int(opt("--bulk", "10000")), modes, rebuild="rebuild" not in skip)
    print(f"load average at end: {os.getloadavg()[0]:.1f}", file=sys.stderr)
