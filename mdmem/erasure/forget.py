"""forget: erase notes from every version of history, scrub their copies, purge the caches,
and leave a receipt that records what was erased but never the content (DESIGN 9).

The job runs in phases recorded in a journal inside ``.git`` (see :mod:`.journal`), all
under the repo's exclusive lock:

    planned    the plan and what must be restored (stashes, detached worktrees) are recorded
    held       stash entries and detached worktree heads are parked under refs/mdmem-erasure/
               so the rewrite carries them over; remote-tracking refs and erased held writes
               are dropped
    rewritten  git-filter-repo has rewritten every ref (idempotent: rerun if killed)
    cleaned    refs renamed, work tree and local files scrubbed, reflogs expired, stash and
               worktrees restored, unreachable objects pruned
    receipted  caches purged to what history holds, the receipt committed
    (done)     pushed if asked, index rebuilt, journal removed

A crash anywhere leaves the journal; the next mdmem command (or ``forget --resume``) runs
the remaining phases. Nothing is written outside the repository (filter-repo's state and
git's packs live in .git).
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path

from .. import cache as cachefiles
from ..errors import BadInput, Conflict, GitFailed, NotFound, Refused
from ..model.clock import format_time, parse_time
from ..model.layout import is_note_path
from ..results import ErasurePlan, ErasureReceipt
from ..storage import history_ops as ops
from . import erased
from . import receipt as rc
from .journal import Journal, pending
from .needles import REMOVED, replace_all
from .plan import HOLD_PREFIX, LEFTOVERS, Plan, build_plan
from .rewrite import run as run_rewrite
from .scan import HistoryScan, history_texts
from ..storage.gitdir import DAEMON_LOG, cache_dir, cache_folders, common_git_dir, git_dir

AUDIT_PATH = rc.AUDIT_PATH
erased_commit_ids = rc.erased_commit_ids
erased_blob_ids = rc.erased_blob_ids


def forget(repo, *, as_user: str, when: _dt.datetime, subject=None, owner=None, paths=None, texts=None,
           dry_run: bool = False, push: bool = False, scrub: bool = True,
           force: bool = False) -> ErasurePlan | ErasureReceipt:
    """Plan (and unless ``dry_run``, do) an erasure. Call under the repo lock."""
    require_main_worktree(repo.root)
    journal = Journal(repo.root)
    if journal.exists():
        finish(repo)
    journal.remove()  # a journal folder without a journal: killed before anything changed
    borrowed = ops.alternates(repo.root)
    if borrowed:
        # The erased objects would stay readable through the other store, and prove-gone fail
        # without saying why: the clone must own its objects first.
        raise Conflict(f"forget: this clone borrows objects from {borrowed[0]} (git clone --shared or --reference), "
                       "where erased versions would stay readable; make it self-contained first: "
                       "git repack -a -d && rm .git/objects/info/alternates (nothing changed)")
    plan = build_plan(repo, as_user=as_user, subject=subject, owner=owner, paths=paths, texts=texts, scrub=scrub)
    if dry_run:
        return ErasurePlan.from_dict(plan.to_dict())
    if not plan.changes_anything():
        raise NotFound("forget: nothing matches those targets")
    repo.store.branch_ref()  # a detached HEAD is refused before the journal exists
    if repo.config.trust.require_signed and not repo.store.signing_key:
        # The rewrite drops every signature; only the eraser's signed receipt can attest the
        # rewritten commits (policy/verify.py). Unsigned, every note written since the erased one
        # would turn untrusted and leave the views.
        raise BadInput("forget: this repo requires signed commits ([trust] require_signed) and your config has no "
                       "[signing] key: the erasure's receipt must be signed to vouch for the commits it rewrites; "
                       "set [signing] key in your mdmem config (~/.config/mdmem/config.toml); nothing changed")
    if plan.needs_force() and not force:
        raise Refused(f"forget: this would scrub {len(plan.copies)} file(s) and touch {len(plan.local_files)} "
                      "local file(s); check the plan (--dry-run) and pass --force if that is meant")
    leases = _push_leases(repo.root) if push else {}
    counts = {"notes": len(plan.target_notes()), "versions": plan.versions, "copies_scrubbed": len(plan.copies),
              "review_branches": sum(r["ref"].startswith("refs/heads/review/") for r in plan.refs_deleted),
              "commit_messages": plan.messages, "identities_pseudonymised": len(plan.people),
              "stashes": len(plan.stashes),
              "worktree_files_scrubbed": sum(len(w.get("scrub", ())) for w in plan.worktrees),
              "local_files": len(plan.local_files), "refs_renamed": len(plan.refs_renamed),
              **_count_index_entries(repo, plan)}
    state = {"phase": "planned", "at": format_time(when), "receipt_id": rc.receipt_id(when), "push": push,
             "leases": leases, "plan": plan.to_state(),
             "counts": counts, "old_head": repo.store.head(), "old_commits": sorted(ops.reachable_commits(repo.root)),
             "old_note_blobs": sorted(ops.blobs_at(repo.root, is_note_path)),
             "refs": []}
    journal.save(state)
    return ErasureReceipt.from_dict(_run(repo, journal, state))


def _push_leases(root: Path) -> dict[str, dict[str, str]]:
    """Before anything is rewritten: every remote's branches, each of which this clone must
    already hold, so the force-push after the rewrite replaces only history that was rewritten
    here. A teammate's newer commit (not synced yet) stops the erasure before it starts."""
    leases = {}
    for name in ops.remotes(root):
        heads = ops.remote_heads(root, name)
        if heads is None:
            raise GitFailed(f"forget --push: remote {name} cannot be reached; nothing changed")
        unseen = [ref for ref, oid in heads.items()
                  if not ops.contains(root, oid, "HEAD") and not ops.contains(root, oid, ref)]
        if unseen:
            raise Conflict(f"forget --push: {name} has commits this clone has not synced ({', '.join(unseen[:3])}); "
                           "run `mdmem sync` first, then forget again (nothing changed)")
        leases[name] = heads
    return leases


def require_main_worktree(root: Path, *, finishing: bool = False) -> None:
    """The rewrite, the checkout of the rewritten notes and the journal belong to the main
    worktree: from a linked one, forget crashed half way, and finishing an interrupted one there
    committed the receipt on the linked worktree's branch and left the main one holding the
    erased notes. Checked before any lock is taken (MemoryRepo.forget): a refusal
    that first waited for every writer blocked its own worktree for as long."""
    if finishing:
        what = "an interrupted erasure must be finished (open it there, or run `mdmem forget --resume` there)"
        why = "until then this worktree is not used"
    else:
        what, why = "run the erasure", "it rewrites the history every worktree shares (nothing changed)"
    if git_dir(root) != common_git_dir(root):
        main = common_git_dir(root).parent
        raise Conflict(f"{root} is a linked worktree: {what} in the repository's main worktree ({main}); {why}")


def finish_interrupted(repo) -> ErasureReceipt | None:
    """Finish an interrupted erasure under the repository's locks (the gate alone); None if
    there is none. In a linked worktree the journal is also there while an erasure RUNS in the
    main one, which holds the gate: wait for it as a writer would; still there once the gate is
    free, the erasure was interrupted, and only the main worktree may finish it (a
    linked worktree opened during a forget was told it had been interrupted)."""
    if not pending(repo.root):
        return None
    try:
        require_main_worktree(repo.root, finishing=True)
    except Conflict:
        with repo.store.locked():
            pass
        if pending(repo.root):
            raise
        return None
    with repo.store.locked(erasure=True):
        return finish(repo)


def finish(repo) -> ErasureReceipt | None:
    """Finish an interrupted erasure (call under the repo lock). None if there was none."""
    journal = Journal(repo.root)
    if not journal.exists():
        journal.remove()
        return None
    require_main_worktree(repo.root, finishing=True)
    ops.remove_stale_locks(repo.root)
    return ErasureReceipt.from_dict(_run(repo, journal, journal.load()))


def _run(repo, journal: Journal, state: dict) -> dict:
    plan = Plan.from_state(state["plan"])
    when = parse_time(state["at"], field="at")
    root = repo.root
    repo.close()
    if state["phase"] == "planned":
        _hold(root, plan, state)
        journal.advance(state, "held")
    if state["phase"] == "held":
        run_rewrite(root, state["refs"])
        journal.advance(state, "rewritten")
    if state["phase"] == "rewritten":
        _clean(repo, plan)
        journal.advance(state, "restored")
    if state["phase"] == "restored":
        for name, _, _ in ops.list_refs(root, HOLD_PREFIX):
            ops.delete_ref(root, name)
        ops.gc_prune(root)
        journal.advance(state, "cleaned")
    if state["phase"] == "cleaned":
        repo.reload()
        state["counts"]["cache_entries"] = purge_caches(repo)
        now_reachable = ops.reachable_commits(root)
        rewritten = sorted(set(state["old_commits"]) - now_reachable)
        # The commits the rewrite made: filter-repo drops signatures, so with require_signed the
        # receipt (signed by the eraser) attests them (policy/verify.py).
        attested = sorted(now_reachable - set(state["old_commits"]))
        state["counts"]["commits_rewritten"] = len(rewritten)
        erased_blobs = sorted(set(state.get("old_note_blobs", [])) - ops.blobs_at(root, is_note_path))
        mentions = rc.mention_scan(repo, plan)
        receipt = rc.build(plan, rid=state["receipt_id"], when=when, counts=state["counts"],
                           old_head=state["old_head"], rewritten=rewritten, attested=attested,
                           erased_blobs=erased_blobs, mentions=mentions)
        # The erased ids stay in this clone (never committed: erasure/erased.py says why); sync,
        # the holds and the check of the remotes read them here.
        erased.record(root, state["receipt_id"], commits=rewritten, blobs=erased_blobs)
        receipt["new_head"] = rc.commit(repo, receipt, plan, when)
        state["receipt"] = receipt
        state["mentions"] = mentions
        journal.advance(state, "receipted")
    receipt = dict(state["receipt"])
    if state.get("push"):
        receipt["remotes"] = rc.push(root, state.get("leases", {}), receipt)
    else:
        receipt["remotes"] = {name: "not pushed: still holds the old history" for name in ops.remotes(root)}
    repo.reload()
    journal.finished()
    repo.reindex()
    receipt["mentions"] = state.get("mentions", [])
    return receipt


def _hold(root: Path, plan: Plan, state: dict) -> None:
    """Park what the rewrite must carry but filter-repo does not see as refs: every stash
    entry and every detached worktree head. Drop refs the plan deletes."""
    for i, s in enumerate(plan.stashes):
        ops.set_ref(root, f"{HOLD_PREFIX}stash/{i:04d}", s["commit"])
    for i, w in enumerate(plan.worktrees):
        if w["action"] == "head moved" and w["head"]:
            ops.set_ref(root, f"{HOLD_PREFIX}worktree/{i:04d}", w["head"])
    ops.stash_clear(root)
    _scrub_git_notes(root, plan)
    for r in plan.refs_deleted:
        ops.delete_ref(root, r["ref"])
    state["refs"] = [name for name, _, _ in ops.list_refs(root) if not name.startswith("refs/remotes/")
                     and name != "refs/stash"]


def _scrub_git_notes(root: Path, plan: Plan) -> None:
    """filter-repo passes refs/notes/* through as they are: a notes ref holding erased text is
    replaced by one commit of its scrubbed notes (its old history goes)."""
    needles = [n.encode() for n in plan.needles]
    for ref, _, _ in ops.list_refs(root, "refs/notes/"):
        files = ops.tree_paths(root, ref)
        data = ops.read_blobs(root, list(files.values()))
        scrubbed = {p: replace_all(data.get(oid, b""), needles) for p, oid in files.items()}
        if any(n for _, n in scrubbed.values()):
            ops.snapshot_ref(root, ref, {p: d for p, (d, _) in scrubbed.items()}, "Notes scrubbed by mdmem forget")


def _clean(repo, plan: Plan) -> None:
    root = repo.root
    for old, new in plan.refs_renamed.items():
        oid = ops.peel_to_commit(root, old) if old.startswith("refs/heads/") else None
        target = oid or _ref_target(root, old)
        if target:
            ops.set_ref(root, new, target)
            ops.delete_ref(root, old)
    ops.clear_filter_repo_state(root)
    for leftover in LEFTOVERS:
        (ops.git_dir(root) / leftover).unlink(missing_ok=True)
    # The work tree follows the rewritten HEAD for every file the rewrite changed.
    changed = sorted(set(plan.targets) | set(plan.copies) | _identity_files(root, plan))
    ops.checkout_from_head(root, [p for p in changed])
    _scrub_local_files(root, plan)
    ops.scrub_git_leftovers(root, [n.encode() for n in plan.needles])
    # Stash entries and detached worktrees back from their parking refs: a worktree's HEAD
    # before the reflogs expire (moving it logs the commit it left, an erased one: its objects
    # stayed), the stash after (its entries are its reflog).
    held = sorted(ops.list_refs(root, HOLD_PREFIX))
    for name, oid, _ in held:
        if name.startswith(f"{HOLD_PREFIX}worktree/"):
            w = plan.worktrees[int(name.rsplit("/", 1)[1])]
            ops.set_worktree_head(root, Path(w["path"]), oid)
    ops.expire_reflogs(root)
    stash = [(name, oid) for name, oid, _ in held if name.startswith(f"{HOLD_PREFIX}stash/")]
    if stash:
        ops.stash_clear(root)
        for name, oid in reversed(stash):  # stash@{0} is stored last
            index = int(name.rsplit("/", 1)[1])
            message = plan.stashes[index]["message"] if index < len(plan.stashes) else "stash"
            # The stash's message quotes its base commit's subject, which may hold erased text.
            message = replace_all(message.encode(), [n.encode() for n in plan.needles])[0].decode()
            ops.stash_store(root, oid, message)
    for w in plan.worktrees:
        if Path(w["path"]).exists():
            _scrub_worktree_files(Path(w["path"]), w.get("scrub", ()), plan)
            # Its own uncommitted edits stay (those holding erased text were just scrubbed).
            ops.checkout_from_head(Path(w["path"]), [p for p in changed if p not in set(w.get("dirty", ()))])
        else:  # its folder is gone (prunable): its index alone keeps erased blobs alive
            ops.reset_missing_worktree_index(root, Path(w["path"]))


def _ref_target(root: Path, name: str) -> str | None:
    for ref, oid, _ in ops.list_refs(root, name):
        if ref == name:
            return oid
    return None


def _identity_files(root: Path, plan: Plan) -> set[str]:
    """Files at HEAD whose identity fields the rewrite may have changed."""
    if not plan.people:
        return set()
    from ..model import layout
    from .scan import is_view
    return {p for p in ops.tree_paths(root, "HEAD") if layout.is_note_path(p) or is_view(p)}


def _scrub_worktree_files(top: Path, rels, plan: Plan) -> None:
    """A linked worktree's uncommitted files that hold erased text: an erased note's copy is
    deleted, any other file has the text replaced; nothing else there is touched."""
    needles = [n.encode() for n in plan.needles]
    targets = set(plan.targets)
    for rel in rels:
        full = top / rel
        if full.is_symlink() or not full.is_file():
            continue
        if rel in targets:
            full.unlink()
            continue
        new, n = replace_all(full.read_bytes(), needles)
        if n:
            full.write_bytes(new)


def _scrub_local_files(root: Path, plan: Plan) -> None:
    needles = [n.encode() for n in plan.needles]
    for item in plan.local_files:
        full = root / item["path"]
        if item["action"] == "deleted":
            full.unlink(missing_ok=True)
        elif item["action"] == "scrubbed" and full.is_file() and not full.is_symlink():
            data = full.read_bytes()
            new, n = replace_all(data, needles)
            if n:
                full.write_bytes(new)


def purge_caches(repo) -> int:
    """The embedding cache keeps only texts current history holds (then VACUUM); the
    full-text and versions indexes and the view metadata are deleted and rebuilt; the daemon's
    log (the rewrite ended the daemon) and half-written temporary files go. In the repository's
    cache folder and in each linked worktree's (a process working in one keeps its own index
    there)."""
    texts: list[set[str]] = []

    def history() -> set[str]:
        if not texts:
            texts.append(history_texts(HistoryScan.read(repo.root), repo.contracts))
        return texts[0]

    return sum(purge_cache_folder(base, history) for base in cache_folders(repo.root))


def purge_cache_folder(base: Path, history: Callable[[], set[str]]) -> int:
    """:func:`purge_caches` in one cache folder (a repository's, a linked worktree's, a
    workspace's index): ``history`` gives the texts history still holds, asked only if an
    embedding cache is there. The number of embedding entries dropped."""
    from ..search.embedding_cache import EmbeddingCache, cache_key
    from ..search.note_index import folder_index_lock

    dropped = 0
    cache_path = base / "embeddings.sqlite"
    if cache_path.exists():
        texts = history()
        cache = EmbeddingCache(cache_path)
        try:
            keep = {cache_key(m, t) for m in cache.models() for t in texts}
            dropped += cache.retain(keep)
        finally:
            cache.close()
    # With the half-built (.new), swapped-out (.old) and moved-aside (broken/) copies and an
    # import's worker's (bulk/); under the index lock, so no process that opened the old
    # index still writes a file into the folder (search/postings.py writes a segment's file
    # under it, and only while the segment is current).
    with folder_index_lock(base):
        for name in ("fulltext", "versions", "fulltext.new", "fulltext.old", "versions.new", "versions.old",
                     "broken", "bulk"):
            cachefiles.remove(base / name)
    for name in ("vectors.sqlite", "viewmeta.sqlite", "state.json", "versions.json", DAEMON_LOG):
        # A database's rollback journal or log (a killed writer's) holds whole pages of it.
        for suffix in ("", "-journal", "-wal", "-shm"):
            cachefiles.remove(base / (name + suffix))
    for leftover in base.glob("*.tmp"):  # a save cut short (verify.json's, a view's)
        leftover.unlink(missing_ok=True)
    return dropped


def _count_index_entries(repo, plan: Plan) -> dict:
    base = cache_dir(repo.root)
    out = {"index_entries": 0, "vectors": 0}
    try:
        from whoosh import index as windex

        from ..search.doctable import VECTOR_FIELD
        if windex.exists_in(str(base / "fulltext")):
            with windex.open_dir(str(base / "fulltext")).searcher() as s:
                out["index_entries"] = sum(1 for p in plan.targets if s.document_number(doc_id=p) is not None)
                out["vectors"] = out["index_entries"] if VECTOR_FIELD in s.schema else 0
    except Exception:  # a broken index is rebuilt anyway; the count is only informative
        pass
    return out


__all__ = ["forget", "finish", "purge_caches", "purge_cache_folder", "AUDIT_PATH", "erased_commit_ids",
           "erased_blob_ids", "REMOVED"]
