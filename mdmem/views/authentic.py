"""Whether a committed scope view is one mdmem could have written: exactly the render of some of
its root's notes at that commit.

A clone renders a view from the notes verify trusts (policy/verify.py leaves out a note no
permitted writer committed): a judgement of the whole history, signatures included, that a
bare remote cannot repeat cheaply, nor surely as each clone does (its keys, its cache). What
must never reach an agent is text no note says: an instruction written into MEMORY.md by hand.
A view that is the render of a subset of the root's notes holds only mdmem's own words and
what those notes say, so the guard on a remote accepts exactly those (`render_of_notes`). A
view that leaves out notes a clone would trust is not refused here: each clone's first command
re-renders it (views/fresh.py), and the notes themselves are judged by verify.

The subset is read back from the view: within the budget the index names every note it
holds; beyond it, the index names the first notes, the sections name theirs, and the rest are
counted by subject. Which of a subject's uncounted notes are in leaves no trace in the text
except through those counts, so one subset per fill order is tried and rendered again; the
answer is always an exact comparison with a real render."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from ..errors import MdmemError
from ..model.layout import check_name, is_note_path
from ..storage.queries import blob_hash
from .fresh import keeps_view
from .render import SECTION_HEADINGS, SECTION_KINDS, Entry, entry_of, render_scope, section_line, view_path
from .render import entry_order as _ORDER

_MORE = re.compile(r"^(\d+) more note\(s\), by subject ")
_SUBJECT = re.compile(r"^- \[\[[^\]]*\]\] (.+) \((\d+)\)$")
_MORE_SUBJECTS = re.compile(r"^- … and (\d+) more subject\(s\)$")
_MORE_IN_SECTION = re.compile(r"^- … (\d+) more (\w+) note\(s\) in the index below$")


def unrendered_views(config, roots: Iterable[str], files: dict[str, str],
                     read: Callable[[list[str]], dict[str, bytes]]) -> list[str]:
    """The scope views among ``files`` (path -> blob id of every file under ``roots`` in one
    commit's tree, ``config`` that commit's configuration) that are no render of their root's
    notes there: written by hand, or held by a root that keeps no view. ``read`` gives blobs'
    contents by id. A view a root lacks is not listed: it tells an agent nothing."""
    from ..policy.access import Access

    access = Access(config.teams, config.erasers)
    checked = {root: [p for p in files if p.startswith(root + "/") and is_note_path(p)]
               for root in sorted(set(roots)) if view_path(root) in files}
    data = read([files[p] for notes in checked.values() for p in notes]
                + [files[view_path(root)] for root in checked])
    out = []
    for root, notes in checked.items():
        held = files[view_path(root)]
        if not keeps_view(root, config.teams, lambda held=notes: bool(held)):
            out.append(view_path(root))
            continue
        entries = [e for e in (entry_of(p, data[files[p]]) for p in notes) if e is not None]
        readers = sorted(access.readers_of_root(root))
        every = render_scope(root, sorted(entries, key=_ORDER), None, readers=readers,
                             max_lines=config.view_max_lines, max_bytes=config.view_max_bytes)
        if blob_hash(every.encode()) == held:
            continue  # every note in it, as a clone trusting them all renders it
        try:
            text = data[held].decode()
        except UnicodeDecodeError:
            out.append(view_path(root))
            continue
        if not any(render_of_notes(root, text, entries, readers=names, max_lines=config.view_max_lines,
                                   max_bytes=config.view_max_bytes) for names in (readers, _readers_in(text))
                   if names is not None):
            out.append(view_path(root))
    return out


def _readers_in(view: str) -> list[str] | None:
    """The readers a view names, when each is a well-formed handle (None otherwise). A clone
    renders with the last trusted mdmem.toml, which is not the commit's while a change to it
    waits for an admin: such a view is still a render, of other readers; a handle carries no
    instruction."""
    line = next((ln for ln in view.split("\n")[:6] if ln.startswith("Readers: ")), None)
    if line is None or ". " not in line:
        return None
    names = line[len("Readers: "):].split(". ", 1)[0]
    if names == "nobody":
        return []
    found = names.split(", ")
    try:
        return [check_name(n, "reader") for n in found]
    except MdmemError:
        return None


def render_of_notes(root: str, view: str, entries: list[Entry], *, readers: list[str], max_lines: int,
                    max_bytes: int) -> bool:
    """True when ``view`` is exactly render_scope's committed view of ``root`` from some subset of
    ``entries`` (the root's notes at one commit), with these readers and budget."""
    ordered = sorted(entries, key=_ORDER)

    def render(chosen: list[Entry]) -> str:
        return render_scope(root, sorted(chosen, key=_ORDER), None, readers=readers, max_lines=max_lines,
                            max_bytes=max_bytes)

    if render(ordered) == view:
        return True
    return any(render(chosen) == view for chosen in _subsets(view, ordered))


def _subsets(view: str, ordered: list[Entry]) -> Iterator[list[Entry]]:
    """The subsets of ``ordered`` the view's text points at (at most one per fill order)."""
    lines = view.split("\n")
    if "## Index" not in lines:
        return
    at = lines.index("## Index") + 2
    by_path = {e.path: e for e in ordered}
    bullets: list[Entry] = []
    while at < len(lines) and lines[at].startswith("- [["):
        entry = by_path.get(lines[at][4:].split("]]", 1)[0])
        if entry is None:
            return  # a link to no note of this root: no subset renders it
        bullets.append(entry)
        at += 1
    tail = [line for line in lines[at:] if line]
    more = _MORE.match(tail[0]) if tail else None
    if more is None:
        yield bullets  # within the budget the index lists every note the view holds
        return
    shown, more_of = _sections(lines[:lines.index("## Index")], ordered)
    tried = []
    for order, activate in ((1, "needed"), (-1, "needed"), (1, "last"), (1, "first")):
        chosen = _beyond_budget(ordered, bullets, shown, more_of, int(more.group(1)), tail[1:], order, activate)
        if chosen is not None and chosen not in tried:
            tried.append(chosen)
            yield chosen


def _sections(head: list[str], ordered: list[Entry]) -> tuple[set[str], dict[str, int]]:
    """The paths the view's sections list, and per kind how many more it says the index holds."""
    blocks: dict[str, set[str]] = {}
    more_of = dict.fromkeys(SECTION_KINDS, 0)
    for kind, heading in SECTION_HEADINGS:
        if f"## {heading}" not in head:
            blocks[kind] = set()
            continue
        block = head[head.index(f"## {heading}") + 2:]
        block = block[:block.index("")] if "" in block else block
        blocks[kind] = set(block)
        found = _MORE_IN_SECTION.match(block[-1]) if block else None
        if found and found.group(2) == kind:
            more_of[kind] = int(found.group(1))
    shown = {e.path for e in ordered if e.kind in blocks and section_line(e) in blocks[e.kind]}
    return shown, more_of


def _beyond_budget(ordered: list[Entry], bullets: list[Entry], shown: set[str], more_of: dict[str, int],
                   total_rest: int, subject_lines: list[str], order: int, activate: str) -> list[Entry] | None:
    """A subset with the view's first notes (``bullets``), the notes its sections list and, after
    those, per subject the counts its subject lines give (``order``: which of a subject's
    uncounted notes are taken first; ``activate``: which subjects past a cut-off subject list hold
    notes -- the first, the last, or those holding the section notes the counts still need).
    None when none is found."""
    listed: dict[str, int] = {}
    rest_subjects = 0
    for line in subject_lines:
        found = _SUBJECT.match(line)
        if found:
            listed[found.group(1)] = int(found.group(2))
        elif (cut := _MORE_SUBJECTS.match(line)):
            rest_subjects = int(cut.group(1))
    bulleted = {e.path for e in bullets}
    last_bullet = _ORDER(bullets[-1]) if bullets else None
    # Left out for sure: a note sorting before the last bullet that is not one (it would be one),
    # and a section's note sorting before the last it lists that it does not list.
    last_shown = {kind: max((_ORDER(e) for e in ordered if e.kind == kind and e.path in shown), default=None)
                  for kind in SECTION_KINDS}
    budget = dict(more_of)  # the section notes beyond a section's cap still to be taken
    for e in bullets:
        if e.kind in budget and e.path not in shown:
            budget[e.kind] -= 1

    def left_out(e: Entry) -> bool:
        if e.path in bulleted or e.path in shown:
            return False
        if last_bullet is not None and _ORDER(e) < last_bullet:
            return True
        if e.kind in SECTION_KINDS:
            return not more_of[e.kind] or (last_shown[e.kind] is not None and _ORDER(e) < last_shown[e.kind])
        return False

    by_subject: dict[str, list[Entry]] = {}
    for e in ordered:
        if e.path not in bulleted and (last_bullet is None or _ORDER(e) > last_bullet) and not left_out(e):
            by_subject.setdefault(e.subject, []).append(e)
    last_listed = max(listed) if listed else None
    taken: dict[str, list[Entry]] = {}
    spare: dict[str, list[Entry]] = {}  # not taken, per subject (for swaps that fill a section's count)
    tail: list[str] = []  # subjects past the last listed one when the list was cut short

    def takes(subject: str) -> bool:
        return subject in listed or bool(rest_subjects and (last_listed is None or subject > last_listed))
    # Per section kind, the notes beyond the cap that subjects after the current one could still give.
    later = Counter(e.kind for subject, candidates in by_subject.items() if takes(subject)
                    for e in candidates if e.kind in budget and e.path not in shown)
    for subject, candidates in sorted(by_subject.items()):
        forced = [e for e in candidates if e.path in shown]
        optional = [e for e in candidates if e.path not in shown][::order]
        if takes(subject):
            later.subtract(e.kind for e in optional if e.kind in budget)
        if subject in listed:
            want = listed[subject]
        elif rest_subjects and (last_listed is None or subject > last_listed):
            tail.append(subject)
            want = len(forced)  # filled below, once the tail's total is known
        else:
            want = 0
        picked = _fill(forced, optional, want, budget, later)
        if picked is None:
            return None
        taken[subject] = picked
        spare[subject] = [e for e in optional if e not in picked]
    if any(s not in by_subject for s in listed):
        return None
    # The tail: rest_subjects subjects holding what the listed ones do not -- one note in each
    # first, then the sections' notes beyond their caps, then any.
    left = total_rest - sum(len(picked) for picked in taken.values())
    need_subjects = rest_subjects - sum(1 for s in tail if taken[s])
    empty = [s for s in tail if not taken[s]]
    if activate == "last":
        empty.reverse()
    elif activate == "needed":
        def needed(subject: str) -> int:
            return -sum(1 for e in spare[subject] if budget.get(e.kind, 0) > 0)
        empty.sort(key=needed)
    for subject in empty:
        if need_subjects <= 0 or left <= 0:
            break
        extra = _fill([], spare[subject], 1, budget, Counter())
        if extra:
            taken[subject] += extra
            spare[subject] = [e for e in spare[subject] if e not in extra]
            need_subjects -= 1
            left -= 1
    if need_subjects:
        return None
    for sections_first in (True, False):
        for subject in [s for s in tail if taken[s]]:
            for e in list(spare[subject]):
                if left <= 0 or (e.kind in budget) != sections_first or budget.get(e.kind, 1) <= 0:
                    continue
                if e.kind in budget:
                    budget[e.kind] -= 1
                taken[subject].append(e)
                spare[subject].remove(e)
                left -= 1
    if left:
        return None
    _swap_for_sections(taken, spare, budget)
    if any(budget.values()):
        return None
    return bullets + [e for picked in taken.values() for e in picked]


def _fill(forced: list[Entry], optional: list[Entry], want: int, budget: dict[str, int],
          later: Counter) -> list[Entry] | None:
    """``forced`` and then ``want`` in all from ``optional``: first the section notes beyond the
    caps that no later subject could give (``later``), then notes outside the sections, then
    section notes, the kind later subjects can least make up for first."""
    if len(forced) > want:
        return None
    picked = list(forced)
    pool = list(optional)

    def take(e: Entry) -> None:
        if e.kind in budget:
            budget[e.kind] -= 1
        picked.append(e)
        pool.remove(e)
    for kind in budget:
        for e in [e for e in pool if e.kind == kind][:max(0, budget[kind] - later[kind])]:
            if len(picked) < want:
                take(e)
    for e in [e for e in pool if e.kind not in budget]:
        if len(picked) < want:
            take(e)
    while len(picked) < want:
        usable = [e for e in pool if budget.get(e.kind, 0) > 0]
        if not usable:
            return None
        take(max(usable, key=lambda e: budget[e.kind] - later[e.kind]))
    return picked


def _swap_for_sections(taken: dict[str, list[Entry]], spare: dict[str, list[Entry]], budget: dict[str, int]) -> None:
    """A section whose count beyond its cap is not met yet takes one of its notes in place of a
    note outside the sections of the same subject (the subject's count stays)."""
    for kind in SECTION_KINDS:
        for subject in taken:
            while budget[kind] > 0:
                wanted = next((e for e in spare[subject] if e.kind == kind), None)
                given = next((e for e in taken[subject] if e.kind not in budget), None)
                if wanted is None or given is None:
                    break
                taken[subject][taken[subject].index(given)] = wanted
                spare[subject] = [e for e in spare[subject] if e is not wanted] + [given]
                budget[kind] -= 1
