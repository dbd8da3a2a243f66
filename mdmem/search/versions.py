"""The versions index: every committed version of every note, with the span of time it was
the current one. Serves ``at`` (the state at a past time) and history recall ("what was
it before?"). Built from git when first needed; caught up with the new commits when HEAD moves forward,
rebuilt when history was rewritten (forget).
"""
from __future__ import annotations

import datetime as _dt

import numpy as np

from .. import cache as cachefiles
from ..errors import NoteInvalid
from ..storage.worktree import StoredNote
from ..model.validate import validate_note
from . import fulltext
from .doctable import DocTable, code, prepare_vectors

SCHEMA_VERSION = 7  # of the versions index's documents; another value rebuilds it (7: mean vectors)


def version_docs(repo, revs: str, open_docs: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """Walk the commits ``revs`` (oldest first) and return (new version docs, earlier docs
    that these commits closed). ``open_docs`` maps a path to its current version's doc and
    is updated as the walk goes."""
    store = repo.store
    docs: list[dict] = []
    closed: list[dict] = []
    new_ids: set[str] = set()
    for sha, when, paths in store.commits_with_note_paths(revs):
        for path in paths:
            if path in open_docs:
                doc = open_docs.pop(path)
                doc["end"] = when
                if doc["doc_id"] not in new_ids:
                    closed.append(doc)
            blob = store.blob_id(path, sha)
            if blob is None:
                continue  # deleted here
            try:
                note = validate_note(path, store.read_blob(blob), repo.contracts,
                                     max_bytes=repo.config.note_max_bytes)
            except NoteInvalid:
                continue
            doc = fulltext.note_doc(StoredNote(path, blob, note), doc_id=f"{path}@{sha}",
                                    start=when, commit=sha)
            open_docs[path] = doc
            docs.append(doc)
            new_ids.add(doc["doc_id"])
    return docs, closed


class VersionsIndex:
    def __init__(self, index):
        self.index = index
        self.folder = index.base / "versions"
        self.state_path = index.base / "versions.json"
        self._ix = None
        self._searcher = None
        self._table: DocTable | None = None
        self._seen: str | None = None  # the commit our searcher reflects

    def ensure(self) -> None:
        """Catch up with HEAD: only the new commits when HEAD moved forward, else rebuild."""
        head = self.index.repo.store.head()
        state, exists = self._state()
        if not (state.get("commit") == head and exists) and head is not None:
            with self.index.lock():
                # Decided again under the lock: another process may have just done it.
                cachefiles.recover_folder(self.folder)
                state, exists = self._state()
                if not (state.get("commit") == head and exists):
                    self._update(state, exists, head)
                    return
        if exists:
            if self._ix is None:
                self._ix = fulltext.windex.open_dir(str(self.folder))
            if self._seen != head and self._searcher is not None:
                self._searcher.close()  # another process caught the index up: look again
                self._searcher = None
            self._seen = head

    def _state(self) -> tuple[dict, bool]:
        state = cachefiles.read_state(self.state_path, _valid_state)
        # Made by an older mdmem (its fields differ) or with another embedder: not usable.
        usable = state.get("schema") == SCHEMA_VERSION and state.get("model") == self.index.model_id
        return state, usable and fulltext.windex.exists_in(str(self.folder))

    def _update(self, state: dict, exists: bool, head: str) -> None:
        store = self.index.repo.store
        old = state.get("commit")
        if exists and old and store.has_object(old) and store.is_ancestor(old, head):
            self._catch_up(state, old, head)
        else:
            self._rebuild(head)

    def _rebuild(self, head: str) -> None:
        open_docs: dict[str, dict] = {}
        docs, _ = version_docs(self.index.repo, head, open_docs)
        self.index.embed_docs(docs)  # before the old index goes: a failing embedder changes nothing
        fulltext.build_beside(self.folder, docs, limitmb=128)
        self.close()
        cachefiles.swap_in(self.folder)
        self._ix = fulltext.windex.open_dir(str(self.folder))
        self._save(head, open_docs)

    def _catch_up(self, state: dict, old: str, head: str) -> None:
        if self._ix is None:
            self._ix = fulltext.windex.open_dir(str(self.folder))
        open_ids: dict[str, str] = state.get("open", {})
        open_docs: dict[str, dict] = {}
        with self._ix.searcher() as s:
            for path, doc_id in open_ids.items():
                fields = s.document(doc_id=doc_id)
                if fields is not None:
                    open_docs[path] = _restore(fields)
        docs, closed = version_docs(self.index.repo, f"{old}..{head}", open_docs)
        self.index.embed_docs(closed + docs)  # a closed version is written again: with its vector
        writer = self._ix.writer()
        prepare_vectors(writer, closed + docs)
        for doc in closed:
            writer.update_document(**doc)
        for doc in docs:
            writer.update_document(**doc)
        writer.commit(mergetype=fulltext.merge_when_many)
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
        self._save(head, open_docs)

    def _save(self, head: str, open_docs: dict[str, dict]) -> None:
        cachefiles.write_state(self.state_path, {"schema": SCHEMA_VERSION, "model": self.index.model_id,
                                                 "commit": head,
                                                 "open": {p: d["doc_id"] for p, d in open_docs.items()}})
        self._seen = head

    def searcher(self):
        if self._searcher is None:
            self._searcher = self._ix.searcher(weighting=fulltext.weighting())
        return self._searcher

    def table(self) -> DocTable:
        self._table = DocTable.of(self.searcher(), self._table)
        return self._table

    def allowed_docs(self, roots: list[str], *, at: int | None, until: int, kinds, subject) -> np.ndarray:
        """Versions the caller may see (a mask over docnums): at a past time (current then
        and live then), or, for history, every version that had started by ``until``."""
        self.table()
        if at is not None:
            return self._table.allowed(roots, kinds=kinds, subject=subject, live_at=at, current_at=at)
        return self._table.allowed(roots, kinds=kinds, subject=subject, started_by=until)

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
        self._searcher = None
        self._ix = None


def _valid_state(state: dict) -> bool:
    return (isinstance(state.get("commit") or "", str) and isinstance(state.get("open", {}), dict)
            and all(isinstance(v, str) for v in state.get("open", {}).values()))



def _restore(fields: dict) -> dict:
    """A stored versions document back into the fields it was indexed with."""
    doc = dict(fields)
    doc.update(root_code=code(doc["root"]), kind_code=code(doc["kind"]), subject_code=code(doc["subject"]))
    doc["key_text"] = fulltext.words(doc.get("key") or "")
    doc["subject_text"] = fulltext.words(doc.get("subject") or "")
    return doc


def utc(ts: int) -> _dt.datetime | None:
    return None if ts >= fulltext.NEVER else _dt.datetime.fromtimestamp(ts, _dt.timezone.utc)
