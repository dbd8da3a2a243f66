"""Which strings erasure may scrub from other files: distinctive ones only.

A needle replaced everywhere it occurs must not be a common word: `remember "y"` followed
by `forget --owner bob` once turned every "y" of every file of all history into
"[removed]". So a copy is scrubbed only for a needle that is distinctive: long enough and
of enough words, or a recognised identifier (phone number, e-mail address), or a long
single token (an id, a key, a token).
"""
from __future__ import annotations

import functools
import re

REMOVED = "[removed]"
# A sentence fragment this long is not found by accident (measured on the benchmark data:
# no line of 20+ characters and 3+ words of one note occurs in any unrelated note).
MIN_CHARS = 20
MIN_WORDS = 3
MIN_TOKEN = 16  # one word: an id, a token, a long compound
VIEW_CUT = 160  # views quote a note's first line cut at this many characters

_PHONE = re.compile(r"\+?\d[\d ().-]{5,}\d")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
_WORD = re.compile(r"\w+")


def identifiers(text: str) -> list[str]:
    """Phone numbers and e-mail addresses: a copy often quotes only these."""
    out = [m.group(0) for m in _EMAIL.finditer(text)]
    out += [m.group(0) for m in _PHONE.finditer(text) if sum(ch.isdigit() for ch in m.group(0)) >= 7]
    return out


def is_identifier(text: str) -> bool:
    return text.strip() in identifiers(text.strip())


def is_distinctive(text: str) -> bool:
    """Safe to replace wherever it occurs."""
    t = text.strip()
    if is_identifier(t):
        return True
    words = _WORD.findall(t)
    if len(t) >= MIN_CHARS and len(words) >= MIN_WORDS:
        return True
    return len(words) == 1 and len(t) >= MIN_TOKEN


def why_not(text: str) -> str:
    # What a token is, said with the tokens given: "KIWI-MANGO-99123" has 16 characters, but a
    # hyphen ends a token, and a person counting characters could not tell why it was refused.
    tokens = _WORD.findall(text)
    longest = max(tokens, key=len, default="")
    given = (f"{len(tokens)} token(s) given, the longest {longest!r} ({len(longest)} characters)" if tokens
             else "no token given")
    return (f"it is not distinctive enough to replace everywhere: give at least {MIN_CHARS} characters and "
            f"{MIN_WORDS} words, a phone number or e-mail address, or a single token of {MIN_TOKEN}+ characters "
            f"(a token is a run of letters, digits and _; a hyphen, space or other punctuation ends it): "
            f"{given}")


def from_note_text(text: str) -> list[str]:
    """The needles an erased version's body yields: the whole body, each distinctive line
    (a copy quoted elsewhere is usually one line), the view's cut of long lines, and the
    identifiers in it. Nothing short or common."""
    out = []
    whole = text.strip()
    if is_distinctive(whole):
        out.append(whole)
    out += identifiers(text)
    for line in text.splitlines():
        line = line.strip().lstrip("-*> ").strip()
        if is_distinctive(line):
            out.append(line)
            if len(line) > VIEW_CUT:
                out.append(line[:VIEW_CUT])
    return out


def ordered(needles) -> list[str]:
    """Longest first, so a needle inside a longer one never leaves half of the longer one."""
    return sorted(set(needles), key=lambda n: (-len(n), n))


@functools.lru_cache(maxsize=4096)
def any_case(needle: str | bytes) -> bool:
    """Whether ``needle`` is matched in any letter case: a distinctive one is (a copy quoting
    "zorblax bluefin harbor" survived the erasure of "Zorblax Bluefin Harbor", and prove-gone
    passed); a short one -- a person's name pseudonymised in commit messages, a
    needle prove-gone is asked about -- only as given ("Alice" is not the user name "alice" in
    mdmem.toml's teams)."""
    text = needle.decode("utf-8", "replace") if isinstance(needle, bytes) else needle
    return is_distinctive(text)


@functools.lru_cache(maxsize=4096)
def _pattern(needle: str | bytes) -> re.Pattern:
    """The needle as a whole token: where it starts or ends with a letter or digit, the
    character beyond must not be one (erasing ``555-0199`` once rewrote an unrelated
    ``1-800-555-01990`` to ``1-800-[removed]0`` in a team note, in all history).
    Bytes >= 0x80 count as letters (UTF-8 text). In any letter case if :func:`any_case` (ASCII
    letters in bytes, every letter in str)."""
    flags = re.IGNORECASE if any_case(needle) else 0
    if isinstance(needle, bytes):
        word, esc = rb"[\w\x80-\xff]", re.escape(needle)
        left = rb"(?<!" + word + rb")" if needle[:1].isalnum() or needle[:1] >= b"\x80" else b""
        right = rb"(?!" + word + rb")" if needle[-1:].isalnum() or needle[-1:] >= b"\x80" else b""
        return re.compile(left + esc + right, flags)
    left_s = r"(?<!\w)" if needle[:1].isalnum() else ""
    right_s = r"(?!\w)" if needle[-1:].isalnum() else ""
    return re.compile(left_s + re.escape(needle) + right_s, flags)


def may_hold(haystack, needle) -> bool:
    """Whether ``needle`` may occur in ``haystack`` (in any case where :func:`any_case`): a
    substring test at C speed, the common answer being no; :func:`occurs` then asks the pattern."""
    if not needle:
        return False
    return needle.lower() in haystack.lower() if any_case(needle) else needle in haystack


def occurrences(haystack, needle) -> int:
    """How often ``needle`` occurs in ``haystack`` as a whole token (str or bytes, alike)."""
    if not may_hold(haystack, needle):
        return 0
    return len(_pattern(needle).findall(haystack))


def occurs(haystack, needle) -> bool:
    return may_hold(haystack, needle) and _pattern(needle).search(haystack) is not None


def replace_all(data: bytes, needles: list[bytes]) -> tuple[bytes, int]:
    count = 0
    for n in needles:
        if may_hold(data, n):
            data, c = _pattern(n).subn(REMOVED.encode().replace(b"\\", b"\\\\"), data)
            count += c
    return data, count


def _context_rows(lines: list[bytes]):
    """Indexes of the lines of a frontmatter's ``context: |-`` literal block."""
    inside = False
    for i, line in enumerate(lines):
        if inside and line.startswith(b"  "):
            yield i
            continue
        inside = line.rstrip() == b"context: |-"


def context_block(front: bytes) -> bytes:
    """The text of a note's ``context`` (a literal block in its frontmatter, see model/note.py):
    it may quote another note, as a conversation turn quotes the one before it."""
    lines = front.split(b"\n")
    return b"\n".join(lines[i] for i in _context_rows(lines))


def outside_context(front: bytes) -> bytes:
    """A note's frontmatter without its ``context`` block: the fields a needle cannot be
    scrubbed from without breaking the note (a needle only in the context is scrubbed there,
    and the note kept: otherwise a team fact would be erased whole, every version, for a phone
    number its context quoted)."""
    lines = front.split(b"\n")
    inside = set(_context_rows(lines))
    return b"\n".join(line for i, line in enumerate(lines) if i not in inside)


def scrub_context(front: bytes, needles: list[bytes]) -> bytes:
    """Needles replaced in the ``context`` block only, so the other fields (id, subject,
    times) stay as they were."""
    lines = front.split(b"\n")
    for i in _context_rows(lines):
        lines[i], _ = replace_all(lines[i], needles)
    return b"\n".join(lines)
