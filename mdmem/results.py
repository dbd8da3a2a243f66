"""What the public API returns: one module of result types, one ``to_dict`` rule.

The rule: ``to_dict()`` gives every field, always (None stays None, so a committed and a
held write have the same keys), times as ISO-8601 UTC strings, nested results as dicts.
CLI ``--json`` and the MCP tools print exactly these dicts.
"""
from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[int, int, str], None]
"""Long work reports ``(done, total, what)`` through this; the CLI draws it, the library never does."""
