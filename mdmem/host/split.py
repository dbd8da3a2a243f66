"""``mdmem split``: one repository holding every scope root -> one scope repository per root, each
with its root's whole history and nothing of any other root's.

Each scope repository is an ordinary mdmem repository holding one root, its notes at the paths
they have today (``team/payments/...``). Its history is the source's, rewritten by git-filter-repo
to the root's own files plus what governs it: ``mdmem.toml`` reduced in every version to that
root (``[scope] root``; its team and members, or its owner; the roles and every other section as
they were, so each version stays trusted by the same admins), the erasure receipts (ids and
counts, never content; every repository keeps them all so its guard refuses erased history;
``reduce_receipts``) and the repository's own files. Tags are not carried: a tag names a point
of the whole memory. The top-level ``MEMORY.md`` (it lists every root) is dropped from history
and rendered afresh. Commits that touched only other roots vanish; the holds (``review/<id>``) of the root are
kept, every other hold dropped. The repository is fetched out of the rewritten scratch copy, so it
holds only objects its own history reaches.
"""
from __future__ import annotations

import json
import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import CONFIG_NAME, Config
from ..errors import BadInput, GitFailed, Refused
from ..model.layout import ERASURE_LOG
from ..storage import history_ops as ops
from ..storage import host_git
from .rules import Grant, check_root, grant, roots_declared

INSTRUCTIONS = "mdmem-split.json"    # in the scratch copy's .git: what the filter process does
KEEP_TOP = (CONFIG_NAME, ".gitattributes", ".gitignore", "README.md")
HOLD_PREFIX = "refs/heads/review/"

ProgressCallback = Callable[[int, int, str], None]


@dataclass
class SplitResult:
    root: str
    path: Path
    grant: Grant
    head: str
    commits: int
    holds: list[str] = field(default_factory=list)
    pushed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "path": str(self.path), "head": self.head, "commits": self.commits,
                "holds": self.holds, "readers": list(self.grant.readers), "host_name": self.grant.name,
                "pushed": self.pushed}


def reduce_config(data: bytes, root: str) -> bytes:
    """One version of ``mdmem.toml`` reduced to what governs ``root``: its own team (or none, for a
    private root), the people tables of its readers and of the config's admins (so commits keep
    mapping to the same people), every other section unchanged. A version that does not parse
    is kept as it is: it was never trusted, and is not made so."""
    try:
        config = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return data
    scope, _, name = root.partition("/")
    teams = config.get("teams") if isinstance(config.get("teams"), dict) else {}
    roles = config.get("roles") if isinstance(config.get("roles"), dict) else {}
    members = set(teams.get(name) or []) if scope == "team" else {name}
    erasers = set(roles.get("erasers") or [])
    out = dict(config)
    out["teams"] = {name: teams[name]} if scope == "team" and name in teams else {}
    people = config.get("people")
    if isinstance(people, dict):
        out["people"] = {u: v for u, v in people.items() if u in members | erasers}
        if scope == "private" and name not in out["people"]:
            out["people"][name] = {}
    elif scope == "private":
        out["people"] = {name: {}}
    out["scope"] = {**(config.get("scope") if isinstance(config.get("scope"), dict) else {}), "root": root}
    head = ("# mdmem.toml of this scope repository (made by `mdmem split`): who may see and write\n"
            f"# {root}, and how its memory behaves. Committed, so changes are reviewed like code.\n\n")
    return (head + dump_toml(out)).encode("utf-8")


def dump_toml(data: dict[str, Any]) -> str:
    """TOML for mdmem.toml's shapes: tables of scalars, lists of scalars and nested tables."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise BadInput(f"{CONFIG_NAME}: a value of type {type(v).__name__} cannot be written back")

    def key(k: str) -> str:
        return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)

    def table(path: list[str], d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        if path and (scalars or not tables):
            lines.append(f"[{'.'.join(key(p) for p in path)}]")
        for k, v in scalars.items():
            lines.append(f"{key(k)} = {value(v)}")
        if path and (scalars or not tables):
            lines.append("")
        for k, v in tables.items():
            table([*path, k], v)

    table([], data)
    return "\n".join(lines).rstrip("\n") + "\n"


def plan_roots(source: Path, config: Config, roots: list[str] | None, as_user: str) -> list[str]:
    """The roots to split: those asked for (default: every declared root ``as_user`` may split).
    A config admin (an eraser) splits any root; anyone else only the roots they may read, as
    their copy of this repository holds those anyway."""
    from ..policy.access import Access

    access = Access.of(config)
    access.check_user(as_user)
    declared = roots_declared(config)
    admin = as_user in config.erasers or not config.erasers and not access.users
    mine = [r for r in declared if admin or access.may_read_root(as_user, r)]
    if not roots:
        return mine
    for r in roots:
        check_root(r, "--root")
        if r not in declared:
            raise BadInput(f"--root {r}: {source}/{CONFIG_NAME} does not declare it (declared: {', '.join(declared)})")
        if r not in mine:
            raise Refused(f"split: {as_user} may split only the roots they may read ({', '.join(mine)}); "
                          f"{r} needs a config admin ([roles] erasers)")
    return sorted(set(roots))


def hold_roots(source: Path) -> dict[str, str]:
    """Each hold branch -> the scope root of the note it holds (the one path its commit adds)."""
    out = {}
    for ref, oid, _kind in ops.list_refs(source, HOLD_PREFIX):
        paths = host_git.changed_paths(source, oid)
        roots = {"/".join(p.split("/")[:2]) for p in paths if p.startswith(("team/", "private/"))}
        if len(roots) == 1:
            out[ref] = roots.pop()
    return out


def split(source: Path, dest: Path, *, as_user: str, roots: list[str] | None = None, prefix: str = "",
          config: Config, progress: ProgressCallback | None = None) -> list[SplitResult]:
    """Write one scope repository per root under ``dest`` (``dest/team/payments``...)."""
    wanted = plan_roots(source, config, roots, as_user)
    dest = Path(dest)
    taken = [r for r in wanted if (dest / r).exists() and any((dest / r).iterdir())]
    if taken:
        raise BadInput(f"split: {', '.join(str(dest / r) for r in taken)} already exist and are not empty; "
                       "give an empty --to folder")
    holds = hold_roots(source)
    results = []
    for i, root in enumerate(wanted):
        if progress:
            progress(i, len(wanted), root)
        results.append(split_one(source, dest, root, as_user=as_user, config=config, prefix=prefix, holds=holds))
    if progress:
        progress(len(wanted), len(wanted), "done")
    return results


def split_one(source: Path, dest: Path, root: str, *, as_user: str, config: Config, prefix: str,
              holds: dict[str, str]) -> SplitResult:
    scratch = dest / ".mdmem-split" / root.replace("/", "-")
    final = dest / root
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        host_git.copy_branches(source, scratch)
        signers = config.trust.allowed_signers
        (ops.git_dir(scratch) / INSTRUCTIONS).write_text(json.dumps({"root": root, "signers": signers}))
        refs = [ref for ref, _oid, _kind in ops.list_refs(scratch, "refs/")]
        ops.filter_repo_in_own_process(scratch, "mdmem.host.split")
        kept = []
        for ref in refs:
            if ref.startswith("refs/tags/"):
                # A tag names a point of the whole memory (its name and message may say another
                # root's notes); moved onto this root's commits it reached every repository.
                ops.delete_ref(scratch, ref)
            elif ref.startswith(HOLD_PREFIX):
                if holds.get(ref) == root:
                    kept.append(ref[len("refs/heads/"):])
                else:
                    ops.delete_ref(scratch, ref)
        final.mkdir(parents=True, exist_ok=True)
        host_git.copy_branches(scratch, final, checkout="main")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        parent = scratch.parent
        if parent.exists() and not any(parent.iterdir()):
            parent.rmdir()
    _render(final, as_user)
    return SplitResult(root=root, path=final, grant=grant(root, Config.load(final), prefix=prefix),
                       head=host_git.head(final), commits=host_git.count_commits(final), holds=sorted(kept))


def _render(final: Path, as_user: str) -> None:
    """The views of the new repository (its top-level MEMORY.md now names this root alone)."""
    from ..repo import MemoryRepo

    with MemoryRepo.open(final, embedder="none") as repo:
        repo.render(as_user=as_user)


def push(results: list[SplitResult], address: Any, *, ssh_command: str | None) -> list[str]:
    """Push each scope repository (every branch: main and its holds) to its repository on the
    host and make that its ``origin``. A repository the host refuses is named in the answer and
    does not stop the others (each owner pushes their own: ``mdmem split --root private/<me>``)."""
    failed = []
    for r in results:
        url = address.url(r.grant.name)
        host_git.set_remote(r.path, "origin", url)
        try:
            host_git.push_all(r.path, url, ssh_command=ssh_command)
        except GitFailed as exc:
            failed.append(f"{r.root}: {exc}")
            continue
        r.pushed = url
    return failed


class _Filter:
    """The file callback of the rewrite: the root's files and what governs it, nothing else."""

    def __init__(self, root: str, signers: str):
        self.root = root.encode() + b"/"
        self.scope_root = root
        self.keep = {name.encode() for name in (*KEEP_TOP, signers)}
        self.audit = ERASURE_LOG.rsplit("/", 1)[0].encode() + b"/"
        self.cache: dict[tuple[bytes, bytes], bytes] = {}

    def file_info(self, filename: bytes, mode: bytes, blob_id: bytes, value: Any) -> tuple:
        if filename.startswith((self.root, self.audit)) or filename in self.keep:
            reduce = {CONFIG_NAME.encode(): reduce_config, ERASURE_LOG.encode(): reduce_receipts}.get(filename)
            if reduce is not None:
                if (filename, blob_id) not in self.cache:
                    data = value.get_contents_by_identifier(blob_id)
                    new = reduce(data, self.scope_root)
                    self.cache[filename, blob_id] = blob_id if new == data else value.insert_file_with_contents(new)
                return (filename, mode, self.cache[filename, blob_id])
            return (filename, mode, blob_id)
        return (None, mode, blob_id)


NOT_CARRIED = "not carried into scope repositories (the source repository's receipt has it)"


def reduce_receipts(data: bytes, root: str) -> bytes:
    """The audit log for ``root``'s repository: every receipt (its guard refuses any erased
    history; it needs their ids), naming only this root's notes to review and neither the
    subject nor the person erased. A receipt names the notes still mentioning an erased person
    by path (a path says a subject and a key), and its targets a subject or a person that may
    be another root's: kept whole, every repository's readers learned them. A line that does
    not parse is kept as it was."""
    out: list[bytes] = []
    for line in data.splitlines(keepends=True):
        try:
            receipt = json.loads(line)
            mentions = receipt.get("mentions_for_review", [])
            targets = receipt.get("targets", {})
            if not isinstance(mentions, list) or not isinstance(targets, dict):
                raise TypeError
        except (ValueError, AttributeError, TypeError):
            out.append(line)
            continue
        kept = [p for p in mentions if str(p).startswith(root + "/")]
        named = {k: NOT_CARRIED for k in ("subject", "owner") if k in targets}
        if kept == mentions and not named:
            out.append(line)
            continue
        receipt["mentions_for_review"] = kept
        receipt["targets"] = {**targets, **named}
        out.append(json.dumps(receipt, sort_keys=True).encode() + b"\n")
    return b"".join(out)


def main(argv: list[str]) -> int:
    scratch = Path(argv[0])
    spec = json.loads((ops.git_dir(scratch) / INSTRUCTIONS).read_text())
    (ops.git_dir(scratch) / INSTRUCTIONS).unlink()
    refs = [ref for ref, _oid, _kind in ops.list_refs(scratch, "refs/")]
    ops.filter_repo(scratch, refs, file_info=_Filter(spec["root"], spec["signers"]).file_info)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
