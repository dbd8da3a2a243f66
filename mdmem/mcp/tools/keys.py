"""keys: the live keys for a subject and kind."""
from __future__ import annotations

DESCRIPTION = ("List the live keys for a subject and kind (with each note's first line). Call this before "
               "writing a keyed note so an update reuses the existing key instead of adding a duplicate. Example: "
               "`keys(subject=\"service:web\", kind=\"fact\")`.")


def make(ctx):
    def keys(subject: str, kind: str) -> dict:
        return {"keys": [k.to_dict() for k in ctx.repo.keys(as_user=ctx.user, subject=subject, kind=kind)]}
    return keys
