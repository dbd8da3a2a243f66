"""startup: the view to start a session from."""
from __future__ import annotations

DESCRIPTION = ("Your startup view: how this memory is organised and used, then your current profile, "
               "procedures, working state and an index of what you may see. Call it first in a session.")


def make(ctx):
    def startup() -> str:
        return ctx.repo.startup(as_user=ctx.user)
    return startup
