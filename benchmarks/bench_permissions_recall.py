"""The recall half of the permissions scenario: seven probes, top-3 each, after per-scope
consolidation. A leak is a hit the asker may not see or one carrying another's private text."""
from __future__ import annotations

from _common import embedder_modes, table, use_embedder, wants_json


def recall_table(repo, now, data) -> None:
    private = [w for w in data["writes"] if w["scope"] == "private"]
    rows = []
    for mode, floor in [(m, f) for m in embedder_modes() for f in (None, -1)]:
        use_embedder(repo, mode)
        repo.config.score_floor = floor
        leaks = underfilled = 0
        detail = []
        for user, question in data["probes"]:
            hits = repo.recall(question, as_user=user, k=3, now=now)
            visible = len(repo.notes(as_user=user, now=now))
            for h in hits:
                root = f"team/{h.team}" if h.scope == "team" else f"private/{h.owner}"
                if not repo.access.may_read_root(user, root) or any(
                        w["value"] in h.text for w in private if w["actor"] != user):
                    leaks += 1
            # Under-filled: fewer hits than the visible notes allow. With the floor on, fewer
            # hits are the floor dropping unrelated notes, so only the floor-off rows count.
            if floor is not None and len(hits) < min(3, visible):
                underfilled += 1
            detail.append(f"{user}: {len(hits)}")
        rows.append([mode, "on" if floor is None else "off", leaks,
                     f"{underfilled}/7" if floor is not None else "(floor drops unrelated)", ", ".join(detail)])
    repo.config.score_floor = None
    for name, r in data["seed_result"].items():
        rows.append([f"seed: {name}", "", r["leaked_hits"], r["underfilled"], ""])
    table("permissions: seven probes, top-3", ["embedder", "score floor", "leaked hits", "under-filled",
                                                "hits per probe"], rows,
          as_json=wants_json())
