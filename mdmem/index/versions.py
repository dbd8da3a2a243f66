"""The versions index: every committed version of every note, with the span of time it was
the current one. Serves ``at`` (the state at a past time) and history recall ("what was
it before?"). Built from git when first needed and again whenever HEAD has moved.
"""
from __future__ import annotations

import datetime as _dt
import json
import shutil

from ..errors import NoteInvalid
from ..layout import is_note_path
from ..store import StoredNote
from ..validate import validate_note
from . import fulltext


def version_docs(repo) -> list[dict]:
    store = repo.store
    head = store.head()
    if head is None:
        return []
    out = store.git("log", "--reverse", "--format=%x1e%H %ct", "--name-only", "--no-renames", head, "--",
                    "team", "private")
    open_docs: dict[str, dict] = {}
    docs: list[dict] = []
    for record in out.split("\x1e"):
        lines = [line for line in record.strip().splitlines() if line.strip()]
        if not lines:
            continue
        sha, ct = lines[0].split()
        when = int(ct)
        commit = store.repo[sha]
        for path in lines[1:]:
            if not is_note_path(path):
                continue
            if path in open_docs:
                open_docs.pop(path)["end"] = when
            try:
                entry = commit.tree[path]
            except KeyError:
                continue  # deleted here
            try:
                note = validate_note(path, store.repo[entry.id].data, repo.contracts)
            except NoteInvalid:
                continue
            doc = fulltext.note_doc(StoredNote(path, str(entry.id), note), doc_id=f"{path}@{sha}",
                                    start=when, commit=sha)
            open_docs[path] = doc
            docs.append(doc)
    return docs


class VersionsIndex:
    def __init__(self, index):
        self.index = index
        self.folder = index.base / "versions"
        self.state_path = index.base / "versions.json"
        self._ix = None
        self._searcher = None
        self._docs: dict[str, dict] = {}

    def ensure(self) -> None:
        head = self.index.repo.store.head()
        try:
            state = json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        if state.get("commit") == head and fulltext.windex.exists_in(str(self.folder)):
            if self._ix is None:
                self._ix = fulltext.windex.open_dir(str(self.folder))
            return
        with self.index._lock():
            self.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            self._ix = fulltext.open_or_create(self.folder)
            writer = self._ix.writer(limitmb=128)
            for doc in version_docs(self.index.repo):
                writer.add_document(**doc)
            writer.commit()
            self.state_path.write_text(json.dumps({"commit": head}))

    def searcher(self):
        if self._searcher is None:
            self._searcher = self._ix.searcher(weighting=fulltext.weighting())
        return self._searcher

    def allowed_docs(self, roots: list[str], *, at: int | None, until: int, kinds, subject) -> set[int]:
        """Versions the caller may see: at a past time (current then and live then), or,
        for history, every version that had started by ``until``."""
        from whoosh import query as Q

        s = self.searcher()
        if not roots:
            return set()
        parts = [Q.Or([Q.Term("root", r) for r in roots])]
        if kinds:
            parts.append(Q.Or([Q.Term("kind", k) for k in kinds]))
        if subject:
            parts.append(Q.Term("subject", subject))
        if at is not None:
            parts += [Q.NumericRange("start", None, at), Q.NumericRange("end", at + 1, None)]
        else:
            parts.append(Q.NumericRange("start", None, until))
        allowed = set(s.docs_for_query(Q.And(parts)))
        if at is not None:
            dead = Q.Or([Q.NumericRange("valid_from", at + 1, None), Q.NumericRange("valid_until", None, at),
                         Q.NumericRange("expires_at", None, at)])
            allowed -= set(s.docs_for_query(dead))
        return allowed

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
        self._searcher = None
        self._ix = None


def utc(ts: int) -> _dt.datetime | None:
    return None if ts >= fulltext.NEVER else _dt.datetime.fromtimestamp(ts, _dt.timezone.utc)
