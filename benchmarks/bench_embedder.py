"""The default embedder's speed and memory: the package's graph (weight-only int8,
float32 products) against the graph mdmem runs (search/minilm_graph.py: integer GEMM), on
ordinary ~60-word notes, interleaved so the machine's load hits both alike.

Tables:
- graphs: notes/s in batches (-> seconds for a cold 10k rebuild's embedding), query p50/p95
  back to back and after idle pauses, cosine of each graph's vectors to the package's;
- settings (mdmem's graph): batch size, intra-op threads, graph optimisation level, padding
  (sorted batches vs arrival order);
- memory: peak RSS of a fresh process that loads the query session and embeds one query
  (what a `mdmem recall` pays), for each graph and memory setting.

Target: a cold rebuild of 10,000 notes <= 60 s with the default embedder; query embedding
is the floor of MiniLM recall (recall p50 <= 10 ms at 10k).

Usage: bench_embedder.py [--notes 512] [--rounds 3] [--pause 1.2] [--skip settings,memory] [--json]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import pct, table, wants_json  # noqa: E402
from bench_agent import note_text, question  # noqa: E402

from mdmem.search import fulltext, minilm_graph  # noqa: E402
from mdmem.search.embedders import MiniLMEmbedder  # noqa: E402


class Sessions(MiniLMEmbedder):
    """mdmem's embedder as it ran before this graph: a session per thread count (documents on
    an intra-op pool of ``threads``, queries on one thread), batches one after another."""

    level = "all"
    batch_size = 32
    # mdmem's graph runs without these fusions (minilm_graph.DISABLED_OPTIMIZERS); the
    # package's graph is the reference, run as onnxruntime runs it by default.
    disabled_optimizers = minilm_graph.DISABLED_OPTIMIZERS

    def graph(self):
        return minilm_graph.load_graph(self.source, self.source_sha256, self.cache_dir)

    def session_for(self, threads: int):
        sessions = self.__dict__.setdefault("_by_threads", {})
        if threads not in sessions:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.graph_optimization_level = {
                "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[self.level]
            sessions[threads] = ort.InferenceSession(self.graph(), options, providers=["CPUExecutionProvider"],
                                                     disabled_optimizers=self.disabled_optimizers)
        return sessions[threads]

    def run_on(self, encodings, threads: int):
        self._session_obj = self.session_for(threads)
        return self._run(encodings)

    def embed_documents(self, texts, batch_size=None):
        enc = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(enc[i].ids))
        size = batch_size or self.batch_size
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            out[chunk] = self.run_on([enc[i] for i in chunk], self.threads)
        return out

    def embed_query(self, text):
        return self.run_on([self.tokenizer.encode(text)], 1)[0]


class PackageGraph(Sessions):
    """The package's own graph, as mdmem ran it before (for comparison only)."""

    disabled_optimizers: list[str] = []

    def graph(self):
        return str(self.source)


class Level(MiniLMEmbedder):
    """mdmem's embedder with another graph optimisation level."""

    def __init__(self, level: str, **kw):
        super().__init__(**kw)
        self.level = level

    def _session(self):
        if self._session_obj is None:
            helper = Sessions(cache_dir=self.cache_dir)
            helper.level = self.level
            self._session_obj = helper.session_for(1)
        return self._session_obj


def texts(n: int) -> list[str]:
    out = []
    for i in range(n):
        _, key, text = note_text(i)
        out.append(fulltext.embedding_text(key, text))
    return out


def throughput(e, docs: list[str], **kw) -> float:
    t0 = time.perf_counter()
    e.embed_documents(docs, **kw)
    return len(docs) / (time.perf_counter() - t0)


def queries(e, n: int, pause: float = 0.0, offset: int = 0) -> list[float]:
    out = []
    for i in range(n):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        e.embed_query(question(offset + i))
        out.append((time.perf_counter() - t0) * 1000)
    return out


def unsorted(e: MiniLMEmbedder):
    """Batches in arrival order (no sorting by length), on the same workers, for the padding row."""
    from concurrent.futures import ThreadPoolExecutor

    def run(docs, batch_size=None):
        enc = e.tokenizer.encode_batch(docs)
        size = batch_size or e.batch_size
        with ThreadPoolExecutor(e.threads) as pool:
            return np.vstack(list(pool.map(lambda i: e._run(enc[i:i + size]), range(0, len(docs), size))))
    return run


def graphs(docs, rounds: int, pause: float, cache: Path) -> list[list]:
    pkg, ours = PackageGraph(cache_dir=cache), MiniLMEmbedder(cache_dir=cache)
    ref = pkg.embed_documents(docs[:128])
    got = ours.embed_documents(docs[:128])
    cos = (ref * got).sum(axis=1)
    qref = np.stack([pkg.embed_query(question(i)) for i in range(32)])
    qgot = np.stack([ours.embed_query(question(i)) for i in range(32)])
    qcos = (qref * qgot).sum(axis=1)
    speed: dict[str, list[float]] = {"package": [], "mdmem": []}
    back: dict[str, list[float]] = {"package": [], "mdmem": []}
    idle: dict[str, list[float]] = {"package": [], "mdmem": []}
    for r in range(rounds):
        for name, e in (("package", pkg), ("mdmem", ours)):
            speed[name].append(throughput(e, docs))
            back[name] += queries(e, 30, offset=r * 100)
            idle[name] += queries(e, 4, pause=pause, offset=r * 100 + 50)
    rows = []
    for name in ("package", "mdmem"):
        nps = float(np.median(speed[name]))
        rows.append([name, f"{nps:.1f}", f"{10000 / nps:.0f}", f"{pct(back[name], 50):.2f} / {pct(back[name], 95):.2f}",
                     f"{pct(idle[name], 50):.2f} / {pct(idle[name], 95):.2f}",
                     "1" if name == "package" else f"{cos.min():.4f} / {cos.mean():.4f}",
                     "1" if name == "package" else f"{qcos.min():.4f} / {qcos.mean():.4f}"])
        print(json.dumps({"table": "graphs", "graph": name, "notes_per_s": nps, "rounds": speed[name],
                          "query_p50": pct(back[name], 50), "query_p95": pct(back[name], 95),
                          "idle_p50": pct(idle[name], 50), "idle_p95": pct(idle[name], 95)}), file=sys.stderr)
    return rows


DEFAULT = "default (batch 1, 2 workers x 1 thread, level all)"


def settings(docs, rounds: int, cache: Path) -> list[list]:
    base = MiniLMEmbedder(cache_dir=cache)
    variants = {
        DEFAULT: lambda d: base.embed_documents(d),
        "batch 4": lambda d: base.embed_documents(d, batch_size=4),
        "batch 16": lambda d: base.embed_documents(d, batch_size=16),
        "batch 32 (sorted by length)": lambda d: base.embed_documents(d, batch_size=32),
        "batch 32 in arrival order (padding)": lambda d: unsorted(base)(d, batch_size=32),
        "1 worker": MiniLMEmbedder(cache_dir=cache, threads=1).embed_documents,
        "1 worker, intra-op pool of 2, batch 32 (as before)": lambda d: Sessions(cache_dir=cache).embed_documents(
            d, batch_size=32),
        "level extended": Level("extended", cache_dir=cache).embed_documents,
        "level basic": Level("basic", cache_dir=cache).embed_documents,
    }
    # Arrival order only pads when lengths vary: mix in short and long notes.
    mixed = [d if i % 3 else d[:80] for i, d in enumerate(docs)]
    speed: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn(mixed)
            speed[name].append(len(mixed) / (time.perf_counter() - t0))
    ref = float(np.median(speed[DEFAULT]))
    rows = []
    for name, v in speed.items():
        nps = float(np.median(v))
        rows.append([name, f"{nps:.1f}", f"{nps / ref:.2f}"])
        print(json.dumps({"table": "settings", "variant": name, "notes_per_s": nps, "rounds": v}), file=sys.stderr)
    return rows


PROBE = """
import resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from mdmem.search.embedders import MiniLMEmbedder
import mdmem.search.embedders as emb
graph = sys.argv[1]
if graph == "package":
    sys.path.insert(0, sys.argv[3]); from bench_embedder import PackageGraph as E
else:
    E = MiniLMEmbedder
e = E(cache_dir=Path(sys.argv[2]))
e.embed_query("What is the billing deploy window and who decided it?")
t1 = time.perf_counter()
e.embed_query("What is the search cache and who decided it?")
t2 = time.perf_counter()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, (t1 - t0) * 1000, (t2 - t1) * 1000)
"""


def memory(rounds: int, cache: Path) -> list[list]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    for graph in ("package", "mdmem"):
        peaks, firsts, seconds = [], [], []
        for _ in range(max(3, rounds)):
            out = subprocess.run([sys.executable, "-c", PROBE, graph, str(cache), str(Path(__file__).parent)],
                                 capture_output=True, text=True, env=env, check=True).stdout.split()
            peaks.append(float(out[0]))
            firsts.append(float(out[1]))
            seconds.append(float(out[2]))
        rows.append([graph, f"{pct(peaks, 50):.0f}", f"{pct(firsts, 50):.0f}", f"{pct(seconds, 50):.1f}"])
        print(json.dumps({"table": "memory", "graph": graph, "peak_mb": peaks, "first_ms": firsts}), file=sys.stderr)
    return rows


if __name__ == "__main__":
    argv = sys.argv[1:]

    def opt(name, default):
        return argv[argv.index(name) + 1] if name in argv else default

    n = int(opt("--notes", "512"))
    rounds = int(opt("--rounds", "3"))
    pause = float(opt("--pause", "1.2"))
    skip = set(opt("--skip", "").split(",")) - {""}
    load = os.getloadavg()[0]
    docs = texts(n)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "models"
        MiniLMEmbedder(cache_dir=cache).embed_query("warm the graph cache")
        table(f"MiniLM graphs, {n} notes of ~60 words, {rounds} interleaved rounds (load avg {load:.1f}, "
              f"{os.cpu_count()} cores)",
              ["graph", "notes/s", "10k notes s", "query p50/p95 ms", f"query after {pause}s idle p50/p95",
               "doc cosine to package min/mean", "query cosine min/mean"],
              graphs(docs, rounds, pause, cache), as_json=wants_json())
        if "settings" not in skip:
            table(f"mdmem's graph: settings (notes/s, median of {rounds}; a third of the notes cut to 80 chars)",
                  ["variant", "notes/s", "vs default"], settings(docs, rounds, cache), as_json=wants_json())
        if "memory" not in skip:
            table("one query in a fresh process (what `mdmem recall` pays for the embedder)",
                  ["graph", "peak RSS MB", "import+load+first query ms", "second query ms"],
                  memory(rounds, cache), as_json=wants_json())
    print(f"load average at end: {os.getloadavg()[0]:.1f}", file=sys.stderr)
