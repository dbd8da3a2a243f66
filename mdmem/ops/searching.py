"""The index as operations: catching it up with the notes (or rebuilding it), and recall with
the index's own recovery (a damaged cache is moved aside and rebuilt) and trust's marks."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import BadInput, MdmemError
from ..model.clock import TimeLike
from ..model.layout import root_of
from ..model.validate import check_unicode
from ..policy.access import require_user
from ..results import IndexReport, ProgressCallback
from .state import RepoState

if TYPE_CHECKING:
    from ..search.recall import Hit


def reindex(repo: RepoState, *, rebuild: bool = False, progress: ProgressCallback | None = None) -> IndexReport:
    """Catch the index up with the notes (or rebuild it from them)."""
    if rebuild:
        report = repo.index.rebuild(progress=progress)
    else:
        report = repo.index.sync(worktree=True, progress=progress)
    return IndexReport(**report.to_dict())


def broken(repo: RepoState, *, as_user: str) -> dict[str, str]:
    """Notes the index keeps out because they are broken, with the reason, in the roots the
    user may read only: the reason quotes field values another user's note must not show."""
    readable = set(repo.access.readable_roots(require_user(as_user)))
    return {p: r for p, r in repo.index.broken().items() if root_of(p) in readable}


MAX_QUERY_CHARS = 4000
# A recall's tags are a filter, each a term the full-text index looks up under the lock every
# recall shares: 80,000 tags in one call (0.8 MB, under the body limit) held it ~4 s.
MAX_TAGS = 32
MAX_TAG_CHARS = 100


def recall(repo: RepoState, query: str, *, as_user: str, k: int = 5, kinds: list[str] | None = None,
           subject: str | None = None, key: str | None = None, at: TimeLike = None, include_history: bool = False,
           now: TimeLike = None, tags: list[str] | None = None) -> list[Hit]:
    """Live notes the user may see that answer ``query``, best first (see :mod:`mdmem.search.recall`).
    ``tags``: only notes whose frontmatter ``tags`` include every one of them."""
    if isinstance(query, str):
        check_unicode(query, "query")
        if len(query) > MAX_QUERY_CHARS:
            # Each word costs the full-text search ~0.7 ms, under the lock every recall shares:
            # a 200,000-word query (one MCP call) stalled the server for minutes.
            raise BadInput(f"query: {len(query):,} characters; a recall query is at most {MAX_QUERY_CHARS:,} "
                           "(the embedder reads its first ~256 tokens anyway): ask with the gist")
    if isinstance(tags, list):
        if len(tags) > MAX_TAGS:
            raise BadInput(f"tags: {len(tags):,} given; a recall filters by at most {MAX_TAGS} tags")
        long = next((t for t in tags if isinstance(t, str) and len(t) > MAX_TAG_CHARS), None)
        if long is not None:
            raise BadInput(f"tags: a tag of {len(long):,} characters; a tag is at most {MAX_TAG_CHARS}")
    args: dict[str, Any] = dict(as_user=as_user, k=k, kinds=kinds, subject=subject, key=key, at=at,
                                include_history=include_history, now=now, tags=tags)
    try:
        hits = repo.recaller(query, **args)
    except MdmemError:
        raise
    except Exception:  # noqa: BLE001 -- an index file that cannot be read, or a passing race
        # Asked once more from the index as it is on disk now before it is called damaged:
        # another process's commit deleted the table of contents just listed, or a note was
        # rewritten while git status hashed it (a healthy index was moved
        # aside and rebuilt from every note, minutes at 100k).
        repo.index.reopen()
        repo.reset_recaller()
        try:
            hits = repo.recaller(query, **args)
        except MdmemError:
            raise
        except Exception as exc:  # noqa: BLE001 -- an index file that cannot be read
            # The index is a cache: a damaged one (truncated table of contents, a missing
            # segment, garbage) is moved aside with one warning and rebuilt, then asked again.
            repo.index.recover(exc)
            repo.reset_recaller()
            hits = repo.recaller(query, **args)
    flags = repo.trust.flags_of({h.path for h in hits if h.current})
    return [replace(h, untrusted=flags[h.path].detail) if h.current and h.path in flags else h for h in hits]
