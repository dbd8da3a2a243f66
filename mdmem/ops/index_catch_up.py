"""``python -I -m mdmem.ops.index_catch_up ROOT MODEL_ID BACKEND``: a server's index catch-up
to disk in a process of its own (search/catch_up_aside.py says why and when it is started)."""
from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """0: caught up; 1: it failed; 2: nothing done (a rebuild, another model, an erasure)."""
    from ..erasure.journal import pending
    from .state import RepoState

    root, model_id, backend = Path(argv[0]), argv[1], argv[2]
    if pending(root):
        return 2
    # The server's deferred entries of git's index (its journal) are its own: repairing them
    # here took the write lock and walked HEAD's tree while the server's writes waited.
    repo = RepoState(root, embedder=backend, repair=False)
    try:
        with repo.store.beside_writers():
            # An erasure that ended while this waited for the gate: nothing is done for it (the
            # server restarts), and nothing is read through what was opened before it.
            if pending(root) or repo.store.follow_erasures():
                return 2
            report = repo.index.catch_up_on_disk(model_id)
    except Exception:  # noqa: BLE001 -- the server's own catch-up does it then, as before
        return 1
    finally:
        repo.close(leave_housekeeping=True)
    return 0 if report is not None else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
