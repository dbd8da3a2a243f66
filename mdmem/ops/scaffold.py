"""`mdmem new`: a scaffold note with every required field, for a person to finish in an editor."""
from __future__ import annotations


from ..errors import BadInput, Conflict
from ..model import layout
from ..model.clock import resolve_now
from ..model.note import Note, new_id
from ..policy.access import require_user

PLACEHOLDER = "Write the note here: one fact, decision, procedure or event, in a sentence or two."


def scaffold(repo, *, as_user: str, kind: str, subject: str, key: str | None = None, scope: str = "private",
             team: str | None = None, tags: list[str] | None = None, now=None) -> tuple[str, str]:
    """(path, text) of a new note's scaffold: where it must live and every field filled in
    (valid_from now, a working note's expiry from its TTL, ``tags`` to fill), its body a
    placeholder. Refuses a path that exists and a root the user may not write."""
    user = require_user(as_user)
    contract = repo.contracts.resolve(kind)
    layout.check_subject(subject)
    if scope not in ("private", "team"):
        raise BadInput(f"--scope: {scope!r}; private or team")
    if scope == "team" and not team:
        raise BadInput("--team: a team note names its team (--scope team --team payments)")
    if contract.keyed and not key:
        raise BadInput(f"--key: kind {contract.name} is keyed; give a key like deploy.window")
    when = resolve_now(now)
    root = layout.scope_root(scope, team=team, owner=user)
    repo.access.check_write(user, root)
    if contract.keyed:
        path = layout.keyed_path(root, subject, contract.name, key)
    else:
        slug = layout.check_key(key) if key else f"{layout.slugify(subject)}-{new_id()[-6:].lower()}"
        path = layout.episode_path(root, subject, when, slug)
    if (repo.root / path).exists():
        raise Conflict(f"{path}: exists already; open it in your editor (or `mdmem show {path}`)")
    ttl = contract.default_ttl
    note = Note(id=new_id(), kind=contract.name, subject=subject, key=key, scope=scope,
                team=team if scope == "team" else None, owner=user, source="user", valid_from=when,
                expires_at=(when + ttl) if ttl else None, text=PLACEHOLDER, extra={"tags": list(tags or [])})
    return path, note.dumps()


def unfinished(text: str) -> bool:
    """The scaffold's body was left as it was."""
    return PLACEHOLDER in text

