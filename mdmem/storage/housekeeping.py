"""``python -m mdmem.storage.housekeeping ROOT``: git gc --auto under the repo lock.

Started in the background after some writes (GitStore.maybe_gc). Holding the repo lock while
it packs keeps git's ref and packed-refs locks away from writers, which before this failed
1 write in 100 with "failed to lock file refs/heads/main.lock".
"""
from __future__ import annotations

import sys
from pathlib import Path

from .gitstore import GitStore


def main(argv: list[str]) -> int:
    try:
        GitStore(Path(argv[0])).housekeep()
    except Exception:  # noqa: BLE001 -- a failed gc leaves loose objects, nothing worse
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
