"""The git operations `mdmem sync` is made of (the one git seam: nothing above storage/ runs
git). Fetching goes to a scratch ref and merging happens in memory, so a refused sync leaves
every ref, the index and the work tree as they were."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2

from . import history_ops
from .gitindex import stage
from .queries import note_blobs_only_in_at

IN_PROGRESS = (("rebase-merge", "a rebase"), ("rebase-apply", "a rebase or am"), ("MERGE_HEAD", "a merge"),
               ("CHERRY_PICK_HEAD", "a cherry-pick"), ("REVERT_HEAD", "a revert"))


def _run(store, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(store.root), *args], capture_output=True, text=True)


def in_progress(store) -> list[str]:
    """git operations a person left unfinished in this clone (a rebase, a merge...)."""
    gitdir = Path(store.repo.path)
    return [what for name, what in IN_PROGRESS if (gitdir / name).exists()]


def fetch_to(store, remote: str, branch: str, scratch: str) -> tuple[bool, str]:
    """Fetch ``branch`` of ``remote`` into ``scratch`` only (``--refmap=``: git's usual update of
    refs/remotes/... would be a change before we know the sync succeeds). (found, error)."""
    proc = _run(store, "fetch", "--quiet", "--no-tags", "--refmap=", remote, f"+refs/heads/{branch}:{scratch}")
    if proc.returncode != 0 and "couldn't find remote ref" not in proc.stderr:
        return False, proc.stderr.strip()
    return True, ""


def remote_heads(store, remote: str) -> dict[str, str] | None:
    """Every branch of ``remote`` (name under refs/heads/ -> commit) as `git ls-remote` lists it,
    without fetching anything; None when the remote cannot be asked (the fetch then says why)."""
    proc = _run(store, "ls-remote", "--heads", remote)
    if proc.returncode != 0:
        return None
    out = {}
    for line in proc.stdout.splitlines():
        oid, _, ref = line.partition("\t")
        if ref.startswith("refs/heads/"):
            out[ref[len("refs/heads/"):]] = oid
    return out


def text_at(store, rev: str | None, path: str) -> str:
    """The text of ``path`` at ``rev`` ("" when either does not exist), as ``store.show_file``
    answers it, read in-process: a sync reads the receipts and .gitattributes of both sides."""
    if not rev:
        return ""
    if rev == "HEAD":
        rev = store.head()
        if rev is None:
            return ""
    try:
        data = store.file_in(rev, path)
    except (KeyError, ValueError, pygit2.GitError):
        return ""
    return "" if data is None else data.decode("utf-8", errors="replace")


def drop_scratch_ref(store, ref: str) -> None:
    """Delete a scratch ref of mdmem's own (refs/mdmem-sync/...: no reflog a person reads), in-process."""
    try:
        store.repo.references.delete(ref)
    except (KeyError, ValueError, pygit2.GitError):
        pass


def related(store, head: str, their: str) -> str | None:
    """How two commits relate without a git process: "same", "behind" (``head`` is an ancestor
    of ``their``), "ahead" (the other way round), or None (they diverged: merge_base says where)."""
    if head == their:
        return "same"
    repo = store.repo
    a, b = pygit2.Oid(hex=head), pygit2.Oid(hex=their)
    if repo.descendant_of(b, a):
        return "behind"
    if repo.descendant_of(a, b):
        return "ahead"
    return None


def rev_in_process(store, ref: str) -> str | None:
    """The commit ``ref`` points at (None when there is no such ref), read in-process."""
    try:
        return str(store.repo.references[ref].peel(pygit2.Commit).id)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def local_refs(store, prefix: str) -> dict[str, str]:
    """name (after ``prefix``) -> target of every local ref under ``prefix``, read in-process
    (what refs_under answers with a git process)."""
    repo = store.repo
    out = {}
    for name in repo.references:
        if name.startswith(prefix):
            try:
                out[name[len(prefix):]] = str(repo.references[name].resolve().target)
            except (KeyError, pygit2.GitError):
                continue  # deleted meanwhile
    return out


def fetch_prefix(store, remote: str, prefix: str, scratch: str) -> tuple[bool, str]:
    """Fetch every branch of ``remote`` under ``refs/heads/<prefix>`` into ``scratch<name>``
    (which the caller emptied), touching no other ref. (fetched, error)."""
    proc = _run(store, "fetch", "--quiet", "--no-tags", "--refmap=", remote,
                f"+refs/heads/{prefix}*:{scratch}*")
    return proc.returncode == 0, proc.stderr.strip()


def refs_under(store, prefix: str) -> dict[str, str]:
    """name (after ``prefix``) -> commit of every ref under ``prefix``."""
    out = _run(store, "for-each-ref", "--format=%(refname)%09%(objectname)", prefix).stdout
    return {ref[len(prefix):]: oid for ref, oid in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)}


def rev(store, ref: str) -> str | None:
    return _run(store, "rev-parse", "-q", "--verify", ref + "^{commit}").stdout.strip() or None


def set_ref(store, ref: str, target: str | None) -> None:
    """Point ``ref`` at ``target`` (None deletes it)."""
    if target is None:
        _run(store, "update-ref", "-d", ref)
    else:
        _run(store, "update-ref", ref, target)


def push(store, remote: str, refspec: str, *, force: bool = False,
         lease: tuple[str, str] | None = None, also: tuple[str, ...] = ()) -> tuple[bool, str]:
    """``lease`` (ref, commit): a forced push only if the remote's ref is still there. ``also``:
    more refspecs pushed in the same push (one push is what a guarded remote judges as one)."""
    flags = ([f"--force-with-lease={lease[0]}:{lease[1]}"] if lease else ["--force"]) if force else []
    proc = _run(store, "push", "--quiet", *flags, remote, refspec, *also)
    return proc.returncode == 0, proc.stderr.strip()


def rewritten_side_refspecs(store) -> tuple[str, ...]:
    """Forced refspecs for every tag and git notes ref of this clone: what an erasure rewrote
    besides the branch, which a remote would otherwise keep on the old history (holds are
    replaced one by one, with a lease, by the hold sync that follows)."""
    refs = _run(store, "for-each-ref", "--format=%(refname)", "refs/tags/", "refs/notes/").stdout.split()
    return tuple(f"+{ref}:{ref}" for ref in refs)


def merge_base(store, a: str, b: str) -> str:
    return _run(store, "merge-base", a, b).stdout.strip()


def object_ids(store, rev: str, *, exclude: str | None = None) -> set[str]:
    """Every object id reachable from ``rev`` (commits, trees, blobs), less what ``exclude`` reaches
    (a superset when the two share no commit: see queries.note_blobs_only_in_at; callers only intersect it
    with erased ids, which the new history never holds)."""
    args = ["rev-list", "--objects", rev] + ([f"^{exclude}"] if exclude else [])
    return {line.split(" ", 1)[0] for line in _run(store, *args).stdout.splitlines() if line}


def drop_unreachable(store) -> None:
    """Delete objects no ref reaches (what a refused fetch brought in), reflogs included."""
    _run(store, "reflog", "expire", "--expire-unreachable=now", "--all")
    history_ops.gc_prune(store.root)


PATHS_NAMED_AT_MOST = 2000  # more paths than this: the whole work tree is looked at (the command line's length)


def dirty_paths(store, paths=None) -> set[str]:
    """Work-tree paths with uncommitted changes, untracked files included; only among ``paths``
    when given (a sync checks the files it would write: a whole work tree's status at 100,000
    notes is most of a small sync's time)."""
    named = sorted(paths) if paths is not None and len(paths) <= PATHS_NAMED_AT_MOST else None
    if named == []:
        return set()
    limit = ["--", *named] if named is not None else []
    proc = subprocess.run(["git", "--literal-pathspecs", "-C", str(store.root), "status", "--porcelain", "-z",
                           "--untracked-files=all", *limit], capture_output=True, text=True)
    out = proc.stdout
    return {item[3:] for item in out.split("\0") if len(item) > 3}


def last_touch(store, base: str, tip: str, path: str) -> tuple[int, str]:
    """The commit time and message of the last commit in ``base..tip`` touching ``path``."""
    out = _run(store, "log", "-1", "--format=%ct%x1f%B", f"{base}..{tip}", "--", path).stdout
    if not out.strip():
        return 0, ""
    ts, message = out.split("\x1f", 1)
    return int(ts), message


def conflicted_paths(store, ours: str, theirs: str) -> set[str]:
    """Paths git's own three-way merge of the two commits leaves in conflict."""
    index = store.repo.merge_commits(store.repo[ours], store.repo[theirs])
    if index.conflicts is None:
        return set()
    return {(m or t or a).path for a, m, t in index.conflicts}


def merged_tree(store, ours: str, theirs: str, resolved: dict[str, str | None],
                changed: set[str] | None = None) -> tuple[str | None, list[str]]:
    """The tree of git's merge of the two commits with ``resolved`` (path -> blob id, None:
    absent) put in place; (None, paths) when conflicts remain unresolved. ``changed``: every
    path either side changed since the merge base (a superset of where the merge can differ
    from ``ours``, renames included: a rename changes both its paths on its side)."""
    index = store.repo.merge_commits(store.repo[ours], store.repo[theirs])
    conflicted = {(m or t or a).path for a, m, t in index.conflicts} if index.conflicts is not None else set()
    for path, blob in resolved.items():
        if path in conflicted:
            del index.conflicts[path]
        if blob is None:
            if path in index:
                index.remove(path)
        else:
            stage(index, pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.GIT_FILEMODE_BLOB))
    left = sorted(conflicted - set(resolved))
    if left:
        return None, left
    if changed is None:
        return str(index.write_tree(store.repo)), []
    # Written on ``ours``'s tree with only ``changed`` taken from the merge: libgit2 writes every
    # tree of an index that did not come from a tree (~0.4 s at 5,000 notes under load), and
    # reads only the touched ones of one that did.
    repo = store.repo
    out = pygit2.Index()
    out.read_tree(repo[ours].peel(pygit2.Commit).tree)
    for path in sorted(set(changed) | set(resolved)):
        entry = index[path] if path in index else None
        if entry is None:
            if path in out:
                out.remove(path)
        else:
            stage(out, pygit2.IndexEntry(path, entry.id, entry.mode))
    return str(out.write_tree(repo)), []


def messages_with(store, marker: str) -> list[tuple[str, str]]:
    """(commit, message) of the commits whose message contains ``marker``, newest first."""
    out = _run(store, "log", f"--grep={marker}", "--format=%H%x1f%B%x1e").stdout
    records = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if record:
            sha, message = record.split("\x1f", 1)
            records.append((sha, message))
    return records


def commits_not_in(store, head: str, known: str) -> list[tuple[str, list[str]]]:
    """(commit, parents) of the commits ``head`` has and ``known`` does not, oldest first (with
    ``known`` the remote's tip when this clone last synced: this clone's own work)."""
    out = _run(store, "rev-list", "--reverse", "--topo-order", "--parents", head, f"^{known}").stdout
    return [(line.split()[0], line.split()[1:]) for line in out.splitlines() if line.strip()]


def replay(store, onto: str, commit: str, changes: dict[str, bytes | None], *, sign: bool = False,
           message: str | None = None) -> str:
    """A commit on ``onto`` with ``changes`` applied and ``commit``'s author, committer and
    message (its trailers say what it was): the same write on another history. No ref moves.
    ``sign``: signed with the store's key (the person replaying is its author: under
    require_signed an unsigned copy of their own signed write would be untrusted)."""
    repo = store.repo
    base = repo[onto].peel(pygit2.Commit)
    index = pygit2.Index()
    index.read_tree(base.tree)
    for path, data in changes.items():
        if data is None:
            if path in index:
                index.remove(path)
        else:
            stage(index, pygit2.IndexEntry(path, repo.create_blob(bytes(data)),
                                           getattr(data, "mode", pygit2.GIT_FILEMODE_BLOB)))
    source = repo[commit].peel(pygit2.Commit)
    tree = index.write_tree(repo)
    text = source.message if message is None else message
    if sign and store.signing_key:
        return str(store.signed_commit(source.author, source.committer, text, tree, [base.id]))
    return str(repo.create_commit(None, source.author, source.committer, text, tree, [base.id]))


LEFT_OUT = "mdmem-left-out"  # in the git dir: a replay's files it could not re-apply, scrubbed


def save_left_out(store, commit: str, files: dict[str, bytes | None]) -> list[str]:
    """Save what a replay could not re-apply (already scrubbed) where its person finds it:
    ``.git/mdmem-left-out/<commit>/<path>`` (0700; a deletion is saved as ``<path>.deleted``).
    Returns the paths as the person types them (from the work tree)."""
    import os

    from .gitdir import common_git_dir

    folder = common_git_dir(store.root) / LEFT_OUT / commit[:12]
    out = []
    for path, data in files.items():
        target = folder / (path + (".deleted" if data is None else ""))
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.write_bytes(b"" if data is None else bytes(data))
        os.chmod(target, 0o600)
        out.append(os.path.relpath(target, store.root))
    return out


def refs_containing(store, commit: str) -> list[str]:
    """Every ref whose history holds ``commit``."""
    return _run(store, "for-each-ref", "--contains", commit, "--format=%(refname)").stdout.split()


def present(store, ids: set[str]) -> set[str]:
    """Which of ``ids`` (blob or commit ids) this clone's object store holds."""
    if not ids:
        return set()
    proc = subprocess.run(["git", "-C", str(store.root), "cat-file", "--batch-check=%(objectname)"],
                          input="\n".join(sorted(ids)) + "\n", capture_output=True, text=True)
    return {line.strip() for line in proc.stdout.splitlines() if line.strip() in ids}



def reflog(store, ref: str) -> list[str]:
    """The values ``ref`` had, newest first, as its reflog tells: each entry's new value and the
    one it replaced (a clone's first value is only ever an entry's old one: `git clone` writes
    no reflog for remote-tracking refs, the first fetch after it does)."""
    from .gitdir import common_git_dir

    path = common_git_dir(store.root) / "logs" / ref  # refs/remotes/* are the shared git dir's
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: list[str] = []
    for line in reversed(lines):
        parts = line.split(" ", 2)
        if len(parts) >= 2:
            out += [oid for oid in (parts[1], parts[0]) if set(oid) != {"0"}]
    return list(dict.fromkeys(out))


def is_ancestor(store, ancestor: str, tip: str) -> bool:
    return _run(store, "merge-base", "--is-ancestor", ancestor, tip).returncode == 0


def note_blobs_only_in(store, rev: str, exclude: str) -> set[str]:
    """The note versions (blob ids at note paths) ``rev``'s history holds and ``exclude``'s does not."""
    return note_blobs_only_in_at(store.root, rev, exclude)
