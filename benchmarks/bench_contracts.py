"""contracts_14days.json: each probe read through its contract (kinds, and the key for
profiles), and again with no kinds (the default pool). hit@1, hit@3, stale@1."""
from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import embedder_modes, remember_as_writer, scenario, table, use_embedder, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402

DATA = scenario("contracts_14days.json")
T0 = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)
KINDS = {"Profile": "profile", "Semantic": "fact", "Procedural": "procedure", "Episodic": "episode",
         "Working": "working"}
USER = "ali"
SUBJECT = "user:ali"


def build(path: Path):
    repo = MemoryRepo.init(path, teams={}, now=T0, as_user="mdmem")
    by_text: dict[str, str] = {}
    stale_texts: set[str] = set()
    by_key: dict[tuple, str] = {}
    for w in DATA["writes"]:
        ttl = dt.timedelta(hours=w["ttlHours"]) if "ttlHours" in w else None
        kind = KINDS[w["type"]]
        remember_as_writer(repo, w["content"], as_user=USER, kind=kind, subject=SUBJECT, key=w["key"],
                           source=w["source"], ttl=ttl, now=T0 + dt.timedelta(hours=w["t"]))
        by_text[w["content"]] = w["label"]
        if w["key"] and (kind, w["key"]) in by_key:
            stale_texts.add(by_key[(kind, w["key"])])
        if w["key"]:
            by_key[(kind, w["key"])] = w["content"]
    now = T0 + dt.timedelta(hours=DATA["nowHours"])
    for w in DATA["writes"]:
        if "ttlHours" in w and T0 + dt.timedelta(hours=w["t"] + w["ttlHours"]) <= now:
            stale_texts.add(w["content"])
    return repo, by_text, stale_texts, now


def score(repo, by_text, stale_texts, now, *, with_contract: bool):
    h1 = h3 = stale = 0
    misses = []
    for p in DATA["probes"]:
        kinds = [KINDS[p["contract"]]] if with_contract else None
        key = p.get("key") if with_contract else None
        hits = repo.recall(p["q"], as_user=USER, k=3, kinds=kinds, subject=SUBJECT if key else None, key=key,
                           now=now)
        labels = [by_text.get(h.text) for h in hits]
        if p["expect"] is None:
            ok1 = not labels or labels[0] != p["mustNotReturn"]
            ok3 = ok1
        else:
            ok1 = bool(labels) and labels[0] == p["expect"]
            ok3 = p["expect"] in labels
        h1 += ok1
        h3 += ok3
        stale += bool(hits) and hits[0].text in stale_texts
        if not ok1:
            misses.append(f"{p['id']}->{labels[0] if labels else 'none'}")
    n = len(DATA["probes"])
    return [f"{h1}/{n}", f"{h3}/{n}", stale, "; ".join(misses) or "-"]


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo, by_text, stale_texts, now = build(Path(tmp) / "mem")
        for mode in embedder_modes():
            use_embedder(repo, mode)
            rows.append([mode, "by contract"] + score(repo, by_text, stale_texts, now, with_contract=True))
            rows.append([mode, "no kinds (default)"] + score(repo, by_text, stale_texts, now, with_contract=False))
    for name, r in DATA["seed_result_grep_dry_run"].items():
        rows.append(["seed: grep", name, r["hit@1"], r["hit@3"], r["stale@1"], ""])
    table("contracts_14days", ["embedder", "read", "hit@1", "hit@3", "stale@1", "misses at 1"], rows,
          as_json=wants_json())


if __name__ == "__main__":
    main()
