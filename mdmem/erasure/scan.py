"""One pass over history for erasure and its proof: every commit with the paths it changed,
every (path, blob) pair that ever existed, the roots each commit touched, and the texts
every note version held (what caches may keep)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..model import layout
from ..model.note import parse_note
from ..storage import history_ops as ops

REPO_FILES = "(repository files)"  # the pseudo-root of mdmem.toml, the audit log, README, .gitignore


def root_of(path: str) -> str:
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] in ("team", "private"):
        return f"{parts[0]}/{parts[1]}"
    return REPO_FILES


def is_view(path: str) -> bool:
    return path.endswith("/MEMORY.md") and root_of(path) != REPO_FILES and path.count("/") == 2


def is_git_note(path: str) -> bool:
    """A blob of refs/notes/* (its path is the annotated commit's id, maybe fanned out)."""
    flat = path.replace("/", "")
    return len(flat) == 40 and all(c in "0123456789abcdef" for c in flat)


def split_note(data: bytes) -> tuple[bytes, bytes]:
    """(frontmatter block including its fences, body) of a note file; no frontmatter: (b"", data)."""
    if data.startswith(b"---\n") or data.startswith(b"---\r\n"):
        end = data.find(b"\n---", 4)
        if end != -1:
            nl = data.find(b"\n", end + 4)
            cut = len(data) if nl == -1 else nl + 1
            return data[:cut], data[cut:]
    return b"", data


@dataclass
class HistoryScan:
    root: Path
    commits: list[ops.CommitChanges]
    path_blobs: dict[str, set[str]] = field(default_factory=dict)
    commit_roots: dict[str, set[str]] = field(default_factory=dict)
    commit_paths: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path) -> "HistoryScan":
        scan = cls(Path(root), ops.commit_changes(root))
        for c in scan.commits:
            scan.commit_paths[c.commit] = set(c.paths)
            scan.commit_roots[c.commit] = {root_of(p) for p in c.paths}
            for path, blob in c.paths.items():
                if blob is not None:
                    scan.path_blobs.setdefault(path, set()).add(blob)
        return scan

    def first_seen(self) -> dict[str, int]:
        """blob -> the age of the first commit that wrote it (0 = the oldest; git log order)."""
        age: dict[str, int] = {}
        for rank, c in enumerate(reversed(self.commits)):
            for blob in c.paths.values():
                if blob is not None:
                    age.setdefault(blob, rank)
        return age

    def note_paths(self) -> list[str]:
        return sorted(p for p in self.path_blobs if layout.is_note_path(p))

    def blobs(self, oids) -> dict[str, bytes]:
        return ops.read_blobs(self.root, sorted(set(oids)))


def note_versions(scan: HistoryScan) -> list[tuple[str, str, str | None, str, str | None]]:
    """(path, blob, key, body, context) of every note version in history; unparsable ones whole."""
    pairs = [(p, b) for p in scan.note_paths() for b in scan.path_blobs[p]]
    data = scan.blobs(b for _, b in pairs)
    out = []
    for path, blob in pairs:
        raw = data.get(blob, b"")
        try:
            note = parse_note(path, raw)
            out.append((path, blob, note.key, note.text, note.context))
        except Exception:  # a broken version still holds text
            out.append((path, blob, None, raw.decode("utf-8", "replace"), None))
    return out


def history_texts(scan: HistoryScan, contracts=None) -> set[str]:
    """Every text the caches may hold: the body and the embedded form (context + key + body) of each
    note version current history has, and of the notes in the work tree (hand edits not yet
    committed are indexed too)."""
    from ..search.fulltext import embedding_texts
    from ..storage.worktree import scan_notes

    versions = [(key, body, context) for _, _, key, body, context in note_versions(scan)]
    if contracts is not None:
        versions += [(s.note.key, s.note.text, s.note.context) for s in scan_notes(scan.root, contracts)[0]]
    texts = set()
    for key, body, context in versions:
        texts.add(body)
        texts.update(embedding_texts(key, body, context))  # what NoteIndex embeds (alone and with its context)
    return texts
