"""forget: erase notes everywhere (needs the delete capability)."""
from __future__ import annotations

DESCRIPTION = ("Erase memory for good: every version of the matching notes, from history too, and copies "
               "quoted elsewhere. By subject, by owner (a person's notes), by path, or by exact text (replaced by "
               "[removed]). Irreversible. "
               "dry_run=true shows the plan without changing anything (every file and count); a plan that changes "
               "many files needs force=true. Returns the erasure receipt (or the plan, with dry_run).")


def make(ctx):
    def forget(subject: str | None = None, owner: str | None = None, paths: list[str] | None = None,
               texts: list[str] | None = None, dry_run: bool = False, force: bool = False) -> dict:
        # The same permission as the CLI: computed on what would change, for the server's one identity.
        return ctx.repo.forget(as_user=ctx.user, subject=subject, owner=owner, paths=paths, texts=texts,
                               dry_run=dry_run, force=force).to_dict()
    return forget
