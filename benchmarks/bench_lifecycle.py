"""lifecycle_60days.json: hit@1, hit@3 and stale@1 over 26 questions at day 60; q26 through
the history path. Reported per embedder and for the no-kinds default."""
from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import embedder_modes, remember_as_writer, scenario, table, use_embedder, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

DATA = scenario("lifecycle_60days.json")
DAY0 = dt.datetime(2026, 8, 1, 9, tzinfo=dt.timezone.utc)
KINDS = {"Semantic": "fact", "Procedural": "procedure", "Episodic": "episode", "Buffer": "working"}
USER = "ali"


def build(path: Path) -> MemoryRepo:
    repo = MemoryRepo.init(path, teams={}, now=DAY0, as_user="mdmem")
    for w in DATA["writes"]:
        ttl = dt.timedelta(days=w["ttlDays"]) if "ttlDays" in w else None
        remember_as_writer(repo, w["value"], as_user=USER, kind=KINDS[w["layer"]], subject="service:billing",
                           key=w["key"], source=w["source"], ttl=ttl, now=DAY0 + dt.timedelta(days=w["t"]))
    return repo


def score(repo, now) -> tuple[dict, list[str]]:
    h1 = h3 = stale = stale_n = 0
    misses = []
    for q in DATA["questions"]:
        history = "history" in q["tags"]
        hits = repo.recall(q["q"], as_user=USER, k=3, include_history=history, now=now)
        texts = [h.text.lower() for h in hits]
        if q["expect"] is None:
            ok1 = not texts or q["stale"] not in texts[0]
            ok3 = all(q["stale"] not in t for t in texts)
        else:
            ok1 = bool(texts) and q["expect"] in texts[0]
            ok3 = any(q["expect"] in t for t in texts)
        h1 += ok1
        h3 += ok3
        if q["expect"] and q.get("stale"):
            stale_n += 1
            stale += bool(texts) and q["stale"] in texts[0]
        if not ok1:
            misses.append(f"{q['id']}: {texts[0][:60] if texts else '(none)'}")
    n = len(DATA["questions"])
    return {"hit@1": f"{h1}/{n}", "hit@3": f"{h3}/{n}", "stale@1": f"{stale}/{stale_n}"}, misses


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = build(Path(tmp) / "mem")
        now = DAY0 + dt.timedelta(days=DATA["nowDay"])
        for mode in embedder_modes():
            use_embedder(repo, mode)
            result, misses = score(repo, now)
            rows.append([mode, result["hit@1"], result["hit@3"], result["stale@1"], "; ".join(misses) or "-"])
    for name, r in DATA["seed_result_grep"].items():
        rows.append([f"seed: grep {name}", r["hit@1"], r["hit@3"], r["stale@1"], ""])
    table("lifecycle_60days (no kinds given; q26 with include_history)",
          ["embedder", "hit@1", "hit@3", "stale@1", "misses at 1"], rows, as_json=wants_json())


if __name__ == "__main__":
    main()
