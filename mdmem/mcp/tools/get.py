"""get: one note's live version, by path or by subject + kind + key."""
from __future__ import annotations

DESCRIPTION = ("Read one note's live version exactly: by path, or by subject (like service:web), kind and "
               "key. Returns its text and version (pass the version to remember as expect_version to update "
               "safely). Your private note wins over a team note with the same key. Example: "
               "`get(subject=\"service:web\", kind=\"fact\", key=\"deploy.window\")`.")


def make(ctx):
    def get(path: str | None = None, subject: str | None = None, kind: str | None = None,
            key: str | None = None) -> dict:
        return ctx.repo.get(as_user=ctx.user, path=path, subject=subject, kind=kind, key=key).to_dict()
    return get
