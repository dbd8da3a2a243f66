"""forget: erase notes from every version of history, scrub their copies, purge the caches,
and leave a receipt that records what was erased but never the content (DESIGN 9).

The rewrite is git-filter-repo's; around it we clear what would keep old objects or text
alive (stash, linked worktrees, refs/original, leftover message files, reflogs, untracked
copies) and prune, all under the repo's exclusive lock so no writer races the rewrite.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..model import layout
from ..model.clock import format_time
from ..errors import BadInput, NotFound
from ..storage.gitstore import Trailers
from ..model.note import parse_note

AUDIT_PATH = "audit/erasures.jsonl"
REMOVED = "[removed]"
MIN_SCRUB_LINE = 6  # shorter lines ("- ok") would scrub common words everywhere
_LEFTOVERS = ("COMMIT_EDITMSG", "ORIG_HEAD", "FETCH_HEAD", "MERGE_MSG", "SQUASH_MSG", "MERGE_HEAD")


@dataclass
class ErasedVersion:
    path: str
    commit: str
    blob: str
    key: str | None
    text: str


@dataclass
class Plan:
    subject: str | None
    owner: str | None
    paths_given: list[str]
    texts_given: int
    paths: list[str] = field(default_factory=list)
    versions: list[ErasedVersion] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    review_branches: list[str] = field(default_factory=list)
    needles: list[str] = field(default_factory=list)
    people: list[str] = field(default_factory=list)
    scrub: bool = True

    @property
    def roots(self) -> list[str]:
        return sorted({"/".join(p.split("/")[:2]) for p in self.paths + self.copies if layout.is_note_path(p)
                       or p.endswith("/MEMORY.md")})

    def to_dict(self) -> dict:
        """The plan as shown to a person: locations and counts, never the erased text."""
        return {"targets": self.targets(), "notes": self.paths, "versions": len(self.versions),
                "commits_to_rewrite": len(self.commits), "copies_to_scrub": self.copies,
                "review_branches": self.review_branches, "roots": self.roots}

    def targets(self) -> dict:
        out = {}
        if self.subject:
            out["subject"] = self.subject
        if self.owner:
            out["owner"] = self.owner
        if self.paths_given:
            out["paths"] = self.paths_given
        if self.texts_given:
            out["texts"] = f"{self.texts_given} string(s), not recorded"
        return out


_PHONE = re.compile(r"\+?\d[\d ().-]{5,}\d")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")


def _identifiers(text: str) -> list[str]:
    """Phone numbers and e-mail addresses in an erased text: a copy elsewhere often quotes
    just these ("the user gave their number 555-0142"), not the whole line."""
    out = [m.group(0) for m in _EMAIL.finditer(text)]
    out += [m.group(0) for m in _PHONE.finditer(text) if sum(ch.isdigit() for ch in m.group(0)) >= 7]
    return out


def _scrub_lines(text: str) -> list[str]:
    """Every version's body, line by line: a copy quoted elsewhere is usually one line of it."""
    out = [text.strip(), *_identifiers(text)]
    for line in text.splitlines():
        line = line.strip().lstrip("-*> ").strip()
        if len(line) >= MIN_SCRUB_LINE:
            out.append(line)
            if len(line) > 160:
                out.append(line[:160])  # views quote first lines cut at 160 characters
    return out


def build_plan(repo, *, subject=None, owner=None, paths=None, texts=None, scrub: bool = True) -> Plan:
    """What forget will do. ``scrub=False`` removes the notes but leaves copies quoted
    elsewhere (measured by forget_phone.json; the default scrubs)."""
    if not (subject or owner or paths or texts):
        raise BadInput("forget: name what to erase: --subject, --owner, --path or --text")
    if subject:
        layout.check_subject(subject)
    if owner:
        layout.check_name(owner, "owner")
    for p in paths or []:
        if not layout.is_note_path(p):
            raise BadInput(f"--path: {p!r} is not a note path (team/<team>/... or private/<owner>/...)")
    texts = [t for t in (texts or []) if t]
    if any(len(t.strip()) < 3 for t in texts):
        raise BadInput("--text: each text must have at least 3 characters (shorter would scrub far too much)")
    plan = Plan(subject, owner, list(paths or []), len(texts))
    store = repo.store
    ever = {p for p in store.git("log", "--all", "--format=", "--name-only").splitlines() if layout.is_note_path(p)}
    targets = set(paths or []) & ever
    missing = set(paths or []) - ever
    if missing:
        raise NotFound(f"--path: no note ever at {', '.join(sorted(missing))}")
    if subject:
        sub = layout.subject_dir(subject)
        targets |= {p for p in ever if "/".join(p.split("/")[2:]).startswith(sub + "/")
                    and layout.parse_path(p).subject == subject}
    if owner:
        targets |= {p for p in ever if p.startswith(f"private/{owner}/")}
        # Team notes she wrote go too; notes mdmem's own jobs derived (digests) stay and are
        # scrubbed of her text instead: their content is not hers.
        for p in ever - targets:
            if p.startswith("team/") and _last_author(store, p) == (owner, False):
                targets.add(p)
    plan.paths = sorted(targets)
    commits: set[str] = set()
    for path in plan.paths:
        for line in store.git("log", "--all", "--format=%H", "--", path).split():
            commits.add(line)
            oid = store.blob_id(path, line)
            if oid is None:
                continue
            try:
                note = parse_note(path, store.read_blob(oid))
                body, key = note.text, note.key
            except Exception:  # a broken version still holds text: erase all of it
                body, key = store.read_blob(oid).decode("utf-8", "replace"), None
            plan.versions.append(ErasedVersion(path, line, oid, key, body))
    plan.commits = sorted(commits)
    plan.scrub = scrub
    needles = {n for v in plan.versions for n in _scrub_lines(v.text)} | set(texts)
    plan.needles = sorted(needles, key=lambda n: (-len(n), n))
    if owner:
        plan.people.append(owner)
    if subject and subject.split(":")[0] in ("user", "person", "people"):
        plan.people.append(subject.split(":", 1)[1])
    plan.copies = _copies(repo, set(plan.paths), plan.needles)
    plan.review_branches = [b for b in store.branches("review/") if _branch_touches(store, b, plan)]
    return plan


def _last_author(store, path: str) -> tuple[str, bool] | None:
    """(owner, derived by an mdmem job) of the note's current version."""
    head = store.head()
    oid = store.blob_id(path, head) if head else None
    if oid is None:
        return None
    try:
        note = parse_note(path, store.read_blob(oid))
    except Exception:
        return None
    return note.owner, note.source.startswith("system:")


def _copies(repo, targets: set[str], needles: list[str]) -> list[str]:
    """Files in the work tree, other than the targets, that quote an erased text."""
    if not needles:
        return []
    out = []
    for path in repo.store.git("ls-files").splitlines():
        if path in targets:
            continue
        try:
            data = (repo.root / path).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue
        if any(n in data for n in needles):
            out.append(path)
    return out


def _branch_touches(store, branch: str, plan: Plan) -> bool:
    diff = store.git("diff", "--name-only", f"{branch}~1", branch, check=False).split()
    if set(diff) & set(plan.paths):
        return True
    data = store.git("show", branch, check=False)
    return any(n in data for n in plan.needles)


# --- execution ------------------------------------------------------------------------

_VIEWS_ONLY_CALLBACK = """
if not filename.endswith(b"MEMORY.md"):
    return (filename, mode, blob_id)
needles = value.data.get("needles")
if needles is None:
    import json
    with open(NEEDLES_FILE, encoding="utf-8") as f:
        needles = value.data["needles"] = [n.encode() for n in json.load(f)]
contents = value.get_contents_by_identifier(blob_id)
new = contents
for needle in needles:
    new = new.replace(needle, b"[removed]")
if new == contents:
    return (filename, mode, blob_id)
return (filename, mode, value.insert_file_with_contents(new))
"""


def _filter_repo(root: Path, args: list[str]) -> None:
    cmd = [sys.executable, "-c", "import git_filter_repo, sys; sys.argv[0] = 'git-filter-repo'; git_filter_repo.main()",
           "--force", "--quiet", *args]
    proc = subprocess.run(cmd, cwd=str(root), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git-filter-repo failed: {proc.stderr.strip() or proc.stdout.strip()}")


def _literal_file(path: Path, needles: list[str], people: list[str]) -> Path:
    lines = []
    for n in needles:
        for line in n.splitlines() or [n]:
            if line.strip():
                lines.append(f"literal:{line}==>{REMOVED}")
    for person in people:
        lines.append(f"regex:(?i)\\b{re.escape(person)}\\b==>{REMOVED}")
    path.write_text("\n".join(dict.fromkeys(lines)) + "\n", encoding="utf-8")
    return path


def _clear_git_leftovers(store) -> None:
    git_dir = Path(store.repo.path)
    store.git("stash", "clear", check=False)
    for line in store.git("worktree", "list", "--porcelain", check=False).splitlines():
        if line.startswith("worktree "):
            wt = line.split(" ", 1)[1]
            if Path(wt).resolve() != store.root.resolve():
                store.git("worktree", "remove", "--force", wt, check=False)
                shutil.rmtree(wt, ignore_errors=True)
    store.git("worktree", "prune", check=False)
    for name in _LEFTOVERS:
        (git_dir / name).unlink(missing_ok=True)


def execute(repo, plan: Plan, *, as_user: str, when: _dt.datetime, push: bool) -> dict:
    store = repo.store
    old_head = store.head()
    counts = {"notes": len(plan.paths), "versions": len(plan.versions), "copies_scrubbed": len(plan.copies),
              "review_branches": len(plan.review_branches)}
    counts.update(_count_index_entries(repo, plan))
    repo.close()
    _clear_git_leftovers(store)
    # filter-repo drops the origin remote (to stop an accidental push); keep the config.
    saved_remotes = {name: store.git("remote", "get-url", name).strip() for name in remotes(store)}
    with tempfile.TemporaryDirectory(prefix="mdmem-forget-") as tmp:
        args = []
        if plan.paths:
            paths_file = Path(tmp) / "paths.txt"
            paths_file.write_text("\n".join(plan.paths) + "\n", encoding="utf-8")
            args += ["--invert-paths", "--paths-from-file", str(paths_file)]
        if plan.needles and plan.scrub:
            args += ["--replace-text", str(_literal_file(Path(tmp) / "text.txt", plan.needles, []))]
        elif plan.needles:
            # Without scrubbing copies, the MEMORY views (derived, history included) are still
            # scrubbed: only other notes keep their quotes.
            needles_file = Path(tmp) / "needles.json"
            needles_file.write_text(json.dumps(plan.needles), encoding="utf-8")
            args += ["--file-info-callback", _VIEWS_ONLY_CALLBACK.replace("NEEDLES_FILE", repr(str(needles_file)))]
        if plan.needles or plan.people:
            args += ["--replace-message", str(_literal_file(Path(tmp) / "messages.txt", plan.needles, plan.people))]
        for person in plan.people:
            pattern = re.escape(person).encode()
            callback = (f"import re\nreturn re.sub(rb'(?i)\\b{pattern.decode()}\\b', b'{REMOVED}', "
                        "{0})")
            args += ["--name-callback", callback.format("name"), "--email-callback", callback.format("email")]
        _filter_repo(store.root, args)
    for name, url in saved_remotes.items():
        if name not in remotes(store):
            store.git("remote", "add", name, url)
    git_dir = Path(store.repo.path)
    rewritten = _rewritten_commits(git_dir / "filter-repo" / "commit-map")
    shutil.rmtree(git_dir / "filter-repo", ignore_errors=True)
    for ref in store.git("for-each-ref", "--format=%(refname)", "refs/original/").split():
        store.git("update-ref", "-d", ref, check=False)
    for branch in store.branches("review/"):
        # A held write whose note was erased leaves its branch on a commit that is no hold.
        if "Memory-Op: hold" not in store.git("log", "-1", "--format=%B", branch, check=False):
            store.delete_branch(branch)
    _clear_git_leftovers(store)
    removed_files = _scrub_untracked(repo, plan)
    store.git("reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all", check=False)
    store.git("gc", "--prune=now", "--quiet", check=False)
    store._index = None
    counts["cache_entries"] = _purge_cache(repo, plan)
    repo._reset_caches()
    mentions = mention_scan(repo, plan)
    receipt = {
        "id": f"erasure-{when:%Y%m%dT%H%M%SZ}", "asked_by": as_user, "at": format_time(when),
        "targets": plan.targets(), "counts": {**counts, "commits_rewritten": len(rewritten),
                                              "untracked_files_removed": removed_files},
        "old_head": old_head, "rewritten_commits": rewritten,
        "mentions_for_review": [m["path"] for m in mentions], "remotes": {},
    }
    new_head = _commit_receipt(repo, receipt, as_user, when)
    receipt["new_head"] = new_head
    if push:
        receipt["remotes"] = push_rewritten(store)
    else:
        receipt["remotes"] = {name: "not pushed: still holds the old history" for name in remotes(store)}
    repo.reindex()
    receipt["mentions"] = mentions
    return receipt


def _rewritten_commits(commit_map: Path) -> list[str]:
    out = []
    try:
        lines = commit_map.read_text().splitlines()[1:]
    except FileNotFoundError:
        return out
    for line in lines:
        old, new = line.split()
        if old != new:
            out.append(old)
    return sorted(out)


def _scrub_untracked(repo, plan: Plan) -> int:
    """Untracked and ignored copies inside the repo (not .git, not the cache) are removed."""
    out = repo.store.git("ls-files", "--others", "-z", check=False)
    removed = 0
    names = [p for p in out.split("\0") if p and not p.startswith(".mdmem/")]
    ignored = repo.store.git("ls-files", "--others", "--ignored", "--exclude-standard", "-z", check=False)
    names += [p for p in ignored.split("\0") if p and not p.startswith(".mdmem/")]
    for name in sorted(set(names)):
        full = repo.root / name
        try:
            data = full.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue
        if name in plan.paths or any(n in data for n in plan.needles):
            full.unlink()
            removed += 1
    return removed


def _embedding_texts(plan: Plan) -> list[str]:
    from ..search.fulltext import embedding_text

    texts = set()
    for v in plan.versions:
        texts.add(embedding_text(v.key, v.text))
        texts.add(v.text)
    return sorted(texts)


def _count_index_entries(repo, plan: Plan) -> dict:
    base = repo.root / ".mdmem"
    out = {"index_entries": 0, "vectors": 0}
    try:
        from whoosh import index as windex

        from ..search.doctable import VECTOR_FIELD
        if windex.exists_in(str(base / "fulltext")):
            with windex.open_dir(str(base / "fulltext")).searcher() as s:
                out["index_entries"] = sum(1 for p in plan.paths if s.document_number(doc_id=p) is not None)
                # Each index document carries its note's vector when an embedder is on.
                out["vectors"] = out["index_entries"] if VECTOR_FIELD in s.schema else 0
    except Exception:
        pass
    return out


def _purge_cache(repo, plan: Plan) -> int:
    """Every cache under .mdmem/ except locks: the embedding cache loses the erased texts'
    entries (then VACUUM, with secure_delete on); the index, vectors and view metadata are
    deleted whole and rebuilt from the rewritten notes."""
    from ..search.embedding_cache import EmbeddingCache, cache_key

    base = repo.root / ".mdmem"
    cache_path = base / "embeddings.sqlite"
    purged = 0
    if cache_path.exists():
        cache = EmbeddingCache(cache_path)
        models = [m for (m,) in cache.db.execute("SELECT DISTINCT model FROM cache")]
        purged = cache.purge([cache_key(m, t) for m in models for t in _embedding_texts(plan)])
        cache.close()
    # With the half-built (.new), swapped-out (.old) and moved-aside (broken/) copies.
    for name in ("fulltext", "versions", "fulltext.new", "fulltext.old", "versions.new", "versions.old", "broken"):
        shutil.rmtree(base / name, ignore_errors=True)
    for name in ("vectors.sqlite", "viewmeta.sqlite", "state.json", "versions.json"):
        (base / name).unlink(missing_ok=True)
    return purged


def _commit_receipt(repo, receipt: dict, as_user: str, when: _dt.datetime) -> str:
    """The receipt in the audit log and the regenerated views, in one commit."""
    from ..views.render import VIEW_NAME, render_root, view_path

    store = repo.store
    head = store.head()
    audit = store.read_at(AUDIT_PATH, head) or b""
    line = json.dumps({k: v for k, v in receipt.items() if k != "mentions"}, sort_keys=True)
    changes: dict[str, bytes | None] = {AUDIT_PATH: audit + line.encode() + b"\n"}
    roots = {"/".join(p.split("/")[:2]) for p in repo._tracked_note_paths()} | {f"team/{t}" for t in repo.config.teams}
    for path in store.git("ls-files", "--", "*MEMORY.md").split():
        if path != VIEW_NAME:
            root = path.rsplit("/", 1)[0]
            if root not in roots:
                changes[path] = None  # a scope with no notes left keeps no view
    for root in sorted(roots):
        changes[view_path(root)] = repo._scope_view(root, {}, when).encode()
    changes[VIEW_NAME] = render_root(repo.config).encode()
    changes = {p: d for p, d in changes.items() if store.read_at(p, head) != d}
    message = (f"forget: erasure receipt {receipt['id']}\n\n"
               + Trailers("forget", as_user, "system:forget").render())
    return store.commit(changes, message, actor=as_user, when=when)


def remotes(store) -> list[str]:
    return store.git("remote", check=False).split()


def push_rewritten(store) -> dict:
    out = {}
    for name in remotes(store):
        proc = subprocess.run(["git", "-C", str(store.root), "push", "--force", "--prune", name,
                               "refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"], capture_output=True, text=True)
        out[name] = ("pushed (force); the remote must still gc to drop the old objects"
                     if proc.returncode == 0 else f"push failed: {proc.stderr.strip()[:200]}")
    return out


def mention_scan(repo, plan: Plan) -> list[dict]:
    """Live notes that still mention the person, for a human to review (not deleted)."""
    names = set(plan.people)
    for person in list(names):
        names |= set(repo.config.aliases.get(person, ()))
    if not names:
        return []
    # Not \b: a handle like "@asmith" starts with a non-word character.
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(n) for n in sorted(names)) + r")(?!\w)", re.IGNORECASE)
    out = []
    from ..storage.worktree import scan_notes
    for stored in scan_notes(repo.root, repo.contracts)[0]:
        for line in stored.note.text.splitlines():
            if pattern.search(line):
                out.append({"path": stored.path, "line": line.strip()[:200]})
                break
    return out


def erased_commit_ids(text: str) -> set[str]:
    ids = set()
    for line in text.splitlines():
        try:
            ids |= set(json.loads(line).get("rewritten_commits", []))
        except ValueError:
            continue
    return ids
