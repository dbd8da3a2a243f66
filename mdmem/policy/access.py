"""Identity and the one visibility rule (DESIGN 5).

Every read path (get, keys, history walks, recall's index filter, views, consolidation,
MCP tools) asks this module and nothing else whether a user may see a note. The rule:
a user sees a note when they own its private root or are a member of its team.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..errors import BadInput, NotFound, Refused
from ..model.layout import check_name, check_note_path, parse_path


def require_user(user: str | None, *, env: str = "MDMEM_USER") -> str:
    """The acting user; there is no default identity, and an empty one is refused."""
    if not isinstance(user, str) or not user.strip():
        got = "nobody was named" if user is None else f"got {user!r}"
        raise BadInput(f"identity: every call names who is acting (--as USER or {env}); {got}")
    return check_name(user, "user")


def not_visible(what: str, user: str) -> NotFound:
    """The one answer for "missing" and "not yours to see": they must not be told apart."""
    return NotFound(f"{what}: no such note visible to {user}")


@dataclass(frozen=True)
class Access:
    teams: dict[str, frozenset[str]]
    erasers: frozenset[str] = frozenset()
    people: frozenset[str] = frozenset()  # the names of the [people.<user>] tables
    # A scope repository ([scope] root in mdmem.toml) holds this one root: a write elsewhere is refused.
    scope_root: str | None = None

    @classmethod
    def of(cls, config) -> "Access":
        """The access rules of a (trusted) :class:`mdmem.config.Config`."""
        return cls(config.teams, config.erasers, frozenset(config.people), getattr(config, "scope_root", None))

    @cached_property
    def users(self) -> frozenset[str]:
        """Everyone mdmem.toml declares: team members, erasers and [people] names."""
        return self.people | self.erasers | frozenset().union(*self.teams.values())

    def check_user(self, user: str | None, *, given_by: str = "--as / MDMEM_USER") -> str:
        """The acting user, who must be declared in mdmem.toml: an undeclared name (a typo,
        ``--as mallory``) would otherwise act with a private root of its own and make every
        refusal look like "nothing here". A repo that declares nobody (a fresh single-user
        repo) takes any name. ``given_by``: where the name came from, for the message."""
        user = require_user(user)
        known = self.users
        if known and user not in known:
            shown = ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
            raise BadInput(f"identity: {user} is not a user of this repo (known: {shown}); users are declared "
                           f"in mdmem.toml as [teams] members, [roles] erasers or a [people.{user}] table; "
                           f"check {given_by}")
        return user

    def teams_of(self, user: str) -> list[str]:
        return sorted(t for t, members in self.teams.items() if user in members)

    def readable_roots(self, user: str) -> list[str]:
        """The scope roots whose notes ``user`` may see. Index filters are built from this. In a
        scope repository only its one root: another root's folder there (a note committed past
        the hook and the guard, under someone's address) is read by no one."""
        self.check_user(user)
        return [r for r in [f"private/{user}"] + [f"team/{t}" for t in self.teams_of(user)] if self.holds(r)]

    def holds(self, root: str) -> bool:
        """Whether this repository may hold notes of ``root``: any root, or in a scope repository
        ([scope] root in mdmem.toml) its one root."""
        return self.scope_root is None or root == self.scope_root

    def not_held(self, root: str) -> str:
        """Why a note of ``root`` does not belong here (for a root :meth:`holds` refuses)."""
        return (f"this repository holds only {self.scope_root} ([scope] root in mdmem.toml); {root} lives in its "
                "own repository (mount it in a workspace and write there)")

    def may_read_root(self, user: str, root: str) -> bool:
        return root in self.readable_roots(user)

    def visible_root(self, user: str, path: str) -> str:
        """The scope root of a caller-given note path the user may read, checked before any
        file is touched; a malformed, missing or unreadable path all give the same NotFound."""
        self.check_user(user)
        try:
            root = parse_path(check_note_path(path)).root
        except BadInput:
            raise not_visible(str(path)[:200], user) from None
        if not self.may_read_root(user, root):
            raise not_visible(path, user)
        return root

    def writers_of_root(self, root: str) -> frozenset[str]:
        """Who may write a root: its owner (private) or its team's members."""
        scope, _, name = root.partition("/")
        if scope == "private":
            return frozenset({name}) if name else frozenset()
        if scope == "team":
            return self.teams.get(name, frozenset())
        return frozenset()

    def readers_of_root(self, root: str) -> frozenset[str]:
        scope, _, name = root.partition("/")
        if scope == "private":
            return frozenset({name})
        return self.teams.get(name, frozenset())

    def rewriters_of_root(self, root: str) -> frozenset[str]:
        """Who may rewrite a root's history (erasure) on a git host that enforces reads as well:
        the erasers for a team root; for a private root only its owner. A host cannot grant the
        rewrite of a repository without its read, so an eraser erases someone's private
        repository by having the host delete it, never by holding a clone of it."""
        scope, _, name = root.partition("/")
        if scope == "private":
            return frozenset({name}) if name else frozenset()
        if scope == "team":
            return self.erasers
        return frozenset()

    def check_write(self, user: str, root: str) -> None:
        """Writers: the owner of a private root, members of a team; in a scope repository, only its root."""
        self.check_user(user)
        if not self.holds(root):
            raise Refused(f"scope: {self.not_held(root)}")
        scope, _, name = root.partition("/")
        if scope == "private" and name != user:
            raise Refused(f"scope: {user} may not write to {root}; only {name} writes there")
        if scope == "team":
            if name not in self.teams:
                known = ", ".join(sorted(self.teams)) or "none"
                raise Refused(f"team: no team {name!r} in mdmem.toml; known teams: {known}")
            if user not in self.teams[name]:
                raise Refused(f"team: {user} is not a member of team {name} and may not write to {root}")

    def may_erase_root(self, user: str, root: str) -> bool:
        """Erasure: an eraser may change any scope root; anyone else only their own private root."""
        self.check_user(user)
        return user in self.erasers or root == f"private/{user}"

    def check_forget(self, user: str, roots: list[str]) -> None:
        """Erasure: owners may forget their own private notes; anything else needs the eraser role.
        The refusal names only roots the user may read."""
        self.check_user(user)
        if user in self.erasers:
            return
        others = [r for r in roots if r != f"private/{user}"]
        if others:
            shown = sorted(r for r in others if self.may_read_root(user, r))
            where = f" (it would change {', '.join(shown)})" if shown else ""
            raise Refused(f"forget: {user} may erase only their own private notes{where}; anything else "
                          "needs the eraser role in mdmem.toml ([roles] erasers = [...])")

    def check_prove(self, user: str, *, subject: str | None, owner: str | None) -> None:
        """prove-gone reports where a needle still is: erasers, or the person about themself."""
        self.check_user(user)
        if user in self.erasers or owner == user or subject == f"user:{user}":
            return
        raise Refused(f"prove-gone: {user} may prove erasure of their own data only (--owner {user}); "
                      "anything else needs the eraser role in mdmem.toml")

    def derived_scope_ok(self, derived_root: str, input_roots: list[str]) -> bool:
        """A derived note may be read only by people who may read every input."""
        readers = self.readers_of_root(derived_root)
        return all(readers <= self.readers_of_root(r) for r in input_roots)
