"""A git host's access rules, generated from what each scope repository's ``mdmem.toml`` declares,
so the host (which enforces who may clone) and the declarations (which mdmem reads) cannot drift.

One :class:`Grant` per scope root: its repository's name on the host, who reads and pushes it
(the root's readers, policy/access.py) and who may rewrite its history (erasure). Rendered as
gitolite.conf repo blocks, or as the equivalent settings of Forgejo/Gitea, GitLab and GitHub
as text a host's admin follows (those hosts are configured through their web UI or API).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..config import Config
from ..errors import BadInput
from ..model.layout import check_name
from ..policy.access import Access

FORMATS = ("gitolite", "forgejo", "gitlab", "github")
REVIEW_REFS = "refs/heads/review/"


@dataclass(frozen=True)
class Grant:
    """Who may do what with one scope repository on the host."""
    root: str                        # team/<team> or private/<user>
    name: str                        # the repository's name on the host (prefix + root)
    readwrite: tuple[str, ...]       # read, fast-forward push, create/delete review/<id> holds
    rewrite: tuple[str, ...]         # may also force-push (an erasure rewrites history)

    @property
    def private(self) -> bool:
        return self.root.startswith("private/")

    @property
    def readers(self) -> tuple[str, ...]:
        """Everyone the host lets clone it."""
        return tuple(sorted(set(self.readwrite) | set(self.rewrite)))

    def to_dict(self) -> dict[str, object]:
        return {"root": self.root, "name": self.name, "private": self.private, "readwrite": list(self.readwrite),
                "rewrite": list(self.rewrite), "readers": list(self.readers)}


def check_root(root: str, where: str = "root") -> str:
    scope, _, name = root.partition("/")
    if scope not in ("team", "private") or not name or "/" in name:
        raise BadInput(f"{where}: {root!r} is not a scope root; give team/<team> or private/<user>")
    check_name(name, where)
    return root


def check_prefix(prefix: str) -> str:
    """A host path prefix (``memory/`` -> ``memory/team/payments``): names joined by ``/``."""
    prefix = prefix.strip("/")
    for part in prefix.split("/") if prefix else []:
        check_name(part, "--prefix")
    return prefix + "/" if prefix else ""


def roots_declared(config: Config) -> list[str]:
    """The scope roots a repository's mdmem.toml governs: a scope repository's one root (``[scope]
    root``); in one repository of many roots, every declared team's root and every declared user's
    private root."""
    if config.scope_root:
        return [config.scope_root]
    access = Access.of(config)
    return sorted({f"team/{t}" for t in config.teams} | {f"private/{u}" for u in access.users})


def grant(root: str, config: Config, *, prefix: str = "") -> Grant:
    """The grant of one root from the mdmem.toml that governs it."""
    check_root(root)
    if config.scope_root and config.scope_root != root:
        raise BadInput(f"{root}: the repository given for it holds {config.scope_root} ([scope] root in its "
                       "mdmem.toml); give each root its own repository")
    access = Access.of(config)
    if root.startswith("team/") and root.partition("/")[2] not in config.teams:
        known = ", ".join(sorted(config.teams)) or "none"
        raise BadInput(f"{root}: its mdmem.toml declares no team {root.partition('/')[2]!r} (declared: {known}); "
                       "declare its members under [teams]")
    readers = access.readers_of_root(root)
    writers = access.writers_of_root(root)
    rewrite = access.rewriters_of_root(root)
    # A reader who may not write still needs to fetch; gitolite's R has no use here (every
    # reader of a root writes it today), so anyone who reads gets RW.
    return Grant(root=root, name=check_prefix(prefix) + root, readwrite=tuple(sorted(readers | writers)),
                 rewrite=tuple(sorted(rewrite)))


def grants(sources: Iterable[tuple[str, Config]], *, prefix: str = "") -> list[Grant]:
    """One grant per root; a root given twice (two clones of it) must declare the same access."""
    out: dict[str, Grant] = {}
    for root, config in sources:
        g = grant(root, config, prefix=prefix)
        if root in out and out[root] != g:
            raise BadInput(f"{root}: two repositories declare different access for it "
                           f"({', '.join(out[root].readers)} vs {', '.join(g.readers)}); keep one")
        out[root] = g
    return [out[r] for r in sorted(out)]


def render(grants_: list[Grant], fmt: str, *, org: str = "memory") -> str:
    if fmt not in FORMATS:
        raise BadInput(f"host rules: unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return {"gitolite": gitolite_conf, "forgejo": forgejo_text, "gitlab": gitlab_text,
            "github": github_text}[fmt](grants_, org=org)


def gitolite_conf(grants_: list[Grant], *, org: str = "") -> str:
    """gitolite.conf repo blocks. Rules match in order: holds (review/<id>) may be created and
    deleted by every reader; history may be rewritten (RW+) only by its rewriters; everyone
    else who reads pushes fast-forward only (RW). Anyone unnamed has no access, not even read."""
    lines = ["# Generated by `mdmem host rules --gitolite` from each scope repository's mdmem.toml.",
             "# Change who may read a memory there (members, erasers), then regenerate; not here.", ""]
    for g in grants_:
        if not g.readers:
            lines += [f"# {g.name}: nobody is declared, so no block (the host refuses everyone)", ""]
            continue
        lines.append(f"repo {g.name}")
        if g.readwrite:
            lines.append(f"    RW+ {REVIEW_REFS} = {' '.join(g.readwrite)}")
        if g.rewrite:
            lines.append(f"    RW+ = {' '.join(g.rewrite)}")
        if g.readwrite:
            lines.append(f"    RW = {' '.join(g.readwrite)}")
        lines.append("")
    return "\n".join(lines)


def _repo_name(g: Grant) -> str:
    """Forgejo, GitLab and GitHub repository names have no ``/`` and live in an organization (the
    namespace a gitolite prefix gives): team/payments -> team-payments."""
    return g.root.replace("/", "-")


def forgejo_text(grants_: list[Grant], *, org: str) -> str:
    out = [f"Forgejo / Gitea: organization `{org}`, generated by `mdmem host rules --forgejo`.",
           "Organization settings: repositories private; no team has access to all repositories",
           "(\"include all repositories\" off); site and organization owners can read every repository,",
           "so keep that group to the people who may read everything.", ""]
    for g in grants_:
        repo = _repo_name(g)
        out.append(f"Repository `{org}/{repo}` (private), scope root {g.root}:")
        if g.private:
            out.append(f"  - no team; collaborator {', '.join(g.readers) or '(nobody)'} with Write")
        else:
            out.append(f"  - team `{repo}`: members {', '.join(g.readwrite) or '(nobody)'}; "
                       f"permission Write on Code; repositories: {repo} only")
            if g.rewrite:
                out.append(f"  - team `{repo}-erasers`: members {', '.join(g.rewrite)}; permission Write; "
                           f"repositories: {repo} only")
        out.append("  - branch protection for `main`: enable push; disable force push except for the "
                   f"allowlist {', '.join(g.rewrite) or '(nobody)'}; `review/*` unprotected (holds are "
                   "created and deleted by sync)")
        out.append("")
    return "\n".join(out)


def gitlab_text(grants_: list[Grant], *, org: str) -> str:
    out = [f"GitLab: group `{org}`, generated by `mdmem host rules --gitlab`.",
           "Group visibility private; group members with Reporter or higher can read every project in",
           "the group, so add people to each project, not to the group.", ""]
    for g in grants_:
        repo = _repo_name(g)
        eraser = set(g.rewrite)
        out.append(f"Project `{org}/{repo}` (private), scope root {g.root}:")
        for user in g.readers:
            role = "Maintainer" if user in eraser else "Developer"
            out.append(f"  - member {user}: {role}")
        out.append("  - protected branch `main`: allowed to merge and push: Developers + Maintainers; "
                   "allowed to force push: off")
        if g.rewrite:
            out.append(f"  - an erasure: a Maintainer ({', '.join(g.rewrite)}) turns \"allowed to force push\" on "
                       "for the push and off after (GitLab cannot limit force pushes to some of the pushers)")
        out.append("")
    return "\n".join(out)


def github_text(grants_: list[Grant], *, org: str) -> str:
    out = [f"GitHub: organization `{org}`, generated by `mdmem host rules --github`.",
           "Organization settings: base permission \"No permission\"; organization owners can read",
           "every repository, so keep that group to the people who may read everything.", ""]
    for g in grants_:
        repo = _repo_name(g)
        out.append(f"Repository `{org}/{repo}` (private), scope root {g.root}:")
        if g.private:
            out.append(f"  - direct access: {', '.join(g.readers) or '(nobody)'} with role Write")
        else:
            out.append(f"  - team `{repo}`: members {', '.join(g.readwrite) or '(nobody)'}; role Write on {repo}")
            if g.rewrite:
                out.append(f"  - direct access: {', '.join(g.rewrite)} with role Maintain (erasers)")
        bypass = "repository role Maintain" if g.rewrite and not g.private else "repository role Write"
        out.append(f"  - ruleset on `main`: block force pushes, bypass list: {bypass}; `review/*` not covered")
        out.append("")
    return "\n".join(out)
