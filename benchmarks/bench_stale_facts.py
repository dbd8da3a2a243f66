"""stale_facts.json: updates under the key gate vs. with the gate bypassed (new_key=True).

Per mode: updates whose current value is the new one with the old only in history,
updates leaving two live notes, neighbours superseded. With recall available, also
top-1 answers for Dana's probes and the TTL check.
"""
from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import embedder_modes, scenario, table, use_embedder, wants_json  # noqa: E402

from mdmem import MemoryRepo, Refused  # noqa: E402

DATA = scenario("stale_facts.json")
T0 = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)


def write(repo, text, *, user, subject, kind, key, now, new=False, **kw):
    """A writer who, when refused, declares genuinely new facts as new."""
    try:
        return repo.remember(text, as_user=user, kind=kind, subject=subject, key=key, scope="team",
                             team="payments", now=now, **kw)
    except Refused:
        if not new:
            raise
        return repo.remember(text, as_user=user, kind=kind, subject=subject, key=key, scope="team",
                             team="payments", now=now, new_key=True, **kw)


def build(path: Path, gated: bool):
    repo = MemoryRepo.init(path, teams=DATA["team"], now=T0, as_user="mdmem")
    t = T0
    for u in DATA["updates"]:
        write(repo, u["old"], user="alice", subject=u["subject"], kind=u["kind"], key=u["key"], now=t, new=True)
        t += dt.timedelta(hours=1)
    for n in DATA["neighbours"]:
        write(repo, n["value"], user="alice", subject=n["subject"], kind=n["kind"], key=n["key"], now=t, new=True)
        t += dt.timedelta(hours=1)
    t = T0 + dt.timedelta(days=14)
    refused_then_reused = 0
    for u in DATA["updates"]:
        if not gated:
            write(repo, u["new"], user="bob", subject=u["subject"], kind=u["kind"], key=u["new_key"], now=t,
                  new_key=True)
            continue
        try:
            write(repo, u["new"], user="bob", subject=u["subject"], kind=u["kind"], key=u["new_key"], now=t)
        except Refused as exc:
            # The writer reads the keys it was shown and reuses the one its fact belongs to.
            assert u["key"] in exc.existing_keys, (u, exc.existing_keys)
            refused_then_reused += 1
            write(repo, u["new"], user="bob", subject=u["subject"], kind=u["kind"], key=u["key"], now=t)
    return repo, t, refused_then_reused


def score_writes(repo, now):
    current = two_live = 0
    for u in DATA["updates"]:
        live = [s.note.text for s in repo.notes(as_user="dana", now=now)
                if s.note.subject == u["subject"] and s.note.text in (u["old"], u["new"])]
        if live == [u["new"]]:
            path = next(s.path for s in repo.notes(as_user="dana", now=now) if s.note.text == u["new"])
            past = [v.note.text for v in repo.history(as_user="dana", path=path) if v.note]
            current += u["old"] in past
        if len(live) == 2:
            two_live += 1
    touched = 0
    for n in DATA["neighbours"]:
        got = repo.get(as_user="dana", subject=n["subject"], kind=n["kind"], key=n["key"], now=now)
        touched += got.note.text != n["value"]
    return current, two_live, touched


def score_recall(repo, now):
    correct = stale = wrong = 0
    for u in DATA["updates"]:
        hits = repo.recall(u["probe"], as_user="dana", k=1, now=now)
        top = hits[0].text if hits else None
        correct += top == u["new"]
        stale += top == u["old"]
        wrong += top not in (u["new"], u["old"])
    neighbours = sum(1 for n in DATA["neighbours"]
                     if (h := repo.recall(n["probe"], as_user="dana", k=1, now=now)) and h[0].text == n["value"])
    return correct, stale, wrong, neighbours


def ttl_check(repo, now):
    t = DATA["ttl"]
    repo.remember(t["value"], as_user=t["writer"], kind=t["kind"], subject=t["subject"], key=t["key"],
                  scope="team", team="payments", ttl=f"{t['ttl_hours']}h", now=now)
    before = repo.recall(t["probe"], as_user="dana", k=1, now=now)
    later = now + dt.timedelta(days=t["advance_days"])
    after = repo.recall(t["probe"], as_user="dana", k=3, now=later)
    top_after = after[0] if after else None
    return (bool(before) and before[0].text == t["value"],
            all(h.text != t["value"] for h in after),
            "nothing" if top_after is None else f"{top_after.text[:40]} (cos {top_after.cosine})")


def main():
    recall_rows = []
    for mode in embedder_modes():
        with tempfile.TemporaryDirectory() as tmp:
            repo, now, _ = build(Path(tmp) / "mem", True)
            use_embedder(repo, mode)
            c, st, w, nb = score_recall(repo, now)
            freeze_found, freeze_gone, after = ttl_check(repo, now)
            recall_rows.append([mode, f"{c}/10", f"{st}/10", f"{w}/10", f"{nb}/5",
                                "yes" if freeze_found else "NO", "yes" if freeze_gone else "NO", after])
    seed = DATA["seed_result_static_model"]
    for name in ("raw", "key_supersession"):
        recall_rows.append([f"seed: static model, {name}", f"{seed[name]['correct']}/10", f"{seed[name]['stale']}/10",
                            f"{seed[name]['wrong']}/10", seed["neighbours_intact_at_cosine_0.80"], "", "", ""])
    table("stale_facts: Dana's top-1 after the key-gated updates", ["embedder", "correct", "stale", "wrong",
          "neighbours answer", "freeze found", "freeze gone after 4d", "top answer after expiry"], recall_rows,
          as_json=wants_json())
    rows = []
    for gated in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            repo, now, reused = build(Path(tmp) / "mem", gated)
            current, two_live, touched = score_writes(repo, now)
            rows.append(["key gate" if gated else "gate bypassed (new_key=True)",
                         f"{current}/10", f"{two_live}/10", f"{touched}/5", reused])
    table("stale_facts: writes", ["mode", "current (old only in history)", "two live notes",
                                  "neighbours superseded", "refused then key reused"], rows, as_json=wants_json())


if __name__ == "__main__":
    main()
