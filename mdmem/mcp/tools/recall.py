"""recall: the live notes you may see that answer a question."""
from __future__ import annotations

DESCRIPTION = ("Search memory for notes that answer a question, best first. Returns only notes that are "
               "true now (unless at/include_history), that you may see, above a relevance floor; an empty "
               "list means memory has nothing relevant. kinds: restrict to profile, fact, decision, "
               "procedure, episode, working, summary. include_history: also superseded versions "
               "(\"what was it before?\"). at: ISO time for the state back then.")


def make(ctx):
    def recall(query: str, k: int = 5, kinds: list[str] | None = None, subject: str | None = None,
               key: str | None = None, at: str | None = None, include_history: bool = False) -> dict:
        hits = ctx.repo.recall(query, as_user=ctx.user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                               include_history=include_history)
        return {"hits": [h.to_dict() for h in hits]}
    return recall
