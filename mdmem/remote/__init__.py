"""Other clones and the shared remote: team sync (sync.py) and the guard a bare remote runs
(guard.py). Operations over an open repo's state, like ops/; never imported by ops/, views/,
erasure/, search/ or storage/, and it never talks to the user (cli/ does)."""
from .guard import GUARD_CHAINED, after_push, check_push, install_guard
from .sync import CONFLICT_TRAILER, ConflictPair, open_conflicts, sync

__all__ = ["CONFLICT_TRAILER", "GUARD_CHAINED", "ConflictPair", "after_push", "check_push", "install_guard",
           "open_conflicts", "sync"]
