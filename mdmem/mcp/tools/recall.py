"""recall: the live notes you may see that answer a question."""
from __future__ import annotations

import re

from ...model.kinds import DEFAULT_CONTRACTS

DESCRIPTION = ("Search memory for notes that answer a question, best first. Returns only notes that are "
               "true now (unless at/include_history), that you may see, above a relevance floor; an empty "
               f"list means memory has nothing relevant. kinds: restrict to {', '.join(DEFAULT_CONTRACTS)}. "
               "include_history: also superseded versions "
               "(\"what was it before?\"). at: ISO time for the state back then. tags: only notes whose "
               "frontmatter tags include all of these. Example: "
               "`recall(query=\"When may the web app deploy?\", kinds=[\"fact\"])`.")


def make(ctx):
    def recall(query: str, k: int = 5, kinds: list[str] | None = None, subject: str | None = None,
               key: str | None = None, at: str | None = None, include_history: bool = False,
               tags: list[str] | None = None) -> dict:
        if not ctx.index_ready.is_set():
            return {"hits": [], "index": "building",
                    "from_views": from_views(ctx.repo.startup(as_user=ctx.user), query, k),
                    "note": "the search index is still being built; these are lines of your MEMORY "
                            "views that share words with the question. Ask again shortly for ranked notes."}
        hits = ctx.repo.recall(query, as_user=ctx.user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                               include_history=include_history, tags=tags)
        return {"hits": [h.to_dict() for h in hits], "broken": ctx.repo.broken(as_user=ctx.user)}
    return recall


def from_views(view: str, query: str, k: int) -> list[str]:
    """Lines of the user's views (what they may see, nothing more) sharing the most words
    with the question: an answer while the index is built, not a ranking."""
    words = {w for w in re.findall(r"[a-z0-9]{3,}", query.lower())}
    scored = []
    for line in view.splitlines():
        if not line.startswith("- "):
            continue
        shared = len(words & set(re.findall(r"[a-z0-9]{3,}", line.lower())))
        if shared:
            scored.append((-shared, len(scored), line[2:]))
    return [line for _, _, line in sorted(scored)[:k]]
