"""Text that reaches a terminal or MEMORY.md: control characters made visible.

A note's text is data written by anyone with push access. Printed raw, an ANSI sequence
recolours or hides lines, OSC 52 writes the reader's clipboard, a carriage return or a
bidi override makes a line read as something else. Escaped as ``\\x1b``, ``\\u202e``...
they stay visible and harmless; JSON output escapes them by itself.
"""
from __future__ import annotations

import re

# C0 except tab and newline, DEL, C1, the bidirectional overrides/isolates, and the Unicode tag
# characters: invisible on screen, yet each spells an ASCII letter a model reads (text hidden
# from the person reviewing a note or a view).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                       "\U000e0000-\U000e007f]")


def _visible(m: re.Match) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str, *, newlines: bool = True) -> str:
    """``text`` with control characters shown as escapes; ``newlines=False`` escapes line
    breaks and tabs too (for one-line places like a MEMORY.md bullet)."""
    out = _CONTROLS.sub(_visible, text)
    if not newlines:
        out = out.replace("\t", "\\t").replace("\n", "\\n")
    return out
