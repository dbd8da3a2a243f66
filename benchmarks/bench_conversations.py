"""Recall in long conversations: LoCoMo (snap-research/LoCoMo, data/locomo10.json, CC BY-NC 4.0).

One repo per conversation; one episode note per dialogue turn, "[date] Speaker: text", written
with its session's date as valid_from; the turn before it (and the session date and speaker) go
into the note's ``context``, which is indexed and embedded with the turn but is not its text.
Each question of categories 1-4 is a recall by the conversation's owner; hit@k = an evidence
turn among the top k.

The data is NOT in this repository (its licence is non-commercial): pass its path.
Without it the script says so and exits 0.

A second development set: REALTALK (github.com/danny911kr/REALTALK, data/Chat_*.json: ten
21-day real messaging conversations with turn-level evidence, LoCoMo's format with a time on
each message). Pass the folder holding those files (not its data/locomo/ copies, which hold
LoCoMo's held-out half) instead of locomo10.json; all ten are for development. Categories
1-3 are scored (multi-hop, temporal, commonsense); each turn keeps its own time.

Conversations conv-26, conv-30, conv-41, conv-42, conv-43 are the development half; the
other five are the owners' held-out test. They are skipped unless --held-out is given (for
the owners' check), and never mixed into a development run.

Usage: bench_conversations.py PATH/locomo10.json|REALTALK_DIR [--modes default,bm25,plain] [--context previous|short|meta|none|auto]
       [--conversations conv-26,...] [--held-out] [--json]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from mdmem.storage.gitdir import cache_dir

sys.path.insert(0, str(Path(__file__).parent))
from _common import console, pct, table  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402
from mdmem.config import EmbedderConfig  # noqa: E402
from mdmem.model.layout import episode_path  # noqa: E402
from mdmem.model.note import MAX_CONTEXT, Note  # noqa: E402

DEV = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")
HELD_OUT = ("conv-44", "conv-47", "conv-48", "conv-49", "conv-50")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
OWNER = "alice"
SHORT_TURN = 8  # words; a turn this short often lacks its subject ("Yes, last Tuesday!")
CONTEXTS = ("previous", "short", "meta", "none", "auto")
KS = (1, 5, 10)
# mode -> (embedder backend or None for the configured default, score floor override)
MODES = {
    "default": (None, None),
    "bm25": ("none", None),
    "plain": ("none", -1.0),  # reference: BM25 over the same turns, no floor
}
MODE_TITLES = {"default": "default (embedder + BM25)", "bm25": "BM25 only", "plain": "plain BM25, no floor (ref)"}


def session_time(text: str) -> dt.datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime."""
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.timezone.utc)


def message_time(text: str) -> dt.datetime:
    """REALTALK's '29.12.2023, 22:42:04' -> an aware datetime."""
    return dt.datetime.strptime(text.strip(), "%d.%m.%Y, %H:%M:%S").replace(tzinfo=dt.timezone.utc)


def turns(sample: dict, *, captions: bool = True) -> list[dict]:
    """Every turn in order: dia_id, speaker, text, time (its own, or its session's)."""
    conv = sample["conversation"]
    sessions = sorted((int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k))))
    out = []
    for s in sessions:
        for i, t in enumerate(conv[f"session_{s}"]):
            if t.get("date_time"):  # REALTALK: each message has its time
                when = message_time(t["date_time"])
            else:  # LoCoMo: a second apart, so the turns of a session keep their order in time
                when = session_time(conv[f"session_{s}_date_time"]) + dt.timedelta(seconds=i)
            text = t.get("text", t.get("clean_text", "")) or ""
            if captions and t.get("blip_caption"):
                text = f"{text} [shares a photo of {t['blip_caption']}]".strip()
            out.append(dict(dia_id=_dia(t["dia_id"]), speaker=t["speaker"], text=text, session=s, when=when))
    return out


def _dia(text: str) -> str:
    """'D 2:18' (a REALTALK typo) -> 'D2:18'."""
    return re.sub(r"\s+", "", text)


def realtalk(folder: Path) -> list[dict]:
    """REALTALK's Chat_*.json as LoCoMo samples (sample_id = the file's name). A file already
    in LoCoMo's format (REALTALK's data/locomo/ copies) keeps its sample_id, so the held-out
    conversations among them stay out like they do from locomo10.json."""
    out = []
    for f in sorted(folder.glob("Chat_*.json")):
        d = json.loads(f.read_text())
        if "sample_id" in d:
            out.append(d)
            continue
        conv = {k: v for k, v in d.items() if re.fullmatch(r"session_\d+(_date_time)?", k)}
        out.append({"sample_id": f.stem, "conversation": conv, "qa": d.get("qa", [])})
    return out


def note_text(t: dict) -> str:
    return f"[{t['when']:%-d %B %Y}] {t['speaker']}: {t['text']}"


def build(sample: dict, path: Path, *, context: str, captions: bool) -> tuple[MemoryRepo, dict[str, str]]:
    """The conversation as one private repo of episode notes, one batch commit (an import)."""
    from ulid import ULID

    repo = MemoryRepo.init(path, teams={}, as_user=OWNER, now=dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))
    by_path: dict[str, str] = {}
    if context == "auto":
        return repo, written_without_context(repo, sample, captions=captions)
    previous = None
    for t in turns(sample, captions=captions):
        ctx = None
        if context != "none":
            ctx = f"{t['when']:%-d %B %Y}, {t['speaker']}"
            short = len(t["text"].split()) <= SHORT_TURN
            if previous is not None and previous["session"] == t["session"] and (
                    context == "previous" or (context == "short" and short)):
                ctx += f"; after {previous['speaker']}: {previous['text']}"
            ctx = ctx[:MAX_CONTEXT]  # a context is one line of at most this (REALTALK has longer messages)
        note = Note(id=str(ULID()), kind="episode", subject=f"user:{OWNER}", scope="private", owner=OWNER,
                    source="user", valid_from=t["when"], text=note_text(t),
                    **({"context": ctx} if ctx else {}))
        rel = episode_path(f"private/{OWNER}", note.subject, t["when"],
                           t["dia_id"].lower().replace(":", "-"))
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(note.dumps())
        by_path[rel] = t["dia_id"]
        previous = t
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--no-verify", "-m",
                    f"import {sample['sample_id']}\n\nMemory-Op: import\nMemory-Actor: {OWNER}\n"
                    "Memory-Source: system:import"], check=True)
    return repo, by_path


def written_without_context(repo: MemoryRepo, sample: dict, *, captions: bool) -> dict[str, str]:
    """The turns written through the gate (remember_many) with no context given: each turn
    follows the one before it by itself (ops/conversation.py)."""
    # No key: the other modes' notes have none (a key is indexed with the text).
    items = [dict(text=note_text(t), kind="episode", subject=f"user:{OWNER}", valid_from=t["when"].isoformat(),
                  line=t["dia_id"])
             for t in turns(sample, captions=captions)]
    result = repo.remember_many(items, as_user=OWNER, now=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc))
    if result.refused or result.held:
        raise SystemExit(f"bench_conversations: the import refused {result.refused[:3]} held {result.held[:3]}")
    return {c["path"]: c["line"] for c in result.committed}


def questions(sample: dict) -> list[dict]:
    out = []
    for q in sample["qa"]:
        if q.get("category") not in CATEGORIES:
            continue
        evidence = {e for item in q.get("evidence", []) for e in map(_dia, re.split(r"[;,]|\s+(?=D)", item))
                    if re.fullmatch(r"D\d+:\d+", e)}
        if evidence:
            out.append(dict(question=q["question"], category=q["category"], evidence=evidence))
    return out


def use(repo: MemoryRepo, mode: str, default_backend: str | None, cache: Path | None) -> None:
    backend, floor = MODES[mode]
    repo.config.embedder = EmbedderConfig(backend=backend or default_backend or EmbedderConfig().backend)
    repo.config.score_floor = floor
    repo.close()
    repo._index = None
    repo._recall = None
    mine = cache_dir(repo.root) / "embeddings.sqlite"
    if cache is not None and cache.exists() and not mine.exists():
        mine.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cache, mine)  # keyed by model and text, so any run's vectors serve
    repo.reindex(rebuild=True)
    if cache is not None and mine.exists():
        shutil.copyfile(mine, cache)


def run_mode(repo, by_path, qs, mode, now) -> list[dict]:
    k = max(KS)
    results = []
    for q in qs:
        t0 = time.perf_counter()
        hits = repo.recall(q["question"], as_user=OWNER, k=k, now=now)
        ms = (time.perf_counter() - t0) * 1000
        found = [by_path.get(h.path) in q["evidence"] for h in hits]
        first = found.index(True) if True in found else None
        results.append(dict(mode=mode, category=q["category"], n=len(hits), first=first, ms=ms))
    return results


def summarise(results: list[dict], modes: list[str], as_json: bool) -> dict:
    rows, cat_rows, out = [], [], {}
    for mode in modes:
        rs = [r for r in results if r["mode"] == mode]
        if not rs:
            continue
        hit = {k: sum(r["first"] is not None and r["first"] < k for r in rs) / len(rs) for k in KS}
        under5 = sum(r["n"] < 5 for r in rs) / len(rs)
        under10 = sum(r["n"] < 10 for r in rs) / len(rs)
        times = [r["ms"] for r in rs]
        out[mode] = dict(queries=len(rs), **{f"hit@{k}": round(v, 3) for k, v in hit.items()},
                         under5=round(under5, 4), under10=round(under10, 4), p50=round(pct(times, 50), 2),
                         p95=round(pct(times, 95), 2), by_category={})
        rows.append([MODE_TITLES[mode], len(rs), *[f"{hit[k]:.3f}" for k in KS], f"{under5:.1%}", f"{under10:.1%}",
                     f"{pct(times, 50):.1f}", f"{pct(times, 95):.1f}"])
        for c, name in CATEGORIES.items():
            cs = [r for r in rs if r["category"] == c]
            if not cs:
                continue
            h = {k: sum(r["first"] is not None and r["first"] < k for r in cs) / len(cs) for k in KS}
            out[mode]["by_category"][name] = {f"hit@{k}": round(v, 3) for k, v in h.items()}
            cat_rows.append([mode, name, len(cs), *[f"{h[k]:.3f}" for k in KS]])
    if as_json:
        print(json.dumps(out))
        return out
    console.width = max(console.width, 120)  # the rows stay one line each, also in a log file
    table("Recall in long conversations (development)", ["mode", "queries", "hit@1", "hit@5", "hit@10",
          "fewer than 5", "fewer than 10", "recall p50 ms", "recall p95 ms"], rows)
    table("by category", ["mode", "category", "queries", *[f"hit@{k}" for k in KS]], cat_rows)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="path to locomo10.json")
    ap.add_argument("--modes", default="default,bm25,plain", help="comma-separated: " + ",".join(MODES))
    ap.add_argument("--embedder", default=None, help="backend for the default mode (default: mdmem's default)")
    ap.add_argument("--conversations", default=",".join(DEV))
    ap.add_argument("--held-out", action="store_true", help="allow the held-out five (owners only)")
    ap.add_argument("--context", default="previous", choices=CONTEXTS,
                    help="what each turn's context holds: date, speaker and the turn before (previous), the "
                         "turn before only for short turns (short), date and speaker (meta), nothing (none), "
                         "none given but written through remember_many, which gives each turn the one before (auto)")
    ap.add_argument("--no-captions", action="store_true", help="leave out the captions of shared photos")
    ap.add_argument("--cache", help="an embedding cache file kept between runs (vectors by model and text)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    folder = Path(args.data) if args.data and Path(args.data).is_dir() else None
    if folder is not None:
        loaded = realtalk(folder)
        if not loaded:
            print(f"bench_conversations: no REALTALK Chat_*.json in {folder}. Skipped.")
            return 0
        if args.conversations == ",".join(DEV):  # the default: every REALTALK conversation
            args.conversations = ",".join(s["sample_id"] for s in loaded)
    elif not args.data or not Path(args.data).is_file():
        print(f"bench_conversations: no LoCoMo data at {args.data!r}; pass the path to locomo10.json "
              "(github.com/snap-research/LoCoMo, data/locomo10.json) or a folder of REALTALK's "
              "Chat_*.json (github.com/danny911kr/REALTALK, data/). Skipped.")
        return 0
    else:
        loaded = json.loads(Path(args.data).read_text())
    wanted = [c.strip() for c in args.conversations.split(",") if c.strip()]
    held = [c for c in wanted if c in HELD_OUT]
    if held and not args.held_out:
        print(f"bench_conversations: {', '.join(held)} are the held-out test; they are skipped "
              "(pass --held-out only for the owners' final check)", file=sys.stderr)
        wanted = [c for c in wanted if c not in HELD_OUT]
    if args.held_out and any(c in DEV for c in wanted) and held:
        print("bench_conversations: do not mix the development and held-out halves in one run", file=sys.stderr)
        return 2
    if not wanted:
        print("bench_conversations: no conversation left to run", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        print(f"bench_conversations: unknown mode(s) {bad}; use {', '.join(MODES)}", file=sys.stderr)
        return 2
    samples = {s["sample_id"]: s for s in loaded if s["sample_id"] in wanted}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for cid in wanted:
            if cid not in samples:
                print(f"bench_conversations: {cid} not in {args.data}", file=sys.stderr)
                continue
            repo, by_path = build(samples[cid], Path(tmp) / cid, context=args.context,
                                  captions=not args.no_captions)
            qs = questions(samples[cid])
            now = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
            for mode in modes:
                use(repo, mode, args.embedder, Path(args.cache) if args.cache else None)
                results += run_mode(repo, by_path, qs, mode, now)
            repo.close()
    summarise(results, modes, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
