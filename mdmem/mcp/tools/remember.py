"""remember: write one note through the write gate."""
from __future__ import annotations

from ...errors import Refused
from ...model.kinds import kinds_for_writers
from ...policy.gate import AGENT

DESCRIPTION = (f"Write one memory note. kind: {kinds_for_writers()}. "
               "subject: like service:web or user:alice. scope: private (default) or "
               "team (with team). The write is recorded as yours (agent:<your name>) whatever you pass; source: "
               "where you got it (tool:<name>, web:<url>, user), shown to the reviewer. Returns status committed, "
               "held (waiting for a person to review) or refused (with existing_keys: update under the matching "
               "one, or pass new_key=true if it is really new). Example: `remember(text=\"Billing deploys any "
               "weekday before 3pm\", kind=\"fact\", subject=\"service:web\", key=\"deploy.window\", "
               "scope=\"team\", team=\"<team>\")`; working state: `remember(text=\"Editing PaymentController.cs\", "
               "kind=\"working\", subject=\"task:current\", key=\"file\")`. context (optional): what was around it, "
               "like the conversation turn it answers; searched with the note, not part of its text.")


def make(ctx):
    def remember(text: str, kind: str, subject: str, key: str | None = None, scope: str | None = None,
                 team: str | None = None, source: str | None = None, ttl: str | None = None,
                 new_key: bool = False, expect_version: str | None = None, context: str | None = None) -> dict:
        try:
            # The channel decides provenance: the server's identity and agent name, never an argument.
            result = ctx.repo.remember(text, as_user=ctx.user, kind=kind, subject=subject, key=key, scope=scope,
                                       team=team, source=f"agent:{ctx.agent}", ttl=ttl, new_key=new_key,
                                       expect_version=expect_version, channel=AGENT, claimed_source=source,
                                       context=context)
        except Refused as exc:
            # A refusal is an answer the agent acts on, not a failure of the tool.
            return {"status": "refused", "reason": exc.reason, "existing_keys": exc.existing_keys}
        return result.to_dict()
    return remember
