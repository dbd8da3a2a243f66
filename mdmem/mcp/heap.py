"""The long-lived server's heap: how the C allocator is told to hand memory back, and the warmed
caches kept out of the collector's sight. Both for a process that lives for days; a one-shot
CLI call needs neither."""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Mapping

# glibc's mallopt parameters (malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENAS = 2
MMAP_THRESHOLD = 128 * 1024


def tune_malloc(env: Mapping[str, str]) -> dict[str, int]:
    """Two arenas for every thread, and blocks of 128 KiB and more always mapped on their own
    (glibc's default raises that threshold to the largest block freed, so the index's multi-MB
    segment buffers, read again after each flush, then came from the arenas and stayed there).
    Measured over 10 minutes of 32 pausing clients at 10k notes (docs/decisions.md): the heap
    157 -> 175 MB from minute 2, against 167 -> 215 MB untuned. A setting the operator gave in
    the environment (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, or in GLIBC_TUNABLES) is left as
    given; not glibc (musl, macOS): nothing. Returns what was set. Call it before the worker
    threads start."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return {}
    applied = {}
    tunables = env.get("GLIBC_TUNABLES", "")  # glibc's current way: glibc.malloc.arena_max=8:...
    for name, tunable, param, value in (("MALLOC_ARENA_MAX", "glibc.malloc.arena_max", M_ARENA_MAX, ARENAS),
                                        ("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold", M_MMAP_THRESHOLD,
                                         MMAP_THRESHOLD)):
        if name not in env and f"{tunable}=" not in tunables and mallopt(param, value) == 1:  # 1: done
            applied[name] = value
    return applied


def settle() -> None:
    """The caches just warmed live as long as the server: moved out of the collector's sight
    (gc.freeze), a full collection no longer walks them (one took 50-100 ms at 10,000 notes,
    stalling every request in flight). Garbage is still freed as it dies; only cycles among
    what was frozen would stay (a re-exec after an erasure starts afresh anyway)."""
    gc.collect()
    gc.freeze()
