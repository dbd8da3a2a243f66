"""One ranking over the answers of several indexes (a workspace's mounts).

Each mount's recall fuses cosine (comparable across indexes: the same embedder, unit vectors)
with BM25F scaled to the best BM25F score among ITS candidates (search/recall.py, linear
fusion): a mount whose best match is weak would still give it the full BM25 share. Before the
lists are merged, each hit's BM25 share is rescaled to the best BM25F score over all mounts'
hits, so a weak word match in one repository does not outrank a strong one in another. (The
share's weight after the read rules' multipliers is not known here; the correction assumes
none, which errs toward the hits the read rules weighted down, and is measured against one
index holding the same notes in benchmarks/bench_workspace.py.)
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..search.recall import BM25_WEIGHT

if TYPE_CHECKING:
    from ..search.recall import Hit


def merge(per_mount: list[list[Hit]], k: int, *, linear: bool = True) -> list[Hit]:
    """The best ``k`` of every mount's hits, best first (ties by path, as in one index)."""
    if len(per_mount) == 1:
        return per_mount[0][:k]
    tops = [max((h.bm25 or 0.0 for h in hits), default=0.0) for hits in per_mount]
    best = max(tops, default=0.0)
    scored = []
    for hits, top in zip(per_mount, tops):
        for h in hits:
            score = h.score
            if linear and h.bm25 and top > 0 and best > 0:
                score += BM25_WEIGHT * h.bm25 * (1.0 / best - 1.0 / top)
            scored.append((round(score, 6), h))
    scored.sort(key=lambda sh: (-sh[0], sh[1].path))
    return [dataclasses.replace(h, score=score) for score, h in scored[:k]]
