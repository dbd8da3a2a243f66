"""history: every version of a note, from git."""
from __future__ import annotations

DESCRIPTION = ("Every version of one note from git, newest first, with who changed it, when, the operation "
               "and the source. Give a path or subject + kind + key; at (ISO time) gives the version that "
               "was current then. Example: `history(subject=\"service:web\", kind=\"fact\", key=\"deploy.window\")`.")


def make(ctx):
    def history(path: str | None = None, subject: str | None = None, kind: str | None = None,
                key: str | None = None, at: str | None = None) -> dict:
        versions = ctx.repo.history(as_user=ctx.user, path=path, subject=subject, kind=kind, key=key, at=at)
        return {"versions": [v.to_dict() for v in versions]}
    return history
