"""The history rewrite: what git-filter-repo does to each file, commit and tag.

- an erased note's path: dropped from every commit;
- a copy the plan lists (note body, MEMORY view, git note, stashed local work): its needles
  become ``[removed]``; a note's frontmatter is never scrubbed (the plan erases such notes);
- a person being erased: identity fields only become their pseudonym — author, committer,
  tagger, ``Memory-*`` trailer values, a note's ``owner:``/``source: human:<p>`` line, a
  view's readers and ``[source: human:<p>``. Never a word in text: a handle like ``memory``
  leaves ``Memory-Op`` trailers and the text alone;
- a commit message: its needles and the names of erased notes, where the plan allows.

Every step is idempotent (a scrubbed text holds no needle, a pseudonym is no handle), so a
rewrite killed half-way is simply run again. It runs in a process of its own
(``python -m mdmem.erasure.rewrite ROOT``), reading its instructions from the journal.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ..model import layout
from ..storage import history_ops as ops
from .journal import Journal
from .needles import replace_all, scrub_context
from .plan import Plan, same_identity_key
from .scan import is_git_note, is_view, split_note

_TRAILER = re.compile(rb"^(Memory-[\w-]+: )(.*)$", re.M)


class Pseudonyms:
    """Identity fields of the people being erased -> their pseudonyms."""

    def __init__(self, plan: Plan):
        self.map: dict[bytes, bytes] = {}
        for person, pseudonym in plan.people.items():
            for name in [person, *plan.aliases.get(person, [])]:
                self.map[same_identity_key(name).encode()] = pseudonym.encode()

    def __bool__(self) -> bool:
        return bool(self.map)

    def value(self, value: bytes) -> bytes:
        """One identity value: a handle, an alias, ``human:<handle>``, ``agent:<handle>``."""
        prefix, sep, name = value.rpartition(b":")
        new = self.map.get(name.strip())  # handles are exact, as access control compares them
        return prefix + sep + new if new is not None else value

    def email(self, email: bytes) -> bytes:
        local, at, _domain = email.partition(b"@")
        new = self.map.get(local) or self.map.get(email.lower())
        return new + b"@mdmem.invalid" if new is not None else email

    def trailers(self, message: bytes) -> bytes:
        def one(m):
            values = [v.strip() for v in m.group(2).split(b",")]
            new = [self.value(v) for v in values]
            return m.group(0) if new == values else m.group(1) + b", ".join(new)
        return _TRAILER.sub(one, message)

    def frontmatter(self, front: bytes) -> bytes:
        def one(m):
            return m.group(1) + self.value(m.group(2))
        return re.sub(rb"^((?:owner|approved_by|source): ?)(\S+)$", one, front, flags=re.M)

    def view(self, data: bytes) -> bytes:
        def readers(m):
            names = [self.value(n.strip()) for n in m.group(2).split(b",")]
            return m.group(1) + b", ".join(names) + m.group(3)
        data = re.sub(rb"^(.*?Readers: )([^.\n]*)(\.)", readers, data, flags=re.M)
        return re.sub(rb"(\[source: )([^;\]\s]+)", lambda m: m.group(1) + self.value(m.group(2)), data)


class Rewriter:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.targets = {p.encode() for p in plan.targets}
        self.copies = {p.encode() for p in plan.copies}
        self.local_blobs = {b.encode() for b in plan.local_blobs}
        self.needles = [n.encode() for n in plan.needles]
        self.names = [n.encode() for n in plan.needles + plan.target_keys + plan.target_ids]
        self.message_commits = {c.encode() for c in plan.message_commits + plan.local_commits}
        self.people = Pseudonyms(plan)
        self.digest_lines = [(folder.encode(), label.encode()) for folder, label in plan.digest_lines]
        self.id_lines = re.compile(rb"^- (" + b"|".join(re.escape(i.encode()) for i in plan.target_ids) + rb")\n",
                                   re.M) if plan.target_ids else None
        self.cache: dict[tuple[bytes, bytes], bytes] = {}

    def file_info(self, filename: bytes, mode: bytes, blob_id: bytes, value):
        if filename in self.targets:
            return (None, mode, blob_id)
        name = filename.decode("utf-8", "surrogateescape")
        note_file = layout.is_note_path(name)
        view = is_view(name)
        scrub = filename in self.copies or (is_git_note(name) and self.plan.copies) or blob_id in self.local_blobs
        digest = [label for folder, label in self.digest_lines if note_file and filename.startswith(folder)]
        if not (scrub or digest or (view and self.targets) or (self.people and (note_file or view))):
            return (filename, mode, blob_id)
        key = (filename, blob_id)
        if key not in self.cache:
            data = value.get_contents_by_identifier(blob_id)
            new = self.transform(data, note_file=note_file, view=view, scrub=scrub, digest=digest)
            self.cache[key] = blob_id if new == data else value.insert_file_with_contents(new)
        return (filename, mode, self.cache[key])

    def transform(self, data: bytes, *, note_file: bool, view: bool, scrub: bool, digest: list[bytes] = ()) -> bytes:
        front, body = split_note(data) if note_file else (b"", data)
        if digest:
            # A digest of the subject names an erased note by kind and key on its own line, and
            # by id in derived_from: both go, like a view's line.
            body = b"\n".join(line for line in body.split(b"\n") if not any(line.startswith(d) for d in digest))
            if self.id_lines is not None:
                front = self.id_lines.sub(b"", front)
        if view and self.targets:
            # A view's line about an erased note names its path and key beside the text: the
            # whole line goes, not only the text ("[[.../medical.leave.oncology.md]]
            # medical.leave.oncology -- [removed]" stayed in every older view).
            body = b"\n".join(line for line in body.split(b"\n") if not any(t in line for t in self.targets))
        if scrub:
            body, _ = replace_all(body, self.needles)
            front = scrub_context(front, self.needles)
        if self.people:
            front = self.people.frontmatter(front)
            if view:
                body = self.people.view(body)
        return front + body

    def commit(self, commit, _metadata) -> None:
        if commit.original_id in self.message_commits:
            commit.message, _ = replace_all(commit.message, self.names)
        if self.people:
            commit.message = self.people.trailers(commit.message)
            commit.author_name = self.people.value(commit.author_name)
            commit.committer_name = self.people.value(commit.committer_name)
            commit.author_email = self.people.email(commit.author_email)
            commit.committer_email = self.people.email(commit.committer_email)

    def tag(self, tag, _metadata) -> None:
        # Tags are repository-wide (no root); a needle in one is the asker's own text.
        tag.message, _ = replace_all(tag.message, self.needles)
        if self.people and tag.tagger_name is not None:
            tag.tagger_name = self.people.value(tag.tagger_name)
            tag.tagger_email = self.people.email(tag.tagger_email)


def run(root: Path, refs: list[str]) -> None:
    """The rewrite, in a process of its own (it reads its instructions from the journal)."""
    if refs:
        ops.filter_repo_in_own_process(root, "mdmem.erasure.rewrite")


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    journal = Journal(root)
    state = journal.load()
    plan = Plan.from_state(state["plan"])
    refs = state["refs"]
    rw = Rewriter(plan)
    ops.filter_repo(root, refs, file_info=rw.file_info, commit=rw.commit, tag=rw.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
