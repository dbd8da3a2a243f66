"""Team sync through an ordinary git remote: fetch, fast-forward or merge in memory, push.

The erasure record (audit/erasures.jsonl) keeps the ids of rewritten commits, never their
content. A stale clone still has those commits; sync refuses to merge or push from it,
and the pre-receive guard on the shared remote refuses any push that contains them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..erasure.forget import AUDIT_PATH, erased_blob_ids, erased_commit_ids, purge_caches
from ..erasure.journal import stamp_erasure_ended
from ..erasure import erased as erased_record
from ..erasure.erased import known_blobs, known_commits
from ..erasure.receipt import receipt_ids
from ..config import CONFIG_NAME
from ..errors import BadInput, Conflict, GitFailed, MdmemError, Refused
from ..ops.holds import REVIEW_PREFIX
from ..storage import sync_ops
from ..storage.trailers import parse_trailers
from ..storage.queries import blob_hash


@dataclass(frozen=True)
class ConflictPair:
    """One keyed note changed on both sides of a sync, resolved by validity."""

    path: str
    live: str  # the blob id kept live
    superseded: str  # the other version's blob id, still in history (its side's commit)
    live_side: str  # "local" | "remote"
    rule: str  # why: "later valid_from" | "later commit" | "kept the change over the deletion" ...

    def trailer(self) -> str:
        return f"{self.path} live={self.live} superseded={self.superseded} ({self.rule})"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


CONFLICT_TRAILER = "Memory-Conflict"


def sync(repo, *, as_user: str, remote: str = "origin", push: bool = False, replay: bool = False,
         now=None) -> dict:
    """Integrate a remote's history, or change nothing.

    Fetch, then fast-forward or merge in memory: generated views are regenerated rather than
    merged; a keyed note changed on both sides resolves by validity (the later valid_from
    live, then the later commit; the other stays in history and is named in a
    ``Memory-Conflict`` trailer and listed for review). Anything needing a person (both
    sides hand-edited a note, a non-note file changed on both sides, a note that does not
    parse, hooks that differ from mdmem's) raises Conflict naming the files with the branch,
    index and work tree exactly as they were. No rebase or merge is ever left in progress:
    the merge commit is built in memory and the branch moves by compare-and-swap.
    """
    from ..model.clock import resolve_now

    user = repo.access.check_user(as_user)  # declared in the trusted mdmem.toml, not only non-empty
    when = resolve_now(now)
    store = repo.store
    if remote not in store.remotes():
        raise BadInput(f"--remote: no remote {remote!r}; add one with git remote add")
    replayed: dict = {}
    with store.locked():
        _refuse_unfinished_git(store)
        branch = store.branch_ref().removeprefix("refs/heads/")
        head = store.head()
        # Asked first, without fetching: when neither side moved since the last sync finished,
        # that sync's outcome stands and nothing after the fetch could change a thing.
        listed = sync_ops.remote_heads(store, remote)
        if listed is not None and _unchanged(store, remote, branch, head, listed, push=push):
            return _unchanged_report(repo, user, branch, head, listed, push=push)
        # Fetched into a scratch ref: until the sync succeeds no ref a person sees moves
        # (not even refs/remotes/<remote>/<branch>), so a refused sync leaves the repo as it was.
        scratch = f"refs/mdmem-sync/{remote}/{branch}"
        fetched, error = sync_ops.fetch_to(store, remote, branch, scratch)
        if not fetched:
            raise GitFailed(f"sync: git fetch {remote} failed, nothing changed: {error[:300]}")
        their_head = sync_ops.rev_in_process(store, scratch)
        try:
            status, conflicts = _integrate(repo, user, when, head, their_head, remote, branch)
        except _RemoteBehindErasure as exc:
            try:
                if push and replay and not exc.publishable and their_head:
                    # Teammates' commits on the old history: re-applied here, then the erasure goes out.
                    replayed = _replay_theirs_onto_erasure(repo, user, head, their_head, exc.erased)
            finally:
                sync_ops.drop_scratch_ref(store, scratch)
                sync_ops.drop_unreachable(store)  # the fetch brought erased objects back into this clone
            if not (push and (exc.publishable or replayed)):
                raise
            status, conflicts = _publish_erasure(store, remote, branch, lease=their_head)
            if replayed:
                status = "replayed and published erasure"
        except _CloneBehindErasure:
            if not replay:
                sync_ops.drop_scratch_ref(store, scratch)
                raise
            status, conflicts = "replayed", []
            replayed = _replay_after_erasure(repo, user, head, their_head, remote, branch)
        except Refused:
            sync_ops.drop_scratch_ref(store, scratch)
            sync_ops.drop_unreachable(store)
            raise
        finally:
            sync_ops.drop_scratch_ref(store, scratch)
        if their_head:
            sync_ops.set_ref(store, f"refs/remotes/{remote}/{branch}", their_head)
        # Whatever arrived, the views must be a fresh render of the tip (a commit pushed
        # with --no-verify could have left them stale): regenerate them in one more commit.
        if replayed or status not in SETTLED:
            repo.reset_caches()  # history was replaced: the caches' states name commits that are gone
        rendered = _render_if_stale(repo, user, when)
        pushed = None
        if push and store.head():
            ok, error = sync_ops.push(store, remote, f"HEAD:refs/heads/{branch}")
            pushed = "pushed" if ok else f"push refused (sync again): {error[:200]}"
            if ok:
                sync_ops.set_ref(store, f"refs/remotes/{remote}/{branch}", store.head())
        # Holds are pushed (and closed ones deleted there) only beside a main the remote took:
        # the approval that closes a hold travels on main.
        from ..ops.holds import decisions

        decided = decisions(store)  # history's approve/reject commits, read once for both uses below
        holds, their_holds = _sync_holds(repo, remote, push=push and pushed in (None, "pushed"), closed=set(decided),
                                          listed=listed)
        dropped = _drop_erased_leftovers(store)
        both = sorted(r for r, ops in decided.items() if {"approve", "reject"} <= ops)
        if (status in SETTLED and not replayed and pushed in (None, "pushed") and their_holds is not None
                and not both and not (set(holds) & UNSETTLED_HOLDS)):
            theirs = store.head() if pushed else their_head
            _write_stamp(store, remote, branch, store.head(), {branch: theirs} if theirs else {},
                         their_holds, sync_ops.local_refs(store, f"refs/heads/{REVIEW_PREFIX}"))
    # An erasure this push published is erased there only once the remote no longer hands out
    # what it removed: asked as forget --push asks (after the holds, which may move refs there).
    erasure = _erasure_on_remote(store.root, remote) if push and status.endswith("published erasure") else None
    if replayed or dropped or status not in SETTLED or set(holds) & DROPPING_HOLDS:
        # History was replaced or objects dropped: every in-process cache may describe commits
        # that are gone. A fast-forward or merge only moved the tip on, which each catches up to.
        repo.reset_caches()
    head = repo.store.head()
    # Conflicts in roots the user may not read are resolved all the same, but not named
    # (like the untrusted list): a path in private/<other> tells what they keep.
    conflicts = [c for c in conflicts if _readable(repo, user, c.path)]
    detail = f"{branch} now at {head[:10] if head else '(empty)'}"
    if conflicts:
        detail += f"; {len(conflicts)} note(s) changed on both sides, resolved by validity (listed for review)"
    # Whatever arrived is verified at once: notes no permitted writer committed are flagged
    # (kept out of views and startup, marked in recall) before anyone reads them.
    untrusted = repo.verify(as_user=user)["untrusted"]
    # Like the untrusted list: only views of roots the user may read (and the root guide) are named.
    readable = set(repo.access.readable_roots(user))
    rendered = [p for p in rendered if "/".join(p.split("/")[:2]) in readable or "/" not in p]
    out = {"status": status, "detail": detail, "commit": head, "conflicts": [c.to_dict() for c in conflicts],
           "rendered": rendered, "untrusted": untrusted}
    if pushed is not None:
        out["push"] = pushed
    if erasure is not None:
        out["erasure"] = erasure
    out["holds"] = holds
    out.update(replayed)
    # A hold approved in one clone and rejected in another (offline) is both, once merged:
    # the approved note is live; a person decides.
    if both:
        out["approved_and_rejected"] = both
    return out


SETTLED = ("up to date", "ahead", "fast-forwarded", "merged")  # outcomes that rewrote nothing
# Hold outcomes a later sync must report again, or after which objects were dropped: no stamp.
DROPPING_HOLDS = {"refused", "remade", "dropped_erased"}
UNSETTLED_HOLDS = DROPPING_HOLDS | {"error", "skipped_names", "push_failed"}
STAMP = "sync.json"  # in the cache folder: where the last settled sync left both sides, per remote


def _stamp_path(store):
    return store.cache_dir / STAMP


def _read_stamps(store) -> dict:
    import json

    try:
        data = json.loads(_stamp_path(store).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_stamp(store, remote: str, branch: str, head: str | None, theirs: dict[str, str],
                 their_holds: dict[str, str], my_holds: dict[str, str]) -> None:
    """Record where a sync that settled everything left the two sides: the remote's branch and
    holds (only values this clone has integrated or pushed itself, never one merely listed),
    this clone's tip and holds. Commit ids and hold ids only; a cache, so a failed write is fine."""
    import json
    import os

    stamps = _read_stamps(store)
    stamps[remote] = {"branch": branch, "head": head, "remote": {**theirs, **their_holds}, "holds": my_holds}
    path = _stamp_path(store)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{STAMP}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stamps), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def _unchanged(store, remote: str, branch: str, head: str | None, listed: dict[str, str], *, push: bool) -> bool:
    """Whether a full sync now could change nothing: the remote's branch and holds are what the
    last settled sync left them, and so are this clone's tip and holds (a sync is a function of
    those: the trusted config, the receipts, the views and the decided holds are all history at
    the tip). With ``push``, also nothing to push: the remote's branch and holds are this clone's."""
    stamp = _read_stamps(store).get(remote)
    if not isinstance(stamp, dict) or head is None:
        return False
    theirs = {n: o for n, o in listed.items() if n == branch or n.startswith(REVIEW_PREFIX)}
    if stamp.get("branch") != branch or stamp.get("head") != head or stamp.get("remote") != theirs:
        return False
    # The stamp lies in .git, where any local process may write it: it is trusted only for what
    # this clone can show it holds (the remote's tip among its own history, every listed hold).
    there = theirs.get(branch)
    if there is not None and there != head and not (store.has_object(there) and store.is_ancestor(there, head)):
        return False
    if not all(store.has_object(o) for o in theirs.values()):
        return False
    mine = sync_ops.local_refs(store, f"refs/heads/{REVIEW_PREFIX}")
    if stamp.get("holds") != mine:
        return False
    if push:
        their_holds = {n[len(REVIEW_PREFIX):]: o for n, o in theirs.items() if n != branch}
        return theirs.get(branch) == head and their_holds == mine
    return True


def _unchanged_report(repo, user: str, branch: str, head: str, listed: dict[str, str], *, push: bool) -> dict:
    """What a full sync would answer when nothing moved on either side since the last one settled."""
    out = {"status": "up to date" if listed.get(branch) == head else "ahead",
           "detail": f"{branch} now at {head[:10]}", "commit": head, "conflicts": [], "rendered": [],
           "untrusted": repo.verify(as_user=user)["untrusted"]}
    if push:
        out["push"] = "pushed"
    out["holds"] = {"fetched": [], "closed": []}
    return out


def _sync_holds(repo, remote: str, *, push: bool, closed: set[str],
                listed: dict[str, str] | None = None) -> tuple[dict, dict[str, str] | None]:
    """Held writes travel with sync, so the second person who must review one sees it in their
    own clone. What is open is decided by history, not by any clone's branches:
    a hold an approve or reject commit names (``closed``: ``ops.holds.decisions``) is closed everywhere, its
    branch dropped here and, with ``push``, on the remote. Otherwise a hold the remote has
    and this clone lacks is taken (only mdmem's id form, one regular note within the size
    limit, nothing erased in its history), and with ``push`` one this clone has and the remote
    lacks is pushed; a branch that merely vanished here is taken again, never deleted there.
    After an erasure a local hold on the old history is made again on the erased one (the
    same held change), or dropped and named when it touches an erased version; the remote's
    copy on the old history is replaced (with a lease) or deleted.

    ``listed``: the remote's branches as `git ls-remote` gave them at the start of this sync;
    when this clone holds every hold they name, nothing is fetched. Also returns the remote's
    holds as this sync leaves them (what was fetched, with what it pushed and deleted there), or
    None when they are not known (a fetch or push failed)."""
    from ..ops.holds import HOLD_ID

    store = repo.store
    local, scratch = f"refs/heads/{REVIEW_PREFIX}", f"refs/mdmem-sync/{remote}/{REVIEW_PREFIX}"
    for name in sync_ops.local_refs(store, scratch):
        sync_ops.drop_scratch_ref(store, scratch + name)
    listed = None if listed is None else {n[len(REVIEW_PREFIX):]: o for n, o in listed.items()
                                           if n.startswith(REVIEW_PREFIX)}
    if listed is not None and all(store.has_object(o) for o in listed.values()):
        fetched, scratched = listed, {}  # the remote's holds as listed, every object here already
    else:
        ok, error = sync_ops.fetch_prefix(store, remote, REVIEW_PREFIX, scratch)
        if not ok:
            return {"error": f"holds not fetched: {error[:200]}"}, None
        fetched = scratched = sync_ops.local_refs(store, scratch)
    after: dict[str, str] | None = {REVIEW_PREFIX + n: o for n, o in fetched.items()}
    theirs = {n: o for n, o in fetched.items() if HOLD_ID.fullmatch(n)}
    audit = sync_ops.text_at(store, "HEAD", AUDIT_PATH)
    erased = known_commits(store.root, audit) | known_blobs(store.root, audit)
    needles = _erased_needles(store, known_blobs(store.root, audit)) if erased else []
    seen: dict[str, bool] = {}  # one object walk per branch tip, however often it is asked about

    def on_erased(oid: str) -> bool:
        if oid not in seen:
            seen[oid] = bool(erased) and bool(sync_ops.object_ids(store, oid, exclude="HEAD") & erased)
        return seen[oid]

    out: dict = {"fetched": [], "closed": [], "remade": [], "dropped_erased": [], "refused": [],
                 "skipped_names": sorted(set(fetched) - set(theirs))}
    mine = sync_ops.local_refs(store, local)
    for name, oid in sorted(mine.items()):
        if name in closed:
            sync_ops.set_ref(store, local + name, None)
            out["closed"].append(name)
            del mine[name]
        elif on_erased(oid):
            remade = _remake_hold(store, oid, erased, needles)
            sync_ops.set_ref(store, local + name, remade)
            (out["remade"] if remade else out["dropped_erased"]).append(name)
            if remade:
                mine[name] = remade
            else:
                del mine[name]
    for name, oid in sorted(theirs.items()):
        if name in mine or name in closed:
            continue
        why = "its history holds erased versions" if on_erased(oid) else _not_a_hold(repo, oid)
        if why:
            out["refused"].append({"id": name, "why": why})
            continue
        sync_ops.set_ref(store, local + name, oid)
        mine[name] = oid
        out["fetched"].append(name)
    # git's own copies of the remote's holds (a plain clone or fetch makes them) must not keep
    # erased history alive in this clone.
    tracking = f"refs/remotes/{remote}/{REVIEW_PREFIX}"
    for name, oid in sync_ops.local_refs(store, tracking).items():
        if name in closed or on_erased(oid):
            sync_ops.set_ref(store, tracking + name, None)
    if push:
        pushed, deleted, failed = [], [], []
        for name, oid in sorted(mine.items()):
            there = theirs.get(name)
            if there == oid or (there is not None and not on_erased(there)):
                continue  # already there, or a different hold of that name that is not ours to replace
            lease = (f"refs/heads/{REVIEW_PREFIX}{name}", there) if there else None
            ok, _ = sync_ops.push(store, remote, f"{oid}:refs/heads/{REVIEW_PREFIX}{name}", force=bool(lease),
                                  lease=lease)
            (pushed if ok else failed).append(name)
        for name, oid in sorted(theirs.items()):
            if name not in mine and (name in closed or on_erased(oid)):
                ok, _ = sync_ops.push(store, remote, f":refs/heads/{REVIEW_PREFIX}{name}", force=True,
                                      lease=(f"refs/heads/{REVIEW_PREFIX}{name}", oid))
                (deleted if ok else failed).append(name)
        out.update(pushed=pushed, deleted=deleted)
        if failed:
            out["push_failed"] = failed
            after = None
        elif after is not None:
            after.update((REVIEW_PREFIX + n, mine[n]) for n in pushed)
            for n in deleted:
                after.pop(REVIEW_PREFIX + n, None)
    for name in scratched:
        sync_ops.drop_scratch_ref(store, scratch + name)
    if out["refused"] or out["remade"] or out["dropped_erased"]:
        sync_ops.drop_unreachable(store)
    return {k: v for k, v in out.items() if v or k in ("fetched", "closed")}, after


def _drop_erased_leftovers(store) -> bool:
    """Objects of history an erasure removed that only reflogs still reach (a replay killed
    before it dropped them) go at the next sync; so does whatever unreachable a clone holds
    when it first meets a receipt (a local `git clone` copies every object of the remote,
    erased ones too, and receipts no longer say which those are)."""
    audit = sync_ops.text_at(store, "HEAD", AUDIT_PATH)
    if not audit:
        return False
    unseen = receipt_ids(audit) - erased_record.receipts(store.root)
    left = sorted(sync_ops.present(store, known_commits(store.root, audit)))
    if unseen or (left and not sync_ops.refs_containing(store, left[0])):
        sync_ops.drop_unreachable(store)
        for rid in sorted(unseen):
            erased_record.record(store.root, rid, commits=(), blobs=())
        return True
    return False


def _erased_needles(store, erased: set[str]) -> list[str]:
    """The distinctive sentences of the erased note versions (blob ids) this clone still holds
    (an old history not dropped yet): what a replayed change or a remade hold must not quote."""
    from ..erasure import needles as nd
    from ..erasure.scan import split_note

    found: set[str] = set()
    for blob in sorted(sync_ops.present(store, erased)):
        found |= set(nd.from_note_text(split_note(store.read_blob(blob))[1].decode("utf-8", "replace")))
    return nd.ordered(found)


def _quotes(data: bytes | str, needles: list[str]) -> bool:
    from ..erasure.needles import occurs

    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return any(occurs(text, n) for n in needles)


def _erased_change(store, parent: str, changes: dict[str, bytes | None], erased: set[str], needles: list[str],
                   message: str = "") -> str | None:
    """Why a change made on history an erasure removed may not be made again on the erased
    one (a replayed commit, a remade hold), or None: it changes an erased note version, or it
    quotes erased text (pushed before the erasure, forget would have scrubbed it; made again
    as it is, it would undo the erasure for that text)."""
    blobs = {store.blob_id(p, parent) for p in changes} | {blob_hash(d) for d in changes.values() if d is not None}
    if blobs & erased:
        return "it changes an erased note version"
    if _quotes(message, needles) or any(_quotes(d, needles) for d in changes.values() if d is not None):
        return "it quotes erased text"
    return None


def _remake_hold(store, oid: str, erased: set[str], needles: list[str]) -> str | None:
    """A hold made on history erased since: the same held change on the erased history (HEAD),
    or None when it touches an erased version or quotes erased text."""
    parent = store.parents(oid)
    if len(parent) != 1:
        return None
    changes = store.tree_changes(parent[0], oid)
    if _erased_change(store, parent[0], changes, erased, needles):
        return None
    head = store.head()
    return sync_ops.replay(store, head, oid, changes) if head else None


def _not_a_hold(repo, oid: str) -> str | None:
    """Why a fetched branch is not a hold mdmem made (one regular note within the size limit,
    that parses and agrees with its path), or None."""
    from ..errors import MdmemError
    from ..model.layout import is_note_path
    from ..model.validate import validate_note

    store = repo.store
    parents = store.parents(oid)
    if len(parents) != 1:
        return "not one commit on main's history"
    changes = store.tree_changes(parents[0], oid)
    if len(changes) != 1:
        return f"changes {len(changes)} files; a hold changes one note"
    path, data = next(iter(changes.items()))
    if data is None or not is_note_path(path) or store.is_link_in(oid, path):
        return "does not hold one regular note file"
    if len(data) > repo.config.note_max_bytes:
        return f"its note is {len(data)} bytes; a note is at most {repo.config.note_max_bytes}"
    try:
        validate_note(path, bytes(data), repo.contracts, max_bytes=repo.config.note_max_bytes)
    except MdmemError as exc:
        return f"its note is invalid ({str(exc)[:100]})"
    return None


def _readable(repo, user: str, path: str) -> bool:
    from ..model.layout import root_of

    return repo.access.may_read_root(user, root_of(path))


def _integrate(repo, user, when, head, their_head, remote, branch) -> tuple[str, list[ConflictPair]]:
    store = repo.store
    _refuse_erased(store, head, their_head, remote, branch)
    _refuse_config_removed(store, head, their_head, remote, branch)
    _refuse_converting_attributes(store, head, their_head, remote, branch)
    conflicts: list[ConflictPair] = []
    if their_head is None or their_head == head:
        return ("ahead" if their_head is None and head else "up to date"), conflicts
    how = sync_ops.related(store, head, their_head) if head else "behind"
    base = their_head if how == "ahead" else head if how == "behind" else sync_ops.merge_base(store, head, their_head)
    if base == their_head:
        return "ahead", conflicts
    if base == head or head is None:
        _refuse_dirty(store, store.tree_changes(head, their_head), "fast-forward")
        store.fast_forward(their_head, expect_tip=head)
        return "fast-forwarded", conflicts
    conflicts = _merge(repo, user, when, head, their_head, base, f"{remote}/{branch}")
    return "merged", conflicts


def _erasure_on_remote(root, remote: str) -> str:
    """Whether ``remote`` still serves what erasures known here removed (erasure/receipt.py's
    remote_status: "erased: ..." or "NOT erased ..." naming what must happen there)."""
    from ..erasure.erased import blob_ids, commit_ids
    from ..erasure.receipt import CHECKED_IDS, remote_status

    commits, blobs = sorted(commit_ids(root)), sorted(blob_ids(root))
    return remote_status(root, remote, commits[:5] + blobs[:CHECKED_IDS], set(commits))


def _publish_erasure(store, remote: str, branch: str, *, lease: str | None = None) -> tuple[str, list[ConflictPair]]:
    """The remote holds only history erased here (or what was re-applied here): push the
    rewritten history over it, only if the remote is still where it was fetched (``lease``)."""
    ok, error = sync_ops.push(store, remote, f"HEAD:refs/heads/{branch}", force=True,
                              lease=(f"refs/heads/{branch}", lease) if lease else None,
                              also=sync_ops.rewritten_side_refspecs(store))
    if not ok:
        raise GitFailed(f"sync: publishing the erasure to {remote} failed: {error[:200]}")
    sync_ops.set_ref(store, f"refs/remotes/{remote}/{branch}", store.head())
    return "published erasure", []


def _refuse_unfinished_git(store) -> None:
    for what in sync_ops.in_progress(store):
        raise Conflict(f"sync: {what} is in progress in this clone; finish or abort it with git first "
                       "(nothing changed)")


class _RemoteBehindErasure(Refused):
    """The remote still holds history this clone erased: the erasure was never pushed.
    ``publishable``: the remote holds nothing else, so a force-push loses nobody's work."""

    def __init__(self, message: str, *, publishable: bool, erased: set[str] = frozenset()):
        super().__init__(message)
        self.publishable = publishable
        self.erased = erased  # the commit ids this clone's erasure rewrote


def _refuse_erased(store, head, their_head, remote, branch) -> None:
    """Erased history comes back through a sync three ways; each is refused before any ref moves.

    - The remote predates an erasure made here (forget without --push): its history still holds
      the commits this clone rewrote. ``sync --push`` publishes the erasure (a force-push) when
      the remote holds nothing else; otherwise a person decides.
    - This clone predates an erasure made elsewhere: it holds commits the remote's receipt names.
    - Erased content under new commit ids: an old clone rebased or cherry-picked the erased
      commits onto the rewritten history, which the commit ids alone do not show. Receipts name
      the erased note versions by blob id, and no incoming blob may be one of them.
    """
    here = sync_ops.text_at(store, "HEAD", AUDIT_PATH) if head else ""
    there = sync_ops.text_at(store, their_head, AUDIT_PATH)
    if not (here or there) or not their_head:
        return
    incoming = sync_ops.object_ids(store, their_head, exclude=head)
    erased_here = known_commits(store.root, here)
    behind = sorted(incoming & erased_here)
    if behind:
        others = store.commit_ids(their_head, exclude=head) - erased_here
        named = ", ".join(f"{c[:10]} {store.subject_of(c)}" for c in sorted(others)[:3]) + (", ..." if len(others) > 3
                                                                                          else "")
        raise _RemoteBehindErasure(
            f"sync: {remote}/{branch} still holds {len(behind)} commit(s) erased in this clone (forget ran "
            "without --push), and "
            + (f"{len(others)} commit(s) made on that old history since ({named}): to re-apply them here and "
               "publish the erasure, run `mdmem sync --replay --push` (any touching an erased note are left out "
               "and named)" if others else "nothing else: `mdmem sync --push` publishes the erasure (a force-push)")
            + "; the fetched history was dropped, nothing changed", publishable=not others, erased=erased_here)
    # A receipt names commits its erasure rewrote away: one its own history still holds is no
    # erasure (a forged or broken receipt line -- any teammate can append one), and believing it
    # would stop every clone's sync for good, fresh clones included. New receipts carry no ids:
    # this clone's own record, and what it derives from the old history it holds.
    claimed = (erased_commit_ids(there) | erased_record.commit_ids(store.root)
               | _derive_erasure(store, head, their_head, there, remote, branch))
    stale = sorted(store.commit_ids("HEAD") & (claimed - store.commit_ids(their_head))) if head and claimed else []
    if stale:
        known = last_synced(store, head, remote, branch)
        own = sync_ops.commits_not_in(store, head, known) if known else []
        mine = (f"; {len(own)} commit(s) of yours are not on {remote} ("
                + ", ".join(f"{c[:10]} {store.subject_of(c)}" for c, _ in own[:3]) + (", ..." if len(own) > 3 else "")
                + ")" if own else "")
        raise _CloneBehindErasure(
            f"sync: this clone holds {len(stale)} commit(s) that {remote} erased (first {stale[0][:10]}){mine}; "
            "`mdmem sync --replay` re-applies your own commits onto the erased history and drops the old one "
            "(any touching an erased note are left out and named); or re-clone; nothing changed")
    back = incoming & (known_blobs(store.root, here) | erased_blob_ids(there))
    if back:
        raise Refused(f"sync: {remote}/{branch} brings back {len(back)} erased note version(s) under new commits "
                      "(an old clone rebased or cherry-picked erased history); nothing was merged and the "
                      f"fetched history was dropped. Erase them from {remote} again (forget in a fresh clone of it, "
                      "with --push), and install `mdmem guard` on it")


def last_synced(store, head: str | None, remote: str, branch: str) -> str | None:
    """Where ``remote``'s branch was when this clone last had it on the history it still holds:
    the newest value of its remote-tracking ref that ``head`` contains (a plain `git fetch` may
    already have moved the ref onto the erased history; its reflog keeps the one before)."""
    ref = f"refs/remotes/{remote}/{branch}"
    for oid in [sync_ops.rev(store, ref)] + sync_ops.reflog(store, ref):
        if oid and head and sync_ops.is_ancestor(store, oid, head):
            return oid
    return None


def _derive_erasure(store, head, their_head, there: str, remote: str, branch: str) -> set[str]:
    """Receipts carry no erased ids; a clone meeting an erasure made elsewhere derives them.
    Where the remote's branch was before (its remote-tracking ref and that ref's reflog: a plain
    `git pull` may have merged the new history in already), on history this clone still holds
    and the remote no longer does, with a receipt the remote has and it lacked: what only that
    old history holds was erased. Its commits and note versions are recorded in this clone
    (erasure/erased.py) for the replay, the holds and any later sync. Returns the commits."""
    theirs = receipt_ids(there)
    if not head or not their_head or not theirs or theirs <= erased_record.receipts(store.root):
        return set()
    ref = f"refs/remotes/{remote}/{branch}"
    for old in list(dict.fromkeys([sync_ops.rev(store, ref)] + sync_ops.reflog(store, ref)))[:REFLOG_LOOKS]:
        if not old or sync_ops.is_ancestor(store, old, their_head) or not sync_ops.is_ancestor(store, old, head):
            continue
        new = theirs - receipt_ids(store.show_file(old, AUDIT_PATH))
        if not new:
            continue
        commits = store.commit_ids(old, exclude=their_head)
        blobs = sync_ops.note_blobs_only_in(store, old, their_head)
        for rid in sorted(new):
            erased_record.record(store.root, rid, commits=commits, blobs=blobs)
        return commits
    return set()


REFLOG_LOOKS = 50  # values of the remote-tracking ref looked at for the history an erasure replaced


class _CloneBehindErasure(Refused):
    """This clone predates an erasure made elsewhere (``sync --replay`` carries its own work over)."""


def _purge_clone_caches(repo) -> None:
    """This clone's caches purged as forget purges the eraser's (they held the old history's
    texts: the view cache's rows, vectors, index documents)."""
    repo.reset_caches()
    purge_caches(repo)


def _replay_after_erasure(repo, user: str, head: str, their_head: str, remote: str, branch: str) -> dict:
    """This clone's own commits (made since it last synced) re-applied onto the erased history,
    which replaces the old one here; the old history's objects are dropped."""
    store = repo.store
    known = last_synced(store, head, remote, branch)
    if not known:
        raise Refused(f"sync --replay: this clone does not know where {remote}/{branch} was when it last synced; "
                      "re-clone it (save your own notes first); nothing changed")
    audit = store.show_file(their_head, AUDIT_PATH)
    erased = known_blobs(store.root, audit)
    commits = sync_ops.commits_not_in(store, head, known)
    # The caches are purged before the history is replaced as well as after: killed in between,
    # the next replay finds this clone still behind and runs again; killed after the history
    # was replaced, nothing would run the purge again and the old texts stayed.
    _purge_clone_caches(repo)
    tip, out = _replay_commits(repo, user, commits, their_head, erased, remote, _erased_needles(store, erased))
    _refuse_dirty(store, store.tree_changes(head, tip), "replay")
    store.fast_forward(tip, expect_tip=head, why="replayed onto the erased history")
    sync_ops.set_ref(store, f"refs/remotes/{remote}/{branch}", their_head)
    # git's own copies of the remote's old branches go with the old history they hold.
    for name, oid in sync_ops.refs_under(store, f"refs/remotes/{remote}/").items():
        if oid != their_head and known_commits(store.root, audit) & store.commit_ids(oid):
            sync_ops.set_ref(store, f"refs/remotes/{remote}/{name}", None)
    sync_ops.drop_unreachable(store)
    # Its caches held the old history's texts (the view cache's rows, vectors, index
    # documents), as the erasing clone's did before its purge: the same purge here,
    # again for what was rebuilt from the old history since the first.
    _purge_clone_caches(repo)
    # The erasure has now ended in this clone too: a server or daemon running on it that read
    # the erased notes lets go of them (re-executes, exits) as after a forget made here.
    stamp_erasure_ended(repo.root)
    holding = _refs_holding(store, known_commits(store.root, audit))
    if holding:
        out["still_holding_erased"] = holding
    return out


def _replay_theirs_onto_erasure(repo, user: str, head: str, their_head: str, erased_commits: set[str]) -> dict:
    """Teammates' commits on the history this clone erased, re-applied onto the erasure so it
    can be published without losing them."""
    store = repo.store
    erased = known_blobs(store.root, store.show_file("HEAD", AUDIT_PATH))
    commits = [(c, p) for c, p in sync_ops.commits_not_in(store, their_head, head) if c not in erased_commits]
    tip, out = _replay_commits(repo, user, commits, head, erased, "this clone", _erased_needles(store, erased))
    _refuse_dirty(store, store.tree_changes(head, tip), "replay")
    store.fast_forward(tip, expect_tip=head, why="replayed teammates' commits onto the erasure")
    return out


def _refs_holding(store, erased_commits: set[str]) -> list[str]:
    """Refs (branches, the stash...) whose history still holds commits an erasure removed."""
    held = sorted(sync_ops.present(store, erased_commits))[:20]
    return sorted({ref for commit in held for ref in sync_ops.refs_containing(store, commit)})


def _scrubbed(data, needles: list[bytes]):
    """``data`` with every quote of erased text replaced (its git mode kept), as forget scrubs."""
    from ..erasure.needles import replace_all
    from ..storage.objects import with_mode

    if data is None:
        return None
    out, count = replace_all(bytes(data), needles)
    return with_mode(out, getattr(data, "mode", 0o100644)) if count else data


def _replay_commits(repo, user: str, commits: list[tuple[str, list[str]]], onto: str, erased: set[str],
                    where: str, needles: list[str]) -> tuple[str, dict]:
    """``commits`` (oldest first) re-applied on ``onto``: each the same change with its author and
    message, keeping what it can. Quotes of erased text are scrubbed to [removed] (in the files
    and the message, as forget scrubs history); a file whose change meets an erased note version
    (its version before or after is one) cannot be re-applied: it is left out, saved scrubbed
    under .git/mdmem-left-out/<commit>/ and named, and the commit's other files are replayed.
    One whose change meets a different version of its file on ``onto`` (a both-sides edit), or a
    merge, needs a person (nothing changed). Views are left to the render after sync."""
    from ..erasure.needles import REMOVED
    from ..views.fresh import is_view_path

    store = repo.store
    raw = [n.encode() for n in needles]
    tip, replayed, left_out = onto, [], []
    for commit, parents in commits:
        subject = store.subject_of(commit)
        if len(parents) != 1:
            raise Conflict(f"sync --replay: {commit[:10]} is a merge; re-apply it by hand; nothing changed")
        changes = {p: d for p, d in store.tree_changes(parents[0], commit).items() if not is_view_path(p)}
        touching = {p for p, d in changes.items()
                    if {store.blob_id(p, parents[0]), None if d is None else blob_hash(d)} & erased}
        kept = {p: _scrubbed(d, raw) for p, d in changes.items() if p not in touching}
        quoted = sorted(p for p in kept if kept[p] is not changes[p])
        message = store.message_of(commit)
        clean_message = _scrubbed(message.encode(), raw).decode("utf-8", "replace")
        if touching:
            saved = sync_ops.save_left_out(store, commit, {p: _scrubbed(changes[p], raw) for p in sorted(touching)})
            left_out.append({"commit": commit, "subject": _scrubbed(subject.encode(), raw).decode("utf-8", "replace"),
                             "why": "it changes an erased note version", "paths": sorted(touching),
                             "saved": saved})
        if not kept:
            continue
        base = {p: store.blob_id(p, parents[0]) for p in kept}
        new = {p: None if d is None else blob_hash(d) for p, d in kept.items()}
        if all(store.blob_id(path, tip) == new[path] for path in kept):
            continue  # already there (a commit the remote had before its rewrite)
        for path in kept:
            if store.blob_id(path, tip) not in (base[path], new[path]):
                raise Conflict(f"sync --replay: {path} differs in {where} from the version {commit[:10]} changed; "
                               "re-apply that change by hand; nothing changed")
        # Signed again only when the person replaying wrote it (their key is theirs alone).
        mine = repo.config.committer(store.author_email_of(commit)) == user
        tip = sync_ops.replay(store, tip, commit, kept, sign=mine,
                              message=clean_message if clean_message != message else None)
        entry = {"commit": commit, "as": tip, "subject": store.subject_of(tip)}
        if quoted or clean_message != message:
            entry["scrubbed"] = quoted + (["(commit message)"] if clean_message != message else [])
            entry["why"] = f"it quoted erased text, replaced by {REMOVED}"
        replayed.append(entry)
    return tip, {"replayed": replayed, "left_out": left_out}


def _refuse_converting_attributes(store, head, their_head, remote, branch) -> None:
    """A .gitattributes line that converts notes in the work tree would make every note
    unreadable here after the checkout: refused, naming it and its commit."""
    from ..hooks.install import ATTRIBUTES, converting_attributes

    if not their_head:
        return
    theirs = set(converting_attributes(sync_ops.text_at(store, their_head, ATTRIBUTES)))
    new = sorted(theirs - set(converting_attributes(sync_ops.text_at(store, head, ATTRIBUTES))))
    if new:
        last = store.last_change(their_head, ATTRIBUTES)
        by = f" (in {last[0][:10]} by {last[1]})" if last else ""
        raise Refused(f"sync: {remote}/{branch} has {ATTRIBUTES} line {new[0]!r}{by}, which makes git convert notes "
                      "in the work tree (another encoding, a filter or $Id$) so that no note could be read here; "
                      f"remove it there (git revert); nothing changed")


def _refuse_config_removed(store, head, their_head, remote, branch) -> None:
    """A history without mdmem.toml would stop every mdmem command in this clone (it is how a
    memory repo is found): refused, naming the commit, whoever made it."""
    if not head or not their_head or store.blob_id(CONFIG_NAME, head) is None:
        return
    if store.blob_id(CONFIG_NAME, their_head) is not None:
        return
    last = store.last_change(their_head, CONFIG_NAME)
    by = f" in {last[0][:10]} by {last[1]}" if last else ""
    raise Refused(f"sync: {remote}/{branch} has no {CONFIG_NAME} (removed{by}); a memory repo needs it: a config "
                  f"admin restores it there (git revert); nothing changed")


def _refuse_dirty(store, changes: dict, what: str) -> None:
    # This process's deferred index entries first (the MCP server's): git status compares the
    # work tree with git's index, where our own last commit would read as an uncommitted edit.
    store.flush_index()
    clash = sorted(sync_ops.dirty_paths(store, set(changes)) & set(changes))
    if clash:
        raise Conflict(f"sync: uncommitted edits to {', '.join(clash[:10])} would be overwritten by the {what}; "
                       "commit or stash them first (nothing changed)")


def _last_touch(store, base: str, tip: str, path: str) -> tuple[int, dict]:
    """When the side's last commit touching ``path`` was made, and its Memory-* trailers."""
    ts, message = sync_ops.last_touch(store, base, tip, path)
    return ts, parse_trailers(message) if message else {}


def _by_hand(trailers: dict) -> bool:
    """A commit made by a person with git (no trailers) or by `watch --commit` (human:)."""
    return not trailers or trailers.get("source", "").startswith("human:")


def _resolve(repo, path: str, base: str, ours: str, theirs: str, mine: str | None,
             their: str | None, when) -> ConflictPair | str:
    """The winning version of a note both sides changed (blob ids, None: deleted there), or
    why a person is needed. A version valid at ``when`` beats one that is not valid yet (a
    skewed clock or a typo must not leave the note with no live version); then the later
    valid_from, then the later commit."""
    from ..errors import NoteInvalid
    from ..model.layout import parse_path
    from ..model.note import parse_note

    store = repo.store
    try:
        contract = repo.contracts.resolve(parse_path(path).kind)
    except MdmemError:
        return f"{path} (not a note mdmem knows)"
    my_time, my_trailers = _last_touch(store, base, ours, path)
    their_time, their_trailers = _last_touch(store, base, theirs, path)
    if _by_hand(my_trailers) and _by_hand(their_trailers):
        return f"{path} (edited by hand on both sides)"
    if not contract.keyed or contract.append_only:
        return f"{path} ({contract.name} notes are append-only: two versions of one need a person)"
    if mine is None or their is None:
        live, side = (their, "remote") if mine is None else (mine, "local")
        gone = "local" if mine is None else "remote"
        old = store.blob_id(path, base) or "0" * 40
        return ConflictPair(path, live, old, side, f"kept the change over the {gone} deletion")
    try:
        mine_note = parse_note(path, store.read_blob(mine))
        their_note = parse_note(path, store.read_blob(their))
    except NoteInvalid as exc:
        return f"{path} (does not parse: {exc.field}: {exc.reason})"
    mine_now, their_now = mine_note.valid_from <= when, their_note.valid_from <= when
    rule = ("valid now (the other only from its valid_from)" if mine_now != their_now else
            "later valid_from" if mine_note.valid_from != their_note.valid_from else "later commit")
    if (their_now, their_note.valid_from, their_time, their) > (mine_now, mine_note.valid_from, my_time, mine):
        return ConflictPair(path, their, mine, "remote", rule)
    return ConflictPair(path, mine, their, "local", rule)


def _merge(repo, user: str, when, head: str, their_head: str, base: str, label: str) -> list[ConflictPair]:
    """Merge in memory, resolve what policy resolves, commit with the views regenerated."""
    from ..model.layout import is_note_path
    from ..storage.trailers import Trailers
    from ..views.fresh import Views, changed, is_view_path

    store = repo.store
    conflicted = sync_ops.conflicted_paths(store, head, their_head)
    mine_changed = store.tree_changes(base, head)
    their_changed = store.tree_changes(base, their_head)
    conflicts: list[ConflictPair] = []
    needs_person: list[str] = []
    resolved: dict[str, str | None] = {}
    for path in sorted(set(mine_changed) & set(their_changed)):
        mine, their = store.blob_id(path, head), store.blob_id(path, their_head)
        if mine == their:
            continue
        if is_view_path(path):
            resolved[path] = mine or their  # regenerated below from the merged notes
        elif is_note_path(path):
            # Policy, not git's line merge: a blend of two versions of one note is neither.
            outcome = _resolve(repo, path, base, head, their_head, mine, their, when)
            if isinstance(outcome, str):
                needs_person.append(outcome)
            else:
                conflicts.append(outcome)
                resolved[path] = outcome.live
        elif path in conflicted:
            needs_person.append(f"{path} (changed on both sides)")
    if needs_person:
        raise Conflict("sync: needs a person, nothing changed: " + "; ".join(needs_person)
                       + f". Resolve them with git: git fetch {label.split('/', 1)[0]} && git merge {label}, fix the "
                         "files, git add, git commit (the hooks check the notes and regenerate the views)")
    tree, left = sync_ops.merged_tree(store, head, their_head, resolved, changed=set(mine_changed) | set(their_changed))
    if tree is None:
        raise Conflict(f"sync: needs a person, nothing changed: {', '.join(left)} conflict")
    changes = store.tree_changes(head, tree)
    _refuse_dirty(store, changes, "merge")
    # Trust flags of the merged notes: each keeps the flag of the side its version came from
    # (the render after the merge settles any difference with the merge commit's own flags).
    mine_flags = repo.trust.flags(head)
    their_flags = _their_flags(repo, their_head, [p for p in their_changed if is_note_path(p)])
    merged_flags = set()
    for path in set(mine_flags) | set(their_flags):
        data = store.file_in(tree, path)
        blob = blob_hash(data) if data is not None else None
        if blob is not None and ((path in mine_flags and blob == store.blob_id(path, head))
                                 or (path in their_flags and blob == store.blob_id(path, their_head))):
            merged_flags.add(path)
    views = Views(store, repo.views.entries, repo.config, flags=lambda rev: merged_flags)
    changes.update(changed(store, tree, views.expected(tree)))
    extra = tuple((CONFLICT_TRAILER, c.trailer()) for c in conflicts)
    message = (f"sync: merge {label}\n\n"
               + Trailers("merge", user, "system:sync", extra=extra).render())
    store.commit(changes, message, actor=user, when=when, merge_parent=their_head, expect_tip=head)
    return conflicts


def _their_flags(repo, their_head: str, paths: list[str]) -> dict:
    """Trust's flags at the remote's tip, for the notes its side changed since the merge base:
    a version the other side did not change is the base's, which this side's flags judge
    already. Asked of a verifier of its own: the repository's follows this clone's tip (moved
    onto the other side's history, it would judge every note there anew and then every note
    of the merge)."""
    from ..policy.verify import Verifier

    return Verifier(repo).flags_of(paths, their_head) if paths else {}


def _render_if_stale(repo, user: str, when) -> list[str]:
    from ..storage.trailers import Trailers

    changes = repo.fresh_view_changes()
    if not changes:
        return []
    message = "render MEMORY views after sync\n\n" + Trailers("render", user, "system:sync").render()
    repo.store.commit(changes, message, actor=user, when=when)
    return sorted(changes)


def open_conflicts(repo, *, as_user: str) -> list[dict]:
    """Pairs resolved by sync that nobody has looked at since: the live version is still the
    one the merge chose. Only pairs in roots the user may read."""
    from ..model.layout import parse_path

    user = repo.access.check_user(as_user)
    store = repo.store
    out = []
    seen = set()
    for sha, message in sync_ops.messages_with(store, f"{CONFLICT_TRAILER}:"):
        for line in message.splitlines():
            if not line.startswith(CONFLICT_TRAILER + ": "):
                continue
            parts = line[len(CONFLICT_TRAILER) + 2:].split(" ")
            path, live, superseded = parts[0], parts[1].removeprefix("live="), parts[2].removeprefix("superseded=")
            if path in seen:
                continue
            seen.add(path)
            try:
                root = parse_path(path).root
            except BadInput:
                continue
            if not repo.access.may_read_root(user, root) or store.blob_id(path) != live:
                continue
            out.append({"path": path, "live": live, "superseded": superseded, "merge": sha,
                        "rule": " ".join(parts[3:]).strip("()")})
    return out
