"""prove-gone: check, for each needle, every place mdmem controls, and name what it cannot
reach (DESIGN 9). A proof that only runs queries passes while the text is still on disk, so
this one reads bytes: every git object decompressed (reachable or not), every file.

Mentions a person reviewed and kept (``allow_paths``, usually the mention scan of the
erasure) are not failures: their notes, the views that quote them and the index entries
built from them may legitimately hold a name.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..model import layout
from ..results import ProofReport
from ..search import minilm_graph
from ..storage import history_ops as ops
from ..storage.worktree import scan_notes
from .journal import Journal
from .needles import occurrences, occurs
from .scan import REPO_FILES, HistoryScan, history_texts, root_of
from ..storage.locking import LOCK_TIMEOUT_SECONDS
from ..storage.maintenance import housekeeping_lock
from ..storage.gitdir import CACHE_NAME, LOCKS_NAME, cache_dir, cache_folders, erasure_done_path


# The files of the cache folder that have a check of their own.
CACHES_CHECKED_BY_KIND = frozenset({
    "fulltext", "versions", "verify.json",
    *(f"{db}{suffix}" for db in ("embeddings.sqlite", "viewmeta.sqlite") for suffix in ("", "-journal", "-wal")),
})


def _check(where: list[str]) -> dict:
    return {"passed": not where, "where": sorted(set(where))[:50]}


def _allowed(scan: HistoryScan, allow_paths: list[str]) -> tuple[set[str], list[str], list[str]]:
    """Blob ids of every version of the allowed notes, their texts, and their [[links]]."""
    blobs = {b for path in allow_paths for b in scan.path_blobs.get(path, ())}
    texts = []
    for data in scan.blobs(blobs).values():
        data = data.decode("utf-8", "replace")
        texts.append(data.split("---", 2)[-1].strip() if data.startswith("---") else data)
    return blobs, texts, [f"[[{p}]]" for p in allow_paths]


def _explained(data: str, needle: str, texts: list[str], links: list[str]) -> bool:
    """Every line holding the needle quotes an allowed note (a view line, a digest line)."""
    for line in data.splitlines():
        if occurs(line, needle) and not any(link in line for link in links) and not any(
                t_line.strip() and t_line.strip() in line for t in texts for t_line in t.splitlines()
                if occurs(t_line, needle)):
            return False
    return True


def prove_gone(repo, needles: list[str], *, as_user: str, subject=None, owner=None, allow_paths=None) -> ProofReport:
    """An eraser's proof covers everything, and so does the proof of someone who may read every
    root the history holds; anyone else's covers the roots they may read (and
    the repository's own files), says how much it did not check and is INCOMPLETE (never PASS),
    naming the erasers who can complete it, so it is no oracle for other people's data."""
    if not needles:
        raise BadInput("prove-gone: give at least one --needle")
    if subject or owner:
        repo.access.check_prove(as_user, subject=subject, owner=owner)
    whole = as_user in repo.access.erasers  # the proof covers every place (else the roots the asker reads)

    def readable(root: str) -> bool:
        return whole or root == REPO_FILES or repo.access.may_read_root(as_user, root)

    allow_paths = list(allow_paths or [])
    root = repo.root
    # What it reads it reads with no housekeeping under way (a repack moves objects between
    # files); writers may go on (files they add or remove meanwhile: _Walk).
    with housekeeping_lock(root, shared=True, timeout=LOCK_TIMEOUT_SECONDS):
        git_dir = ops.git_dir(root)
        scan = HistoryScan.read(root)
        # Someone who may read every root this history holds (the owner of a private scope
        # repository, which names no eraser) may be shown all of it: their proof is no oracle
        # for anyone else's notes, so it covers what an eraser's covers, and may say PASS. Not
        # while the repository holds objects history does not reach (a rejected hold of
        # another person's private note, fetched then dropped): whose they are nobody can
        # say, and a proof reading them answered whether a guessed text was in one.
        whole = whole or (all(readable(r) for r in _all_roots(scan))
                          and not ops.all_object_ids(root) - ops.reachable_objects(root))
        allowed_blobs, allowed_texts, links = _allowed(scan, allow_paths)
        checkable = None
        not_checked = 0
        if not whole:
            checkable = {b for p, bs in scan.path_blobs.items() if readable(root_of(p)) for b in bs}
            checkable |= {c for c, roots in scan.commit_roots.items() if all(readable(r) for r in roots)}
        objects = []
        for oid, kind, data in ops.all_objects(root):
            if checkable is None or oid in checkable:
                objects.append((oid, kind, data))
            else:
                not_checked += 1
        live_all = scan_notes(root, repo.contracts)[0]
        live = [s for s in live_all if readable(s.root)]
        trees = ops.linked_worktrees(root)
        caches = cache_folders(root)
        files, linked_files, seen = _read_files(root, git_dir, trees, caches, readable, whole)
        # A locked worktree whose folder is not here (an unmounted disk) may come back holding the
        # text, and nothing here can read it: it fails. An unlocked one whose folder is
        # gone is named in cannot_reach (git prunes it).
        away = [f"worktree {tree.path} (locked, its folder is not here: cannot be checked; mount it, or "
                "`git worktree unlock` and `git worktree prune` if it is gone)" for tree in trees
                if tree.locked and not tree.path.is_dir()]
        away += seen.work_tree_unread
        # Ref names are repository-wide: everyone's proof checks them; .git's files only an eraser's.
        ref_names = [(f"ref name {name}", name.encode()) for name, _, _ in ops.list_refs(root)]
    meta_files = ref_names + seen.meta_files
    stash = "\n".join(e.message for e in ops.stash_entries(root))
    report = {"needles": [], "subject": subject, "owner": owner}
    for needle in needles:
        nb = needle.encode()
        checks = {}
        checks["live_notes"] = _check([s.path for s in live
                                       if occurs(s.note.text, needle) and s.path not in allow_paths])
        bad_objects = []
        for oid, kind, data in objects:
            if occurs(data, nb) and oid not in allowed_blobs:
                text = data.decode("utf-8", "replace")
                if kind == "blob" and allow_paths and _explained(text, needle, allowed_texts, links):
                    continue
                bad_objects.append(f"{kind} {oid}")
        checks["git_objects"] = _check(bad_objects + seen.unlisted
                                       + [rel for rel, data in seen.object_side_files if occurs(data, nb)])
        checks["refs_reflogs_stash_notes"] = _check(
            [rel for rel, data in meta_files if occurs(data, nb)]
            + (["stash"] if needle in stash else []))
        checks["work_tree"] = _check([label for label, rel, data in [(r, r, d) for r, d in files] + linked_files
                                      if occurs(data, nb) and rel not in allow_paths
                                      and not _explained(data.decode("utf-8", "replace"), needle, allowed_texts,
                                                         links)] + away)
        checks["fulltext_index"] = _index_check(caches, root, seen.index_files, needle, allowed_texts,
                                                allow_paths, readable, seen.stray_index)
        if whole:
            checks.update(_cache_checks(seen, caches, root, needle, allowed_texts, allow_paths))
        checks["memory_views"] = _check([rel for rel, data in files if rel.endswith("MEMORY.md") and occurs(data, nb)
                                         and not _explained(data.decode("utf-8", "replace"), needle,
                                                            allowed_texts, links)])
        report["needles"].append({"needle_index": len(report["needles"]), "checks": checks,
                                  "passed": all(c["passed"] for c in checks.values()),
                                  "nearest": _nearest(repo, needle, as_user)})
    report["scope"] = _scope_checks(repo, live_all, allow_paths, subject, owner, readable)
    report["scope"]["no_erasure_in_progress"] = _check(
        [".git/mdmem-erasure (an erasure was interrupted: run mdmem forget --resume)"]
        if Journal(root).folder.exists() else [])
    report["scope"]["caches_hold_only_history"] = _caches_hold_only_history(repo, scan, readable, whole)
    report["not_checked"] = {"git_objects": not_checked,
                             "git_metadata": "checked" if whole else "not checked (needs the eraser role)",
                             # These caches hold every root's text in one file: a byte scan by
                             # someone who may not read every root would be an oracle.
                             "caches": "not checked (they hold every root; needs the eraser role)",
                             "roots": sorted(r for r in _all_roots(scan) if not readable(r))} \
        if not whole else {}
    processes = unvouched_processes(root)
    report["cannot_reach"] = cannot_reach(repo, processes)
    found = not (all(n["passed"] for n in report["needles"]) and all(c["passed"] for c in report["scope"].values()))
    # A proof by someone who may not read every root, git's own files and the caches did not
    # look everywhere the text could be: it never says PASS, whether or not the text is in what
    # it could not read (a PASS there would be an oracle for other people's data).
    # A running process that read the text before it was erased may keep it in freed memory,
    # where no proof can look: not complete until it is restarted (named in cannot_reach).
    complete = whole and not any(holds for *_, holds in processes)
    for item in report["needles"]:  # ``passed``: every check made passed; ``verdict`` says if that is all
        item["verdict"] = "FAIL" if not item["passed"] else ("PASS" if complete else "INCOMPLETE")
    report["verdict"] = "FAIL" if found else ("PASS" if complete else "INCOMPLETE")
    report["complete_by"] = [] if complete else sorted(repo.access.erasers)
    report["passed"] = report["verdict"] == "PASS"
    return ProofReport.from_dict(report)


def _named_by_mdmem(parts: tuple[str, ...]) -> bool:
    """A path (under the git dir) whose name mdmem chose: in a cache folder or a lock folder, the
    repository's or a linked worktree's. Their names are fixed words ("daemon.log", "index.lock"):
    a needle like "lock" must not fail every proof on them; what they hold is read."""
    own = (CACHE_NAME, LOCKS_NAME)
    return parts[0] in own or (len(parts) > 2 and parts[0] == "worktrees" and parts[2] in own)


# Readings of .git and the caches a proof makes while files vanish under it (writers at work),
# before it names what kept vanishing to fail.
READ_TRIES = 8


@dataclass
class _EraserFiles:
    """What only an eraser's proof reads, read once for every needle: git's own files (as
    bytes), the files under objects/ the object scan does not read, and mdmem's cache folders
    (the indexes' files, checked as an index; the rest as bytes, databases also row by row;
    what can be read neither way, named to fail)."""

    meta_files: list[tuple[str, bytes]] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  # objects git does not list
    object_side_files: list[tuple[str, bytes]] = field(default_factory=list)
    index_files: list[tuple[str, bytes]] = field(default_factory=list)
    stray_index: list[str] = field(default_factory=list)  # index files outside a current index
    other_cache_files: list[tuple[str, bytes]] = field(default_factory=list)
    other_databases: list[tuple[str, list]] = field(default_factory=list)
    cannot_check: list[str] = field(default_factory=list)
    work_tree_unread: list[str] = field(default_factory=list)  # (anyone's proof) files that kept vanishing

    @classmethod
    def read(cls, root: Path, git_dir: Path, caches: list[Path], walk: _Walk) -> _EraserFiles:
        out = cls()
        # git's own files; mdmem's caches inside .git are checked by their kind
        everything = walk.files_under(git_dir, folders=True)
        out.meta_files = walk.read_all((_label(p, root), p) for p in everything
                                   if p.is_file() and p.relative_to(git_dir).parts[0] not in ("objects", CACHE_NAME)
                                   and not _in_cache(p, caches))
        out.meta_files += [(f"file name {p.relative_to(git_dir)}", str(p.relative_to(git_dir)).encode())
                           for p in everything if not _named_by_mdmem(p.relative_to(git_dir).parts)]
        out.unlisted, out.object_side_files = _object_files(git_dir, root, walk)
        # The daemon's log, state files, a moved-aside (broken/) or half-written (*.tmp) copy,
        # the embedder's graph (models/) are "other" cache files.
        for folder in caches:
            out.stray_index += _stray_index_files(folder, root, walk)
            for p in walk.files_under(folder):
                top = p.parts[len(folder.parts)]
                if p.is_symlink() or (data := walk.read(p)) is None:
                    continue
                rel = _label(p, root)  # as the person finds it: .git/mdmem/...
                if top in ("fulltext", "versions"):
                    out.index_files.append((rel, data))
                elif top == "models" and p.suffix == ".onnx" and minilm_graph.cached_path(p) is not None:
                    continue  # the embedder's graph as built, its sha256 in its check file: weights,
                    # in which short needles ("Wu") match by chance
                elif top not in CACHES_CHECKED_BY_KIND:
                    out.other_cache_files.append((rel, data))
                    if not _bytes_checkable(p.name):
                        out.cannot_check.append(f"{rel} (compressed or encoded: cannot be checked as bytes; "
                                                "delete it, it is a cache)")
                    elif out.other_cache_files[-1][1].startswith(b"SQLite format 3\0"):
                        # Its rows too: a needle across an overflow page's seam is in no page's
                        # bytes (a damaged copy moved aside can only be read as bytes).
                        out.other_databases.append((rel, _sqlite_values(p) or []))
        return out


def _read_files(root: Path, git_dir: Path, trees, caches: list[Path], readable, eraser: bool):
    """Every file a proof searches, read once: the main work tree's, each linked worktree's (an
    erasure scrubs those too) and, for an eraser, .git's and the caches' (:class:`_EraserFiles`).
    Read again while files vanish under the reading or a writer's temporary object is there
    (:class:`_Walk`); what still did after READ_TRIES readings is named to fail."""
    for attempt in range(READ_TRIES):
        time.sleep(0.05 * attempt)  # a moment for the writer to finish
        walk = _Walk()
        files = walk.read_all((rel, p) for rel, p in _work_tree_files(root, walk) if readable(root_of(rel)))
        linked_files = [(f"worktree {tree.path}: {rel}", rel, data) for tree in trees
                        for rel, data in walk.read_all((rel, p) for rel, p in _work_tree_files(tree.path, walk)
                                                       if readable(root_of(rel)))]
        seen = _EraserFiles.read(root, git_dir, caches, walk) if eraser else _EraserFiles()
        if not walk.vanished and not walk.unsettled:
            break
    for p in dict.fromkeys(walk.vanished):
        where = (f"{_label(p, root)} (changed while the proof read it: cannot be checked; run prove-gone again "
                 "when writes pause)")
        (seen.cannot_check if p.is_relative_to(git_dir) else seen.work_tree_unread).append(where)
    return files, linked_files, seen


def _cache_checks(seen: _EraserFiles, caches: list[Path], root: Path, needle: str, allowed_texts: list[str],
                  allow_paths: list[str]) -> dict[str, dict]:
    """The eraser's checks of mdmem's cache folders for one needle. Files are named as before
    in the repository's own cache folder, by their path under .git in a linked worktree's."""
    forms = _raw_forms(needle)
    return {
        "embedding_cache": _check([w for f in caches for w in _sqlite_check(
            f / "embeddings.sqlite", _namer(f, caches, root), forms, [], needle, database_bytes=False)]),
        "view_cache": _check([w for f in caches for w in _sqlite_check(
            f / "viewmeta.sqlite", _namer(f, caches, root), forms, allowed_texts, needle)]),
        "trust_cache": _check([w for f in caches for w in _trust_cache_check(
            f / "verify.json", _namer(f, caches, root), needle, allow_paths)]),
        "other_cache_files": _check(
            [rel for rel, data in seen.other_cache_files if any(occurs(data, form) for form in forms)]
            + [rel for rel, values in seen.other_databases if _occurrences_in_values(values, forms)]
            + seen.cannot_check),
    }


def _all_roots(scan: HistoryScan) -> set[str]:
    return {root_of(p) for p in scan.path_blobs} - {REPO_FILES}


def _caches_hold_only_history(repo, scan: HistoryScan, readable, eraser: bool) -> dict:
    """Every embedding-cache key is the hash of (model, a text current history holds); every
    index document (current and versions, deleted ones too) holds such a text. For someone
    who may not read every root only the index documents of roots they may read are counted:
    the embedding cache's keys name no root, so a count of them would tell about the others'
    texts (the report says those caches are not checked for them)."""
    texts = history_texts(scan, repo.contracts)
    where = []
    caches = cache_folders(repo.root)
    for base in caches:  # the repository's, then each linked worktree's (named by its path)
        label = "" if base == caches[0] else f"{_label(base, repo.root)}/"
        where += cache_folder_leftovers(base, texts, readable, eraser, label=label)
    return _check(where)


def cache_folder_leftovers(base: Path, texts: set[str], readable: Callable[[str], bool], eraser: bool, *,
                           label: str = "") -> list[str]:
    """What one cache folder (a repository's, a linked worktree's, a workspace's index) holds
    that ``texts`` (what history holds) do not: embedding-cache entries (checked for an eraser
    only: their keys name no root) and index documents of the roots ``readable`` admits (every
    one for an eraser). Each named by ``label`` and the file, never quoted."""
    from ..search.embedding_cache import cache_key

    from whoosh import index as windex

    where = []
    cache_path = base / "embeddings.sqlite"
    if eraser and os.path.lexists(cache_path):
        # Read without changing it (opening it as the cache does writes, and moved a file
        # it could not open to broken/).
        entries = _cache_entries(cache_path)
        if entries is None:
            where.append(f"{label}embeddings.sqlite (cannot be read as a database: cannot be checked; "
                         "delete it, it is a cache)")
        else:
            keep = {cache_key(m, t) for m in {m for _, m in entries} for t in texts}
            orphans = sum(1 for k, _ in entries if k not in keep)
            if orphans:
                where.append(f"{label}embeddings.sqlite: {orphans} entr(y/ies) for texts no longer in history")
    for name in ("fulltext", "versions"):
        folder = base / name
        if not windex.exists_in(str(folder)):
            continue
        with windex.open_dir(str(folder)).reader() as reader:
            bad = 0
            for n in range(reader.doc_count_all()):
                fields = reader.stored_fields(n)
                if not eraser and not readable(fields.get("root") or root_of(fields.get("path") or "")):
                    continue
                bad += (fields.get("body") or "") not in texts
        if bad:
            where.append(f"{label}{name}: {bad} document(s) whose text is no longer in history")
    return where


def _work_tree_files(root: Path, walk: _Walk) -> list[tuple[str, Path]]:
    if not root.is_dir():
        return []  # a linked worktree whose folder is gone: named elsewhere (away, cannot_reach)
    out = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=walk.gone):
        dirnames[:] = [d for d in dirnames if d != ".git"]  # an old .mdmem/ cache is a local file like any other
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():  # a link's target is outside what mdmem controls
                out.append((str(p.relative_to(root)), p))
    return out


class _Walk:
    """Files listed and read while writers may change them (a writer's lock files, a cache file
    replaced, a folder git removes): what vanished between the listing and the reading is
    noted, never an error (pathlib's rglob raised FileNotFoundError on a folder a repack
    removed and failed the proof with a traceback). A proof that noted any reads again, and
    names what kept vanishing to fail: a file renamed mid-walk may be in neither listing."""

    def __init__(self) -> None:
        self.vanished: list[Path] = []
        # A writer's temporary object or pack (tmp_*) seen: a moment later it is renamed, or
        # it is a killed writer's and still there (then it fails as git does not list it).
        self.unsettled: list[Path] = []

    def files_under(self, folder: Path, *, folders: bool = False) -> list[Path]:
        """Every file under ``folder`` (with ``folders``, every folder too); links to folders
        are not followed."""
        if not folder.is_dir():
            return []
        out = []
        for dirpath, dirnames, filenames in os.walk(folder, onerror=self.gone):
            base = Path(dirpath)
            out += [base / name for name in (*dirnames, *filenames) if folders or name in filenames]
        return out

    def gone(self, err: OSError) -> None:
        """os.walk's onerror: a folder that vanished before it was listed."""
        self.vanished.append(Path(err.filename))

    def read(self, path: Path) -> bytes | None:
        """A file's bytes; None if it is not a regular file any more."""
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            self.vanished.append(path)
            return None

    def read_all(self, named) -> list[tuple[str, bytes]]:
        """``(name, bytes)`` of each ``(name, path)`` still there to read."""
        return [(name, data) for name, path in named if (data := self.read(path)) is not None]


def _namer(folder: Path, caches: list[Path], root: Path):
    """How a check names a file of ``folder``: by its name in the repository's own cache
    folder, by its path under .git in a linked worktree's."""
    if folder == caches[0]:
        return lambda path: path.name
    return lambda path: _label(path, root)


def _in_cache(path: Path, caches: list[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in caches)


def _raw_forms(needle: str) -> list[bytes]:
    """The needle as a byte scan must look for it: as UTF-8, and as JSON writes it by default
    (``\\u00eb`` for ë: the view cache's rows, state files)."""
    forms = [needle.encode()]
    escaped = json.dumps(needle)[1:-1].encode()
    return forms if escaped == forms[0] else [*forms, escaped]


# What a byte scan can check: text, and SQLite pages of JSON rows, as mdmem writes them (a
# segment's kept long lists hold their words as bytes too). Anything else in a cache folder
# (a search-index file outside a current index, a copy put aside) is compressed or encoded.
_BYTES_CHECKABLE_SUFFIXES = (".json", ".tmp", ".log", ".lock", ".longpost", ".onnx", ".onnx.check")
_BYTES_CHECKABLE_NAMES = frozenset({"worktree-id", "daemon.autostart", "MAIN_WRITELOCK"})
# A database, its journal or log, or a copy moved aside (broken/<name>.<time>); not a name that
# merely holds ".sqlite" (viewmeta.sqlite.gz is compressed).
_SQLITE_NAME = re.compile(r"[\w.-]+\.sqlite(?:-journal|-wal|-shm)?(?:\.\d+)?")


def _bytes_checkable(name: str) -> bool:
    return (name.endswith(_BYTES_CHECKABLE_SUFFIXES) or name in _BYTES_CHECKABLE_NAMES
            or _SQLITE_NAME.fullmatch(name) is not None)


def _label(path: Path, root: Path) -> str:
    """A file of git's directory as the report names it: under the work tree (.git/...), or whole
    (a --separate-git-dir repository, a linked worktree's shared directory)."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# Files of objects/pack git reads (a pack is listed by its .idx, whatever its name).
_PACK_FILE = re.compile(r"(?!tmp_)[^/]+\.(pack|idx|rev|bitmap|mtimes|keep|promisor)"
                        r"|multi-pack-index(?:-[0-9a-f]+\.\w+)?")
_LOOSE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{38}(?:[0-9a-f]{24})?")


def _object_files(git_dir: Path, root: Path, walk: _Walk) -> tuple[list[str], list[tuple[str, bytes]]]:
    """The files under objects/ the object scan does not read: (those whose objects git does
    not list, each failing the proof: a pack without its index, a killed fetch's tmp_pack_*, a
    killed push's incoming-* quarantine; the rest, read as bytes: objects/info/, a pack's
    .keep, .promisor and other side files, which may hold text). Loose objects and
    indexed packs are read whole by the object scan."""
    objects = git_dir / "objects"
    unlisted: list[str] = []
    side: list[tuple[str, bytes]] = []
    packs = objects / "pack"
    for p in walk.files_under(objects):
        rel = p.relative_to(objects).as_posix()
        if _LOOSE.fullmatch(rel):
            continue
        match = _PACK_FILE.fullmatch(p.name) if p.parent == packs else None
        if rel.startswith("info/commit-graph") or p.name.startswith("multi-pack-index") or (
                match and match.group(1) in ("rev", "bitmap", "mtimes")):
            continue  # binary by format (object ids, offsets, bitmaps): no text to hold, and a
            # short needle matches their random bytes by chance
        if rel.startswith("info/") or (match and match.group(1) not in ("pack", "idx")):
            side.append((_label(p, root), (walk.read(p) or b"") if p.is_file() else b""))
        elif match and (match.group(1) == "idx" or p.with_suffix(".idx").is_file()):
            continue  # a pack git lists by its index (an index alone names objects, holds none)
        else:
            if p.name.startswith("tmp_"):
                walk.unsettled.append(p)  # being written now, if a reading a moment later finds it gone
            unlisted.append(f"{_label(p, root)} (git does not list its objects: cannot be checked; delete it, "
                            "git cannot read it either)")
    return unlisted, side


def _stray_index_files(folder: Path, root: Path, walk: _Walk) -> list[str]:
    """Files in a search index's folders that are not part of its current index (a segment a
    kill left, a folder without its table of contents): Whoosh compresses what it stores, so
    neither reading the index nor a byte scan sees what they hold. Each fails."""
    from whoosh import index as windex

    out = []
    for name in ("fulltext", "versions"):
        index_folder = folder / name
        if not index_folder.is_dir():
            continue
        current: tuple[str, ...] = ()
        if windex.exists_in(str(index_folder)):
            try:
                ix = windex.open_dir(str(index_folder))
                with ix.reader() as reader:
                    ids = [leaf.segment().segment_id() for leaf, _ in reader.leaf_readers()
                           if hasattr(leaf, "segment")]
                current = tuple(ids)  # a segment's id is "<index name>_<id>": its files' stem
            except Exception:  # noqa: BLE001 -- unreadable: every file of it is reported below
                current = ()
        for p in walk.files_under(index_folder):
            # A table of contents (an older one may linger) lists segments and the schema, as a
            # plain pickle: the byte scan reads it.
            if p.name in _BYTES_CHECKABLE_NAMES or p.name.endswith(".toc"):
                continue
            if not any(p.name.startswith(c + ".") for c in current):
                out.append(f"{_label(p, root)} (not part of the current index: cannot be checked; "
                           "`mdmem index --rebuild` replaces the folder)")
    return out


def _index_check(caches: list[Path], root: Path, files: list[tuple[str, bytes]], needle: str,
                 allowed_texts: list[str], allow_paths: list[str], readable, stray: list[str]) -> dict:
    """Whoosh compresses stored fields, so a raw byte scan alone would pass with the text
    still there: read every stored document, deleted ones included (they linger in segment
    files until a merge), and also scan the raw bytes. ``stray``: files no reading covers."""
    from whoosh import index as windex

    where = list(stray)
    for folder in caches:
        for name in ("fulltext", "versions"):
            index_folder = folder / name
            if not windex.exists_in(str(index_folder)):
                continue
            label = _label(index_folder, root) if folder != caches[0] else name
            with windex.open_dir(str(index_folder)).reader() as reader:
                for docnum in range(reader.doc_count_all()):
                    fields = reader.stored_fields(docnum)
                    if not readable(fields.get("root") or root_of(fields.get("path") or "")):
                        continue
                    if any(isinstance(v, str) and occurs(v, needle) for v in fields.values()):
                        deleted = reader.is_deleted(docnum)
                        if deleted or fields.get("path") not in allow_paths:
                            where.append(f"{label}: {fields.get('doc_id')}"
                                         f"{' (deleted, lingering)' if deleted else ''}")
    nb = needle.encode()
    raw = [rel for rel, data in files if occurs(data, nb)]
    explained = sum(occurrences(t, needle) for t in allowed_texts) * 2 * len(caches)
    if sum(occurrences(data, nb) for _, data in files) > explained:
        where += raw
    return _check(where)


def _sqlite_check(path: Path, name_of, forms: list[bytes], allowed_texts: list[str], needle: str, *,
                  database_bytes: bool = True) -> list[str]:
    """The database and its rollback journal or write-ahead log, each read as bytes even when
    the database itself is gone (a journal a killed writer left holds whole pages);
    something other than a file at one of those names cannot be read, and fails.
    ``database_bytes=False``: the database itself is read row by row only (the embedding cache:
    hashed keys and float vectors, whose bytes a short needle matches by chance)."""
    data, where = b"", []
    for name in (path.name, path.name + "-journal", path.name + "-wal"):
        if name == path.name and not database_bytes:
            if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
                where.append(f"{name_of(path)} (not a file that can be read: cannot be checked; delete it, "
                             "it is a cache)")
            continue
        part = path.with_name(name)
        if not os.path.lexists(part):
            continue
        try:
            if part.is_symlink() or not part.is_file():
                raise IsADirectoryError(name)
            data += part.read_bytes()
        except OSError:
            where.append(f"{name_of(part)} (not a file that can be read: cannot be checked; delete it, it is a cache)")
    found = sum(occurrences(data, form) for form in forms)
    explained = sum(occurrences(t, needle) for t in allowed_texts)
    if (data or not database_bytes) and not where and path.is_file():
        # A long row continues on overflow pages, each starting with a link to the next: a
        # needle across that seam is in no page's bytes. SQLite reads it whole.
        rows = _sqlite_values(path)
        if rows is None:
            where.append(f"{name_of(path)} (cannot be read as a database: cannot be checked; delete it, it is a cache)")
        else:
            rows = rows if database_bytes else [v for v in rows if isinstance(v, str)]
            found = max(found, _occurrences_in_values(rows, forms))
    return where + ([name_of(path)] if found > explained else [])


def _read_database(path: Path, read) -> list | None:
    """``read(connection)`` on the database at ``path`` as it is: no lock taken, no journal
    looked at (a stale one beside it made a read-only open fail), nothing written; None if it
    cannot be read."""
    import sqlite3

    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        return read(db)
    except sqlite3.Error:
        return None
    finally:
        db.close()


def _cache_entries(path: Path) -> list[tuple[str, str]] | None:
    """(key, model) of every entry of the embedding cache at ``path``; None if unreadable."""
    return _read_database(path, lambda db: [(k, m) for k, m in db.execute("SELECT key, model FROM cache")])


def _sqlite_values(path: Path) -> list | None:
    """Every text and blob value of every table of the database at ``path`` (its journal and
    log are read as bytes); None if it cannot be read."""
    def values(db) -> list:
        out: list = []
        for (table,) in list(db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")):
            quoted = '"' + table.replace('"', '""') + '"'
            for row in db.execute(f"SELECT * FROM {quoted}"):
                out += [v for v in row if isinstance(v, (str, bytes))]
        return out

    return _read_database(path, values)


def _occurrences_in_values(values: list, forms: list[bytes]) -> int:
    """How often the needle's forms occur in database values: as text in a text value (JSON
    rows spell ë as \\u00eb), as bytes in a blob."""
    return sum(occurrences(v, form.decode() if isinstance(v, str) else form) for v in values for form in forms)


def _trust_cache_check(path: Path, name_of, needle: str, allow_paths: list[str]) -> list[str]:
    """verify.json names note paths (a subject is part of one) and writers' e-mails: the needle
    in any of its strings fails, except in the path of a note allowed to keep it. (A process
    that outlived an erasure run by another once saved its old state there again.)
    A file that cannot be read or parsed fails too: JSON may spell the needle with escapes
    (``\\u00eb``), so its bytes alone prove nothing. mdmem rewrites a damaged one on its next
    open; it is a cache, and deleting it is safe."""
    if not os.path.lexists(path):
        return []
    rel = name_of(path)
    try:
        item = json.loads(path.read_bytes())
    except OSError:
        return [f"{rel} (cannot be read; delete it, it is a cache)"]
    except (ValueError, RecursionError):
        return [f"{rel} (damaged: cannot be checked; delete it, it is a cache)"]
    strings: list[str] = []
    stack = [item]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            strings += [k for k in item if isinstance(k, str)]
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str):
            strings.append(item)
    found = any(occurs(s, needle) for s in strings if s not in allow_paths)
    return [rel] if found else []


def _scope_checks(repo, live_all, allow_paths, subject, owner, readable) -> dict:
    """Each names only paths in roots the asker may read: a person proving their own subject
    must not learn which notes about them other teams keep."""
    def check(where: list[str]) -> dict:
        return _check([p for p in where if readable(root_of(p))])

    out = {}
    live = [s for s in live_all if s.path not in allow_paths]
    tracked = list(ops.tree_paths(repo.root, "HEAD")) if ops.peel_to_commit(repo.root, "HEAD") else []
    if subject:
        sub = layout.subject_dir(subject) + "/"
        out["no_note_for_subject"] = check([s.path for s in live if s.note.subject == subject]
                                           + [p for p in tracked if "/".join(p.split("/")[2:]).startswith(sub)])
    if owner:
        out["no_private_root_for_owner"] = check([p for p in tracked if p.startswith(f"private/{owner}/")])
        out["no_note_owned"] = check([s.path for s in live if s.note.owner == owner])
    if subject or owner:
        # Vectors live in the index documents: an index document for an erased note would
        # still carry the note's embedding.
        entries = _index_paths(repo)
        live_paths = {s.path for s in live_all}
        orphans = [p for p in entries if p not in live_paths]
        if subject:
            orphans += [p for p in entries if "/".join(p.split("/")[2:]).startswith(layout.subject_dir(subject) + "/")]
        if owner:
            orphans += [p for p in entries if p.startswith(f"private/{owner}/")]
        out["no_orphaned_index_entries"] = check(orphans)
    return out


def _index_paths(repo) -> list[str]:
    """Paths of the live (not deleted) documents of the current notes' index."""
    from whoosh import index as windex

    folder = cache_dir(repo.root) / "fulltext"
    if not windex.exists_in(str(folder)):
        return []
    with windex.open_dir(str(folder)).reader() as reader:
        return [fields["path"] for _, fields in reader.iter_docs()]


def _nearest(repo, needle: str, user: str) -> dict | None:
    """The most similar remaining note the asker may see: a pointer for review, not a verdict."""
    try:
        index = repo.index
        index.sync()
        qv = index.embed_query(needle)
        if qv is None:
            return None
        from ..search.fulltext import NEVER
        with index.mutex:  # one thread reads the index at a time (search/fulltext.open_dir)
            table = index.table()
            hits = table.nearest(qv, table.allowed(repo.access.readable_roots(user), live_at=NEVER - 1), 1)
            if not hits:
                return None
            path = index.searcher().stored_fields(hits[0][0])["path"]
    except Exception:
        return None
    return {"path": path, "cosine": round(hits[0][1], 3)}


def last_erasure_ns(root: Path) -> int | None:
    """When the last erasure here ended (its done stamp's time), None if none has."""
    try:
        return os.stat(erasure_done_path(root)).st_mtime_ns
    except OSError:
        return None


# /proc gives a process's start in whole seconds (image_since_ns is up to a second early): one
# whose image began within this of an erasure's end may be fresh, and is named but not counted.
START_SLOP_NS = 10**9

# Servers re-execute and the daemon exits within about a second of an erasure's end: a proof
# made right after one waits this long for them before it judges.
SETTLE_SECONDS = 5.0


def unvouched_processes(root: Path, settle: float = SETTLE_SECONDS) -> list[tuple[int, str, bool]]:
    """(pid, command, holds) of each running mdmem process of ``root`` whose memory image
    predates the last erasure here (or, with none, every one: named only). ``holds``: it surely
    began before that erasure ended, so freed memory may hold what it removed: the proof cannot
    vouch for it and is not complete. A process whose image began after it holds none of the text
    (a server re-executes itself once one ends) and is left out. Waits up to ``settle`` seconds
    for such processes to go."""
    from .processes import image_since_ns, running

    deadline = time.monotonic() + settle
    while True:
        erased_ns = last_erasure_ns(root)
        out = []
        for pid, what in running(root):
            since = image_since_ns(pid)
            if erased_ns is not None and since is not None and since > erased_ns:
                continue
            # With no erasure here, a process holds nothing that history does not (checked above).
            holds = erased_ns is not None and (since is None or since + START_SLOP_NS < erased_ns)
            out.append((pid, what, holds))
        if not any(h for *_, h in out) or time.monotonic() >= deadline:
            return out
        time.sleep(0.1)


def cannot_reach(repo, processes: list[tuple[int, str, bool]] | None = None) -> list[str]:
    """What the proof could not look into, one line each; ``processes``: unvouched_processes's
    answer (looked up at once, without waiting, when not given)."""
    if processes is None:
        processes = unvouched_processes(repo.root, settle=0.0)
    out = [f"worktree {tree.path}: its folder is gone (`git worktree prune` forgets it); a copy of it elsewhere "
           "holds whatever it held" for tree in ops.linked_worktrees(repo.root)
           if not tree.locked and not tree.path.is_dir()]
    for name, url in ops.remotes(repo.root).items():
        out.append(f"remote {name} ({url}): holds whatever was last pushed; after `forget --push` it must "
                   "also expire its reflogs and gc before old objects are gone there")
    for pid, what, holds in processes:
        out.append(f"running process pid {pid} ({what}): running since before the last erasure here ended (or "
                   "none has): memory it freed may still hold erased text; a server re-executes itself and the "
                   "daemon exits within a second of an erasure, anything else: restart it"
                   + ("" if holds else " (it may have started just after it: not counted against the proof)"))
    out.append("other clones of this repository (each must re-clone or run `mdmem sync`, which refuses erased history)")
    out.append("backups, snapshots and freed disk blocks of this machine")
    backend = repo.config.embedder.backend
    if backend in ("ollama", "openai"):
        # Where this person's text went: the URL comes from their own config (the repo's only if allowed).
        try:
            url = repo.user_config.embedder(repo.config.embedder).url
        except BadInput:
            url = repo.config.embedder.url
        out.append(f"the embedding provider ({backend} at {url or 'its default address'}) saw the text "
                   "when it was embedded")
    out.append("anyone or anything that read the memory before (agents' transcripts, exports)")
    return out
