"""A gitolite host: its address, what a key may read there (``ssh HOST info``), and applying
generated rules (a file of repo blocks in the gitolite-admin repository, committed and pushed,
which also creates the repositories it names)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput
from ..model.layout import check_name
from ..storage import host_git
from .rules import Grant, check_prefix, gitolite_conf

INCLUDE = 'include "mdmem/*.conf"'


@dataclass(frozen=True)
class Address:
    """``ssh://user@host[:port]`` (or ``user@host``): where a host's ssh listens, as whom."""
    target: str          # user@host
    port: int | None

    @classmethod
    def parse(cls, text: str) -> "Address":
        m = re.fullmatch(r"(?:ssh://)?([A-Za-z0-9._-]+@[A-Za-z0-9.\-\[\]:]+?)(?::(\d{1,5}))?/?", text.strip())
        if not m:
            raise BadInput(f"host: {text!r} is not an ssh address; give ssh://USER@HOST[:PORT] "
                           "(gitolite's user, often git@host)")
        return cls(m.group(1), int(m.group(2)) if m.group(2) else None)

    def url(self, name: str) -> str:
        port = f":{self.port}" if self.port else ""
        return f"ssh://{self.target}{port}/{name}"

    def __str__(self) -> str:
        return self.url("").rstrip("/")


@dataclass(frozen=True)
class HostRepo:
    name: str
    read: bool
    write: bool

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "read": self.read, "write": self.write}


def parse_info(text: str) -> list[HostRepo]:
    """gitolite's ``info``: a greeting, a blank line, then `` R W<TAB>name`` per repository."""
    out = []
    for line in text.splitlines():
        perms, tab, name = line.partition("\t")
        if not tab or not name.strip() or not re.fullmatch(r"[ RWC]*", perms):
            continue
        name = name.strip()
        if re.search(r"[\\^$*?\[\](){}|]", name):   # a wild-repo pattern, not a repository
            continue
        out.append(HostRepo(name, "R" in perms, "W" in perms))
    return out


def readable(address: Address, *, ssh_command: str | None) -> list[HostRepo]:
    """Every repository the caller's key may read on the host (the host answers, nobody else)."""
    return [r for r in parse_info(host_git.ssh_call(address.target, address.port, ["info"],
                                                    ssh_command=ssh_command)) if r.read]


def scope_repos(repos: list[HostRepo], *, prefix: str = "") -> list[tuple[str, HostRepo]]:
    """The (root, repository) pairs among ``repos`` that hold a scope root under ``prefix``."""
    prefix = check_prefix(prefix)
    out = []
    for r in repos:
        if not r.name.startswith(prefix):
            continue
        parts = r.name[len(prefix):].split("/")
        if len(parts) == 2 and parts[0] in ("team", "private"):
            try:
                check_name(parts[1], "root")
            except BadInput:
                continue
            out.append(("/".join(parts), r))
    return sorted(out, key=lambda p: p[0])


def rules_file(name: str) -> str:
    """The file in gitolite-admin holding one repository's block: conf/mdmem/<name, / as -->.conf."""
    return f"conf/mdmem/{name.replace('/', '--')}.conf"


def apply(admin_url: str, grants: list[Grant], *, identity: tuple[str, str], ssh_command: str | None) -> str | None:
    """Write each repository's block as its own file under ``conf/mdmem/`` in gitolite-admin (the
    main gitolite.conf includes that folder once), commit and push: gitolite applies them and
    creates any new repository. One file per repository, so rules regenerated from some scope
    repositories (an admin's workspace) leave the others' as they were. Returns the admin commit,
    or None when the rules were already there."""

    def edit(work: Path) -> str | None:
        main = work / "conf" / "gitolite.conf"
        if not main.is_file():
            raise BadInput(f"host: {admin_url} has no conf/gitolite.conf; is it a gitolite-admin repository?")
        text = main.read_text(encoding="utf-8")
        changed = []
        if INCLUDE not in text.splitlines():
            main.write_text(text.rstrip("\n") + f"\n\n{INCLUDE}\n", encoding="utf-8")
            changed.append("include")
        for g in grants:
            target = work / rules_file(g.name)
            target.parent.mkdir(exist_ok=True)
            conf = gitolite_conf([g])
            if not target.exists() or target.read_text(encoding="utf-8") != conf:
                target.write_text(conf, encoding="utf-8")
                changed.append(g.name)
        return f"mdmem host rules: {', '.join(changed)}" if changed else None

    return host_git.edit_and_push(admin_url, edit, identity=identity, ssh_command=ssh_command)
