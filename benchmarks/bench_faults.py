"""Fault loops: kill -9 at random points, damaged caches, hostile notes under
resource limits, 2,000 writes with git housekeeping forced during them.

    python benchmarks/bench_faults.py [--quick] [--json] [--only write,rebuild,watch,cache,hostile,gc]

Targets: write-loop kills >= 20 with 0 acknowledged writes lost, 0 notes missing from the
work tree or git's index, and a plain `git commit` afterwards deleting nothing; index
--rebuild kills >= 15 with recall finding notes every time; watcher kills with the index
right afterwards; every cache file damaged in turn (truncated, garbage, empty, wrong type)
with writes and recall working; each hostile note with another user's recall within 2x
its time and +100 MB; 2,000 writes with gc and pack-refs forced: 0 failures.
"""
from __future__ import annotations

import logging
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from mdmem.storage.gitdir import cache_dir

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from _common import bulk_notes, table, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

QUICK = "--quick" in sys.argv
ONLY = next((a.split("=", 1)[1] if "=" in a else sys.argv[sys.argv.index(a) + 1]
             for a in sys.argv if a.startswith("--only")), "write,rebuild,watch,cache,hostile,gc").split(",")
T0 = "2026-10-01T09:00:00Z"
rng = random.Random(11)
PY = sys.executable


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout


def cli(*args, timeout=300):
    return subprocess.run([PY, "-m", "mdmem.cli.main", *args], capture_output=True, text=True, timeout=timeout)


def new_repo(tmp: Path, *, embedder: str = "minilm") -> MemoryRepo:
    repo = MemoryRepo.init(tmp / "mem", teams={"payments": ["bob", "alice"]}, as_user="mdmem", now=T0)
    if embedder != "minilm":
        cfg = repo.root / "mdmem.toml"
        cfg.write_text(cfg.read_text().replace('backend = "minilm"', f'backend = "{embedder}"'))
        subprocess.run(["git", "-C", str(repo.root), "commit", "-qam", "embedder", "--no-verify"], check=True)
        repo = MemoryRepo.open(repo.root)
    return repo


# --- 1. kill -9 in a write loop ------------------------------------------------------------

WRITER = r"""
import sys
from mdmem import MemoryRepo
repo = MemoryRepo.open(sys.argv[1])
start = int(sys.argv[2])
for i in range(start, start + 100000):
    r = repo.remember(f"fact number {i}", as_user="bob", kind="fact", subject=f"service:s{i % 7}",
                      key=f"k{i}", scope="team", team="payments", new_key=True)
    print(f"ACK {r.path} {r.version}", flush=True)
"""


def write_kills(kills: int) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        repo = new_repo(Path(tmp))
        root = repo.root
        acked: dict[str, str] = {}
        nxt = 0
        for _ in range(kills):
            proc = subprocess.Popen([PY, "-c", WRITER, str(root), str(nxt)], stdout=subprocess.PIPE, text=True)
            time.sleep(rng.uniform(1.5, 5.0))  # interpreter start + some writes, killed anywhere
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate()
            for line in out.splitlines():
                if line.startswith("ACK "):
                    _, path, version = line.split()
                    acked[path] = version
            nxt += 1000
        MemoryRepo.open(root).close()  # any open repairs what the last kill left
        head = dict(line.split("\t")[::-1] for line in git(root, "ls-tree", "-r", "HEAD", "--", "team/payments/service")
                    .splitlines() if line)
        head = {p: meta.split()[2] for p, meta in head.items()}
        index = {line.split("\t")[1]: line.split()[1] for line in git(root, "ls-files", "-s", "--", "team/payments/service")
                 .splitlines() if line}
        lost = [p for p, v in acked.items() if head.get(p) != v]
        missing_tree = [p for p in head if not (root / p).is_file()]
        missing_index = [p for p in head if index.get(p) != head[p]]
        status = [line for line in git(root, "status", "--porcelain").splitlines() if line]
        before = len(head)
        git(root, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "--no-verify", "-qm", "plain commit")
        after = len([x for x in git(root, "ls-tree", "-r", "--name-only", "HEAD", "--", "team/payments/service").split()])
        ok = not lost and not missing_tree and not missing_index and after == before and not status
        return [["write loop", kills, f"{len(acked)} acked, {before} in HEAD", len(lost),
                 f"{len(missing_tree)} / {len(missing_index)}", before - after, len(status), "ok" if ok else "FAIL"]]


# --- 2. kill -9 during index --rebuild ------------------------------------------------------

def rebuild_kills(kills: int) -> list:
    rows = []
    for embedder in ("none", "minilm"):
        with tempfile.TemporaryDirectory() as tmp:
            repo = new_repo(Path(tmp), embedder=embedder)
            bulk_notes(repo, 400 if QUICK else 1500, texts=lambda i: f"billing rule {i} about deploy windows",
                       now=T0)
            root = str(repo.root)
            t = time.monotonic()
            assert cli("index", "--rebuild", "--repo", root).returncode == 0
            full = time.monotonic() - t
            found = 0
            seconds = []
            for _ in range(kills):
                proc = subprocess.Popen([PY, "-m", "mdmem.cli.main", "index", "--rebuild", "--repo", root],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.05, full * 1.1))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                t = time.monotonic()
                r = cli("recall", "billing rule 17", "--as", "bob", "--repo", root, "--now", "2030-01-01T00:00:00Z", "--json")
                seconds.append(time.monotonic() - t)
                if r.returncode == 0 and '/fact/k17.md"' in r.stdout:
                    found += 1
            rows.append([f"index --rebuild ({embedder})", kills, f"full rebuild {full:.1f}s", kills - found,
                         f"recall after kill p50 {statistics.median(seconds):.2f}s max {max(seconds):.2f}s",
                         "-", "-", "ok" if found == kills else "FAIL"])
    return rows


# --- 3. kill -9 of a watcher ------------------------------------------------------------------

def watcher_kills(kills: int) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        repo = new_repo(Path(tmp))
        r = repo.remember("Refunds take 30 days", as_user="bob", kind="fact", subject="service:billing",
                          key="refund.window", scope="team", team="payments", now=T0)
        root = str(repo.root)
        note = repo.root / r.path
        ok = 0
        for i in range(kills):
            proc = subprocess.Popen([PY, "-m", "mdmem.cli.main", "watch", "--repo", root, "--json"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(1.0, 2.5))
            note.write_text(note.read_text().rsplit("\n---\n", 1)[0] + f"\n---\nRefunds take {40 + i} days now\n")
            time.sleep(rng.uniform(0.0, 0.4))  # killed while (maybe) reindexing the edit
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            out = cli("recall", "how long do refunds take", "--as", "bob", "--repo", root, "--json")
            if out.returncode == 0 and f"{40 + i} days" in out.stdout:
                ok += 1
        # Idle CPU of a watcher over 5 s.
        proc = subprocess.Popen([PY, "-m", "mdmem.cli.main", "watch", "--repo", root],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(4.0)
        cpu0 = _cpu(proc.pid)
        time.sleep(5.0)
        idle = _cpu(proc.pid) - cpu0
        proc.kill()
        proc.wait()
        return [["watch", kills, "edit then kill", kills - ok, "-", "-", f"idle CPU {idle:.2f}s / 5s",
                 "ok" if ok == kills and idle < 0.25 else "FAIL"]]


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- 4. every cache file damaged in turn -----------------------------------------------------

class _Count(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        self.count += 1


def cache_matrix() -> list:
    from test_cache_corruption import MODES, corrupt

    with tempfile.TemporaryDirectory() as tmp:
        seed = new_repo(Path(tmp) / "seed")
        for i in range(30):
            seed.remember(f"Billing rule {i}: deploy windows and refunds", as_user="bob", kind="fact",
                          subject="service:billing", key=f"k{i}", scope="team", team="payments", new_key=True, now=T0)
        seed.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact", subject="service:billing",
                      key="deploy.window", scope="team", team="payments", new_key=True, now=T0)
        seed.recall("billing", as_user="bob", include_history=True, now=T0)
        seed.close()
        base = cache_dir(seed.root)
        files = sorted(str(p.relative_to(base)) for p in base.rglob("*")
                       if p.is_file() and "locks" not in p.parts and not p.name.endswith(".tmp"))
        rows, failures, warned = [], 0, 0
        cases = 0
        for name in files:
            for mode in MODES:
                cases += 1
                root = Path(tmp) / f"c{cases}"
                shutil.copytree(seed.root, root, symlinks=True)
                target = cache_dir(root) / name
                corrupt(target, mode)
                # In process (a CLI process per case made the matrix take 12 minutes); the
                # CLI's own handling of a damaged cache is in tests/test_cache_corruption.py.
                handler = _Count()
                logging.getLogger("mdmem").addHandler(handler)
                try:
                    repo = MemoryRepo.open(root)
                    repo.remember("Refunds take 30 days", as_user="bob", kind="fact", subject="service:billing",
                                  key="refund.window", scope="team", team="payments", new_key=True, now=T0)
                    hits = repo.recall("when does billing deploy", as_user="bob", now=T0)
                    past = repo.recall("billing deploy", as_user="bob", include_history=True, now=T0)
                    good = bool(hits) and "any weekday" in hits[0].text and bool(past)
                    repo.close()
                    err = ""
                except Exception as exc:  # noqa: BLE001 -- counted
                    good, err = False, f"{type(exc).__name__}: {exc}"
                finally:
                    logging.getLogger("mdmem").removeHandler(handler)
                warned += handler.count
                if not good or handler.count > 1:
                    failures += 1
                    rows.append([f"  FAIL {name} {mode}", err[-200:] or f"{handler.count} warnings"])
                shutil.rmtree(root, ignore_errors=True)
        return [["cache files damaged", cases, f"{len(files)} files x {len(MODES)} modes", failures,
                 f"{warned} warning lines", "-", "-", "ok" if not failures else "FAIL"]], rows


# --- 5. hostile notes under resource limits ------------------------------------------------

LIMITED = r"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
from mdmem.cli.main import main
t = time.monotonic()
code = main(sys.argv[1:])
print(f"RESULT {code} {time.monotonic() - t:.4f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
"""


def limited(root: str, *args) -> tuple[int, float, float]:
    p = subprocess.run([PY, "-c", LIMITED, *args, "--repo", root], capture_output=True, text=True, timeout=300)
    line = [x for x in p.stderr.splitlines() if x.startswith("RESULT")]
    if not line:
        return -1, float("inf"), float("inf")
    _, code, secs, kb = line[-1].split()
    return int(code), float(secs), int(kb) / 1024


def hostile() -> list:
    from test_hostile_notes import commit_as_attacker, make_hostile

    rows = []
    for kind in ("devzero", "alias", "deep", "huge", "fifo", "types"):
        with tempfile.TemporaryDirectory() as tmp:
            repo = new_repo(Path(tmp))
            bulk_notes(repo, 300, now=T0)
            repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact",
                          subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
            root = str(repo.root)
            cli("index", "--repo", root)
            query = ("recall", "when does billing deploy", "--as", "alice", "--now", T0)
            base = [limited(root, *query) for _ in range(3)]
            make_hostile(repo.root, kind)
            if kind != "fifo":
                commit_as_attacker(repo.root)
            first = limited(root, *query)  # the first recall indexes (and rejects) the note
            after = [limited(root, *query) for _ in range(3)]
            chk = limited(root, "check")
            t_base = statistics.median(b[1] for b in base)
            t_after = statistics.median(a[1] for a in after)
            mb_base = statistics.median(b[2] for b in base)
            mb_after = max(a[2] for a in [first, *after])
            ok = (all(a[0] == 0 for a in [first, *after]) and chk[0] == 2 and t_after <= 2 * t_base
                  and first[1] <= 2 * t_base + 1.0 and mb_after <= mb_base + 100)
            rows.append([f"hostile: {kind}", 1, f"recall {t_base * 1000:.0f} -> {t_after * 1000:.0f} ms "
                         f"(first {first[1] * 1000:.0f})", 0 if ok else 1,
                         f"max RSS {mb_base:.0f} -> {mb_after:.0f} MB", "-", f"check exit {chk[0]}",
                         "ok" if ok else "FAIL"])
    return rows


# --- 6. 2,000 writes with gc and pack-refs forced ----------------------------------------------

def gc_writes(n: int) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        repo = new_repo(Path(tmp))
        root = str(repo.root)
        packer = subprocess.Popen(["sh", "-c", f"while true; do git -C {root} pack-refs --all; git -C {root} gc --quiet; "
                                   f"sleep 0.2; done"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        failures, errors = 0, {}
        t = time.monotonic()
        try:
            for i in range(n):
                if i % 100 == 50:
                    repo.store.housekeep_in_background()  # ours too, forced (normally 1 write in 256)
                try:
                    repo.remember(f"write {i}", as_user="bob", kind="fact", subject=f"service:s{i % 40}",
                                  key=f"k{i}", scope="team", team="payments", new_key=True)
                except Exception as exc:  # noqa: BLE001 -- counted
                    failures += 1
                    errors[type(exc).__name__] = str(exc)[:120]
        finally:
            packer.kill()
            packer.wait()
        secs = time.monotonic() - t
        count = len(git(root, "ls-tree", "-r", "--name-only", "HEAD", "--", "team/payments/service").split())
        status = git(root, "status", "--porcelain")
        ok = failures == 0 and count == n and not status
        return [["writes with gc + pack-refs", n, f"{secs:.0f}s, {count} in HEAD", failures,
                 "; ".join(f"{k}: {v}" for k, v in errors.items()) or "-", "-", "clean" if not status else "DIRTY",
                 "ok" if ok else "FAIL"]]


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    rows, detail = [], []
    if "write" in ONLY:
        rows += write_kills(8 if QUICK else 25)
    if "rebuild" in ONLY:
        rows += rebuild_kills(5 if QUICK else 15)
    if "watch" in ONLY:
        rows += watcher_kills(3 if QUICK else 10)
    if "cache" in ONLY:
        summary, detail = cache_matrix()
        rows += summary
    if "hostile" in ONLY:
        rows += hostile()
    if "gc" in ONLY:
        rows += gc_writes(300 if QUICK else 2000)
    table("Fault loops", ["fault", "runs", "scale", "failures / lost", "detail", "deleted by git commit",
                                     "status / other", "result"], rows, as_json=wants_json())
    if detail:
        table("Cache cases that failed", ["case", "stderr"], detail, as_json=wants_json())
    sys.exit(0 if all(r[-1] == "ok" for r in rows) else 1)
