"""Conversation turns carry their context by themselves.

A turn alone is often short of its subject ("Yes, last Tuesday!"); written with the turn it
answers as its ``context`` it is found far more often, and agents rarely pass one. So an
episode written right after another episode of the same subject by the same writer (a
conversation: the turns of one session) gets the one before as its context, unless the
caller gives one. "Right after" is by the events' own times (``valid_from``): within
TURN_GAP of each other, the earlier one first. A turn written the way transcripts are
("Speaker: text") also gets its date and speaker, the first of a session too: what a caller
who passes context gives (LoCoMo's development half, 760 questions, hit@1/5/10: no context
.447/.691/.772; context given by the writer .476/.766/.824; given by this module, the same).
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from ..model import layout
from ..model.note import MAX_CONTEXT
from ..storage.worktree import notes_named
from .state import RepoState

# Turns of one conversation follow within minutes; a day later is another conversation.
TURN_GAP = _dt.timedelta(hours=1)


@dataclass(frozen=True)
class Turn:
    """The episode a later one may follow: when it happened and what it said."""

    when: _dt.datetime
    text: str


# A turn written the way transcripts are: "Speaker: text", perhaps after a "[date] ".
_SPOKEN = re.compile(r"^\s*(?:\[[^\]\n]{1,40}\]\s*)?([^\s:\[\]][^:\n]{0,40}?):\s+(\S.*)$", re.DOTALL)


def spoken(text: str) -> tuple[str | None, str]:
    """(speaker, what was said) of a turn written as "Speaker: text"; (None, text) otherwise."""
    m = _SPOKEN.match(text)
    return (m.group(1).strip(), m.group(2)) if m else (None, text)


def context_after(previous: Turn | None, when: _dt.datetime, text: str = "") -> str | None:
    """The context a turn at ``when`` saying ``text`` gets: its date and speaker when it is
    written as a turn ("Speaker: text"), and the turn it answers when it follows one (None:
    neither)."""
    follows = previous is not None and _dt.timedelta(0) <= when - previous.when <= TURN_GAP
    speaker, _ = spoken(text)
    if not follows and speaker is None:
        return None
    head = f"{when:%-d %B %Y}" + (f", {speaker}" if speaker else "")
    if not follows or previous is None:
        return head
    before, said = spoken(previous.text)
    after = f"after {before}: {said}" if before else f"after: {said}"
    return f"{head}; {' '.join(after.split())}"[:MAX_CONTEXT]


class Turns:
    """The episodes a batch of writes may follow: the ones on disk (each day read once) and
    the ones written earlier in the same batch."""

    def __init__(self, repo: RepoState) -> None:
        self.repo = repo
        self.known: dict[tuple[str, str, str], list[Turn]] = {}
        self.read_days: set[tuple[str, str, str, _dt.date]] = set()

    def before(self, root: str, subject: str, writer: str, when: _dt.datetime) -> Turn | None:
        """The latest turn of ``subject`` in ``root`` by ``writer`` at or before ``when``,
        within TURN_GAP of it."""
        who = (root, subject, writer)
        turns = self.known.setdefault(who, [])
        for day in sorted({(when - TURN_GAP).date(), when.date()}):
            if (*who, day) not in self.read_days:
                self.read_days.add((*who, day))
                turns += self._on_disk(root, subject, writer, day)
        best = None
        for turn in turns:
            if _dt.timedelta(0) <= when - turn.when <= TURN_GAP and (best is None or turn.when >= best.when):
                best = turn
        return best

    def add(self, root: str, subject: str, writer: str, turn: Turn) -> None:
        self.known.setdefault((root, subject, writer), []).append(turn)

    def context_for(self, root: str, subject: str, writer: str, when: _dt.datetime, text: str) -> str | None:
        """The context an episode at ``when`` gets (None: it follows no turn); it is then
        remembered as the turn the next one may follow."""
        context = context_after(self.before(root, subject, writer, when), when, text)
        self.add(root, subject, writer, Turn(when, text))
        return context

    def _on_disk(self, root: str, subject: str, writer: str, day: _dt.date) -> list[Turn]:
        folder = f"{root}/{layout.subject_dir(subject)}/episode/{day:%Y-%m}"
        return [Turn(s.note.valid_from, s.note.text)
                for s in notes_named(self.repo.root, folder, (f"{day:%Y-%m-%d}-",), self.repo.contracts,
                                     max_bytes=self.repo.config.note_max_bytes)
                if s.note.kind == "episode" and s.note.owner == writer and s.note.subject == subject]
