"""Claude's memory tool (``memory_20250818``) backed by mdmem: the official SDK's
``BetaAbstractMemoryTool`` over a MemoryRepo.

``/memories`` is one scope root the acting person may write (their private root by default, a
team's if asked), or one subject in it. What the model sees as files are notes: a note the
tool created is shown at the path the model gave it (kept with the note as ``memory_path``),
any other note at its place below the root (``service/billing/fact/deploy.window.md``).
Every command goes through the facade and its write gate as the agent (``agent:<label>``):
``create`` writes a new note, ``str_replace`` and ``insert`` supersede it (the earlier version
stays in history), ``delete`` retires it (erasing stays a person's act: ``mdmem forget``),
``rename`` moves it (one commit: history follows it to its new name). A write the gate holds is
answered with what happened (the review id), not as an error. Any path outside
``/memories``, with ``.``/``..``/empty parts, or through a symbolic link is refused with the
tool's error form (``ToolError``), before anything is read.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.types.beta import (BetaCacheControlEphemeralParam, BetaMemoryTool20250818CreateCommand,
                                  BetaMemoryTool20250818DeleteCommand, BetaMemoryTool20250818InsertCommand,
                                  BetaMemoryTool20250818RenameCommand, BetaMemoryTool20250818StrReplaceCommand,
                                  BetaMemoryTool20250818ViewCommand)

from ..errors import BadInput, MdmemError, NotFound
from ..model import layout
from ..model.clock import TimeLike, format_time
from ..model.note import check_source, lf_lines
from ..model.text import escape_controls
from ..policy.gate import AGENT
from ..results import WriteResult
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..repo import MemoryRepo
    from .. import StoredNote

MEMORIES = "/memories"
PATH_FIELD = "memory_path"  # where the model put a note it created (kept with the note)
LINE_WIDTH = 6  # the SDK's line-number column (len(str(999999)))
MAX_PATH = 300
MAX_DEPTH = 2  # a directory view lists two levels, as the SDK's own backend does
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


class MdmemMemoryTool(BetaAbstractMemoryTool):
    """Claude's memory tool on an mdmem repository, acting for ``as_user`` as ``agent:<agent>``.

    ``scope``/``team`` choose the root (``private`` by default: the person's own); ``subject``
    narrows ``/memories`` to one subject (default: the whole root; new files are about
    ``subject`` or, without one, ``user:<as_user>`` / ``team:<team>``); ``kind`` is the kind of
    the notes the model creates (a keyed kind; ``fact`` by default). ``now`` is a time, or a
    function giving one per command (None: the clock)."""

    def __init__(self, repo: MemoryRepo | Workspace, *, as_user: str, agent: str = "claude", scope: str | None = None,
                 team: str | None = None, subject: str | None = None, kind: str = "fact",
                 now: TimeLike | Callable[[], TimeLike] = None,
                 cache_control: BetaCacheControlEphemeralParam | None = None) -> None:
        super().__init__(cache_control=cache_control)
        repo.check_user(as_user)
        self.user = as_user
        self.scope = layout.default_scope(scope, team)
        self.team = team if self.scope == "team" else None
        self.root = layout.scope_root(self.scope, team=team, owner=as_user)
        if isinstance(repo, Workspace):
            # The tool edits one root: in a workspace, the mounted repository that holds it (Refused,
            # naming the root, when it is not mounted).
            repo = repo.repo_for(self.root)
        self.repo = repo
        repo.access.check_write(as_user, self.root)  # a root the person may not write is refused here
        self.source = check_source(f"agent:{agent}", where="agent")
        self.only_subject = layout.check_subject(subject) if subject else None
        self.subject = self.only_subject or (f"user:{as_user}" if self.scope == "private" else f"team:{team}")
        contract = repo.contracts.resolve(kind)
        if not contract.keyed or contract.name == "summary":
            raise BadInput(f"kind: {contract.name} notes are not files a model can edit; give a keyed kind "
                           "(fact, profile, decision, procedure, working)")
        self.kind = contract.name
        self.now = now

    # --- the six commands ------------------------------------------------------------
    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        rel = self._rel(command.path)
        files = self._files()
        if rel in files:
            return self._show_file(command.path, files[rel], command.view_range)
        under = self._under(files, rel)
        if rel and not under:
            self._no_symlink(rel)
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        return self._show_dir(command.path, rel, under)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        rel = self._rel(command.path)
        if not rel:
            raise ToolError("Cannot create the /memories directory itself")
        self._no_symlink(rel)  # the model's path, where it lies in the root, is no way out either
        files = self._files()
        if rel in files:
            raise ToolError(f"File {command.path} already exists")
        if self._under(files, rel):
            raise ToolError(f"{command.path} is a directory")
        self._no_file_above(files, rel, command.path)
        result = self._write(command.path, command.file_text, None, rel)
        return self._answer(command.path, result, f"File created successfully at: {command.path}")

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        stored = self._file(command.path)
        # A note's text is written with LF (a file created with CRLF is stored so): the model
        # sends back the CRLF it wrote, or a note stored with CRs before meets an LF old_str.
        text, old_str, new_str = lf_lines(stored.note.text), lf_lines(command.old_str), lf_lines(command.new_str)
        count = text.count(old_str) if old_str else 0
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim "
                            f"in {command.path}.")
        if count > 1:
            lines, start = [], 0
            while (pos := text.find(old_str, start)) != -1:
                lines.append(text[:pos].count("\n") + 1)
                start = pos + 1
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` in "
                            f"lines: {', '.join(map(str, lines))}. Please ensure it is unique")
        changed = text[:text.find(old_str)].count("\n")
        new_text = text.replace(old_str, new_str)
        result = self._write(command.path, new_text, stored, None)
        shown = new_text.split("\n")
        snippet = "\n".join(f"{n + 1:>{LINE_WIDTH}}\t{shown[n]}"
                            for n in range(max(0, changed - 2), min(len(shown), changed + 3)))
        return self._answer(command.path, result, "The memory file has been edited. Here is the snippet showing "
                                                  f"the change (with line numbers):\n{snippet}")

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        stored = self._file(command.path)
        lines = stored.note.text.split("\n")
        if command.insert_line < 0 or command.insert_line > len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. It should be within the "
                            f"range [0, {len(lines)}].")
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        result = self._write(command.path, "\n".join(lines), stored, None)
        return self._answer(command.path, result, f"The file {command.path} has been edited.")

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        rel = self._rel(command.path)
        if not rel:
            raise ToolError("Cannot delete the /memories directory itself")
        files = self._files()
        targets = {rel: files[rel]} if rel in files else self._under(files, rel)
        if not targets:
            self._no_symlink(rel)
            raise ToolError(f"The path {command.path} does not exist")
        answers = []
        for name, stored in sorted(targets.items()):
            self._no_symlink(stored.path)
            try:
                result = self.repo.retire(as_user=self.user, path=stored.path, expect_version=stored.version,
                                          now=self._now(), channel=AGENT, source=self.source)
            except MdmemError as exc:
                raise ToolError(f"{MEMORIES}/{name}: {exc}") from None
            answers.append(self._answer(f"{MEMORIES}/{name}", result, f"Successfully deleted {MEMORIES}/{name}"))
        return "\n".join(answers) + ("\n(retired, not erased: earlier versions stay in history; erasing is a "
                                     "person's act, `mdmem forget`)")

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = self._rel(command.old_path), self._rel(command.new_path)
        if not old:
            raise ToolError("Cannot rename the /memories directory itself")
        if not new:
            raise ToolError(f"The destination {command.new_path} already exists")
        files = self._files()
        if new in files or self._under(files, new):
            raise ToolError(f"The destination {command.new_path} already exists")
        if new.startswith(old + "/"):
            raise ToolError(f"Cannot move {command.old_path} into itself ({command.new_path})")
        self._no_file_above(files, new, command.new_path)
        moves = {old: files[old]} if old in files else {
            f"{old}/{name}": stored for name, stored in self._under(files, old).items()}
        if not moves:
            self._no_symlink(old)
            raise ToolError(f"The path {command.old_path} does not exist")
        # Every file is judged before the first one moves: a folder's rename refused halfway would
        # leave the model told "failed" about a folder that is half moved.
        planned = []
        for name, stored in sorted(moves.items()):
            target = new + name[len(old):]
            self._no_symlink(stored.path)
            if not self.repo.contracts.resolve(stored.note.kind).keyed:
                raise ToolError(f"{MEMORIES}/{name} is an episode, and an event that happened keeps its place "
                                "(append-only); create a new file instead (nothing was moved)")
            key = self._key_for(target, stored.note.subject, stored.note.kind)
            self._no_symlink(layout.keyed_path(self.root, stored.note.subject, stored.note.kind, key))
            planned.append((name, stored, target, key))
        answers: list[str] = []
        for name, stored, target, key in planned:
            try:
                # One commit: the note leaves its old path and takes the new one, history and all.
                moved = self.repo.move(as_user=self.user, path=stored.path, key=key, expect_version=stored.version,
                                       extra={PATH_FIELD: target}, now=self._now(), channel=AGENT,
                                       source=self.source)
            except MdmemError as exc:
                done = f" (done before it: {' '.join(answers)})" if answers else ""
                raise ToolError(f"{MEMORIES}/{name}: {exc}{done}") from None
            if moved.status == "held":
                answers.append(self._answer(f"{MEMORIES}/{name} -> {MEMORIES}/{target}", moved, "")
                               + f" {MEMORIES}/{name} stays where it is until then.")
            else:
                answers.append(self._answer(f"{MEMORIES}/{name}", moved,
                                            f"Successfully renamed {MEMORIES}/{name} to {MEMORIES}/{target}"))
        return "\n".join(answers)

    # --- paths ---------------------------------------------------------------------
    def _rel(self, path: object) -> str:
        """The part of a tool path below /memories ("" for /memories itself), or ToolError."""
        if not isinstance(path, str) or not (path == MEMORIES or path.startswith(MEMORIES + "/")):
            raise ToolError(f"Path must start with /memories, got: {path!r}")
        rest = path[len(MEMORIES) + 1:] if path != MEMORIES else ""
        if rest.endswith("/"):
            rest = rest[:-1]
        parts = rest.split("/") if rest else []
        if any(p in (".", "..") for p in parts) or "\\" in rest:
            raise ToolError(f"Path {path} would escape /memories directory")
        # C1 controls (NEL is a line break to YAML), bidi overrides and line separators would make
        # a name that reads as another one in a listing or a person's review.
        if any(not p for p in parts) or escape_controls(rest, newlines=False) != rest \
                or "\u2028" in rest or "\u2029" in rest \
                or len(rest) > MAX_PATH or any(len(p) > 100 for p in parts):
            raise ToolError(f"Path {path!r} is not a valid memory path (no empty parts or control characters, "
                            f"at most {MAX_PATH} characters)")
        return rest

    def _no_symlink(self, rel_or_note_path: str) -> None:
        """ToolError if a folder or file on the way (below the repository) is a symbolic link."""
        path = rel_or_note_path
        if not path.startswith(self.root + "/"):
            path = f"{self._base()}/{path}"
        here = str(self.repo.root)
        for part in path.split("/"):
            here = os.path.join(here, part)
            try:
                mode = os.lstat(here).st_mode
            except OSError:
                return
            if stat.S_ISLNK(mode):
                raise ToolError("Path would escape /memories directory via symlink")

    def _base(self) -> str:
        return f"{self.root}/{layout.subject_dir(self.only_subject)}" if self.only_subject else self.root

    def _tool_rel(self, stored: StoredNote) -> str | None:
        given = stored.note.extra.get(PATH_FIELD)
        if isinstance(given, str):
            try:
                return self._rel(f"{MEMORIES}/{given}") or None
            except ToolError:
                pass  # a hand-edited field that is no path: the note is shown where it lies
        base = self._base() + "/"
        return stored.path[len(base):] if stored.path.startswith(base) else None

    def _files(self) -> dict[str, StoredNote]:
        """Tool path (below /memories) -> the live note shown there."""
        out: dict[str, StoredNote] = {}
        # Only this root is read (and only the subject's folder when /memories is one subject).
        for stored in self.repo.listing(as_user=self.user, root=self.root, subject=self.only_subject,
                                        now=self._now()):
            rel = self._tool_rel(stored)
            if rel is not None and rel not in out:
                out[rel] = stored
        return out

    @staticmethod
    def _no_file_above(files: dict[str, StoredNote], rel: str, path: str) -> None:
        """ToolError when a folder on the way to ``rel`` is a file: a name is a file or a folder."""
        parents = ["/".join(rel.split("/")[:n]) for n in range(1, rel.count("/") + 1)]
        above = next((p for p in parents if p in files), None)
        if above is not None:
            raise ToolError(f"{path}: {MEMORIES}/{above} is a file, not a directory")

    @staticmethod
    def _under(files: dict[str, StoredNote], rel: str) -> dict[str, StoredNote]:
        """The files below the folder ``rel`` ("" is /memories), by their path below it."""
        prefix = f"{rel}/" if rel else ""
        return {name[len(prefix):]: stored for name, stored in files.items() if name.startswith(prefix)}

    def _file(self, path: str) -> StoredNote:
        rel = self._rel(path)
        files = self._files()
        if rel not in files:
            self._no_symlink(rel)
            if self._under(files, rel) or not rel:
                raise ToolError(f"The path {path} is not a file.")
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        self._no_symlink(files[rel].path)
        return files[rel]

    def _key_for(self, rel: str, subject: str, kind: str) -> str:
        stem = rel[:-3] if rel.endswith(".md") else rel
        key = _KEY_CHARS.sub("-", stem.replace("/", ".")).strip(".-_")
        key = re.sub(r"\.{2,}", ".", key)[:100] or "memory"
        if key == "MEMORY":
            key = "MEMORY-note"
        path = layout.keyed_path(self.root, subject, kind, key)
        try:
            there = self.repo.show(as_user=self.user, path=path)
        except (NotFound, MdmemError):
            return key
        if there.note.extra.get(PATH_FIELD) == rel:
            return key
        # Another note holds that key (a file named alike, or one written another way).
        return f"{key[:90]}-{hashlib.sha1(rel.encode()).hexdigest()[:8]}"

    # --- writing and answering ----------------------------------------------------------
    def _now(self) -> TimeLike:
        return self.now() if callable(self.now) else self.now

    def _write(self, path: str, text: str, stored: StoredNote | None, rel: str | None) -> WriteResult:
        """A new note at tool path ``rel``, or a new version of ``stored``, through the gate as the agent."""
        if stored is not None:
            note = stored.note
            if not self.repo.contracts.resolve(note.kind).keyed:
                raise ToolError(f"{path} is an episode, and an event that happened is not edited (append-only); "
                                "create a new file instead")
            self._no_symlink(stored.path)
            args = dict(kind=note.kind, subject=note.subject, key=note.key, scope=note.scope, team=note.team,
                        expect_version=stored.version)
        else:
            assert rel is not None
            subject, kind = self.subject, self.kind
            key = self._key_for(rel, subject, kind)
            self._no_symlink(layout.keyed_path(self.root, subject, kind, key))
            args = dict(kind=kind, subject=subject, key=key, scope=self.scope, team=self.team,
                        extra={PATH_FIELD: rel})
        try:
            return self.repo.remember(text, as_user=self.user, source=self.source, channel=AGENT, new_key=True,
                                      now=self._now(), **args)  # type: ignore[arg-type]
        except MdmemError as exc:
            raise ToolError(f"{path}: {exc}") from None

    @staticmethod
    def _answer(path: str, result: WriteResult, done: str) -> str:
        if result.status == "held":
            return (f"{path}: held for a person's review (review id {result.review_id}): {result.reason}. "
                    f"Nothing changed in /memories until someone approves it (mdmem review approve "
                    f"{result.review_id}).")
        return f"{done}\n(committed {(result.commit or '')[:12]}; earlier versions stay in history)" if done else ""

    # --- views -----------------------------------------------------------------------
    def _show_file(self, path: str, stored: StoredNote, view_range: list[int] | None) -> str:
        self._no_symlink(stored.path)
        lines = stored.note.text.split("\n")
        start, shown = 1, lines
        if view_range:
            if len(view_range) != 2 or view_range[0] < 1 or view_range[0] > len(lines) or \
                    (view_range[1] != -1 and not view_range[0] <= view_range[1] <= len(lines)):
                raise ToolError(f"Invalid `view_range`: {view_range}. It should be [start, end] with 1 <= start <= "
                                f"end <= {len(lines)}, or end -1 for the rest of the file.")
            start = view_range[0]
            shown = lines[start - 1:] if view_range[1] == -1 else lines[start - 1:view_range[1]]
        numbered = "\n".join(f"{n:>{LINE_WIDTH}}\t{line}" for n, line in enumerate(shown, start))
        return f"Here's the content of {path} with line numbers:\n{numbered}"

    def _show_dir(self, path: str, rel: str, under: dict[str, StoredNote]) -> str:
        shown = path.rstrip("/") or MEMORIES
        sizes: dict[str, int] = {}
        entries: list[tuple[str, str]] = []
        for name, stored in sorted(under.items()):
            parts = name.split("/")
            size = len(stored.note.text.encode())
            for depth in range(1, min(len(parts), MAX_DEPTH + 1)):
                folder = "/".join(parts[:depth]) + "/"
                sizes[folder] = sizes.get(folder, 0) + size
            if len(parts) <= MAX_DEPTH:
                entries.append((name, f"{_size(size)}\t{shown}/{name}\t{_validity(stored)}"))
        entries += [(folder, f"{_size(size)}\t{shown}/{folder}") for folder, size in sizes.items()]
        lines = [f"{_size(sum(len(s.note.text.encode()) for s in under.values()))}\t{shown}"]
        lines += [line for _, line in sorted(entries)]
        held = self._held(rel)
        header = f"Here're the files and directories up to 2 levels deep in {shown}, excluding hidden items:"
        return "\n".join([header, *lines, *held])

    def _held(self, rel: str) -> list[str]:
        """This agent's writes below ``rel`` waiting for a person's review."""
        out = []
        for item in self.repo.review_list(as_user=self.user):
            if item.note.source != self.source or layout.root_of(item.path) != self.root:
                continue
            name = item.note.extra.get(PATH_FIELD) or item.path[len(self.root) + 1:]
            if not rel or str(name).startswith(rel + "/"):
                out.append(f"(held for review {item.review_id})\t{MEMORIES}/{name}")
        return out


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    return f"{n / 1024:.1f}K" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f}M"


def _validity(stored: StoredNote) -> str:
    note = stored.note
    until = note.valid_until or note.expires_at
    return f"{note.kind}, valid from {format_time(note.valid_from)}" + \
        (f" until {format_time(until)}" if until else "")
