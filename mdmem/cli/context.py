"""What every command shares: identity, the repo, output as text or JSON, exit codes.

The environment is read here (and in mcp/, which gets its settings from here) and nowhere
else: MDMEM_USER, MDMEM_NOW, MDMEM_REPO, MDMEM_EMBEDDER and MDMEM_FUSION become
arguments of the library. A call the daemon serves (cli/daemon.py) brings its own
environment and folder: ``Ctx.env`` and ``Ctx.cwd`` are the caller's, never the daemon's."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import UserConfig
from ..errors import MdmemError
from ..policy.access import require_user
from ..repo import MemoryRepo
from ..results import ProgressCallback


def user_config_path(env: Mapping[str, str] = os.environ) -> Path:
    explicit = env.get("MDMEM_CONFIG")
    if explicit:
        return Path(explicit)
    home = env.get("HOME") or str(Path.home())
    base = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return Path(base) / "mdmem" / "config.toml"


# Opens a memory repo the way a command would: (folder or None to find it from cwd, cwd,
# MemoryRepo keyword arguments) -> the repo and whether the command closes it. The daemon's
# opener hands out repos it keeps open between calls.
Opener = Callable[[str | None, str, dict[str, Any]], tuple[MemoryRepo, bool]]


def open_repo(path: str | None, cwd: str, settings: dict[str, Any]) -> tuple[MemoryRepo, bool]:
    """The memory repo named (or found from ``cwd``), or the workspace it is in: a folder with
    a workspace file at or above it, or one of a workspace's own clones (mdmem/workspace/)."""
    from ..workspace import Workspace, locate

    where = os.path.join(cwd, path) if path else cwd
    workspace = locate(where)
    if workspace is not None:
        return Workspace.open(workspace, **settings), True  # type: ignore[return-value]
    if path:
        return MemoryRepo.open(where, **settings), True
    return MemoryRepo.find(cwd, **settings), True


def is_workspace(repo: object) -> bool:
    return bool(getattr(repo, "is_workspace", False))


def add_common(parser: argparse.ArgumentParser, *, identity: bool = True, repo: bool = True) -> None:
    if identity:
        parser.add_argument("--as", dest="as_user", metavar="USER",
                            help="who is acting (or MDMEM_USER); required")
    if repo:
        parser.add_argument("--repo", metavar="PATH", help="the memory repo (or MDMEM_REPO; else the enclosing one)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts and agents")
    parser.add_argument("--now", metavar="TIME", help="the time to act at (or MDMEM_NOW), for imports and replays")


def add_note_selector(parser: argparse.ArgumentParser, *, path: bool = True, key: bool = True,
                      required: bool = False) -> None:
    """How a command names one note (a path, or subject + kind + key) or one kind folder."""
    if path:
        parser.add_argument("path", nargs="?", help="the note's path in the repo")
    parser.add_argument("--subject", required=required, help="like service:billing or user:alice")
    parser.add_argument("--kind", required=required)
    if key:
        parser.add_argument("--key")
    parser.add_argument("--scope", choices=["private", "team"])
    parser.add_argument("--team")


def selector(ctx) -> dict:
    """The selector arguments as keyword arguments for MemoryRepo (the path as the repo names it)."""
    names = ("path", "subject", "kind", "key", "scope", "team")
    out = {n: getattr(ctx.args, n) for n in names if hasattr(ctx.args, n)}
    if out.get("path"):
        out["path"] = ctx.note_path(out["path"])
    return out


class RichProgress:
    """Renders the library's progress callbacks (done, total, what) as a rich bar on stderr,
    started on the first report and stopped by :meth:`stop` (the CLI does it at the end)."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}

    def __call__(self, done: int, total: int, what: str) -> None:
        if not sys.stderr.isatty():
            # Not a terminal (a log, an agent's pipe): one line as each stage starts, no bar.
            if what not in self._tasks:
                self._tasks[what] = None
                print(f"mdmem: {what}: {total} to do", file=sys.stderr, flush=True)
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(transient=True, console=Console(file=sys.__stderr__))
            self._bar.start()
        if what not in self._tasks:
            self._tasks[what] = self._bar.add_task(what, total=total)
        self._bar.update(self._tasks[what], completed=done, total=total)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@dataclass
class Ctx:
    args: argparse.Namespace
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    cwd: str = field(default_factory=os.getcwd)
    opener: Opener = open_repo
    _repo: MemoryRepo | None = None
    _owns_repo: bool = True
    _progress: RichProgress | None = None

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def user(self) -> str:
        """``--as`` when given, even empty (``--as ''`` is refused, never replaced by MDMEM_USER)."""
        explicit = getattr(self.args, "as_user", None)
        return require_user(explicit if explicit is not None else self.env.get("MDMEM_USER"))

    @property
    def now(self) -> str | None:
        return getattr(self.args, "now", None) or self.env.get("MDMEM_NOW") or None

    def settings(self) -> dict[str, str | None]:
        """What the environment overrides in mdmem.toml, as MemoryRepo keyword arguments."""
        return {"embedder": self.env.get("MDMEM_EMBEDDER") or None,
                "fusion": self.env.get("MDMEM_FUSION") or None}

    def note_path(self, given: str, root: Path | None = None) -> str:
        """A note path as a person types it -- relative to the repo root (as mdmem prints them),
        or with ./, absolute, or relative to the folder they are in (tab completion inside
        team/payments/) -- as the repo-relative path mdmem takes. A path outside the repo is
        passed on unchanged: the visibility check answers it like any path it may not see."""
        if not given.startswith(("./", "../", "/")) and given.split("/", 1)[0] in ("team", "private"):
            return given
        full = os.path.normpath(os.path.join(self.cwd, given))
        if root is None and is_workspace(self.repo()):
            found = self.repo().identity_path(full)  # type: ignore[attr-defined]
            return found if found is not None else given
        top = str((root or self.repo().root).resolve())
        if full != top and full.startswith(top + os.sep):
            return Path(os.path.relpath(full, top)).as_posix()
        return given

    def repo(self) -> MemoryRepo:
        """The memory repo this command acts on, opened once and closed when the command ends."""
        if self._repo is None:
            path = getattr(self.args, "repo", None) or self.env.get("MDMEM_REPO")
            # The person's own config says where note text may go and with which secret;
            # a committed mdmem.toml never names the secret that is sent.
            settings = {**self.settings(), "user_config": self.user_config()}
            repo, self._owns_repo = self.opener(path, self.cwd, settings)
            if hasattr(self.args, "as_user") and (self.args.as_user is not None or self.env.get("MDMEM_USER")):
                repo.check_user(self.user)  # an undeclared name is refused before anything runs
            # An index build the command did not ask for (a first recall) shows progress too,
            # on stderr, so it also shows beside --json output.
            if is_workspace(repo):
                repo.set_progress(self._progress_always())  # type: ignore[attr-defined]
            else:
                repo.index.progress = self._progress_always()
            if not getattr(self.args, "skip_hook_check", False):
                # The hooks travel with the repo; a clone gets them enabled by its first mdmem command.
                from ..hooks.install import INSTALLED_NOTICE, ensure
                if is_workspace(repo):
                    mounts = [(r, repo.clone_path(r)) for r in sorted(repo.file.mounts)]  # type: ignore[attr-defined]
                else:
                    mounts = [(None, repo.root)]
                for root, folder in mounts:
                    if root is not None and not (folder / ".git").exists():
                        # A mount whose clone is gone: the others still answer, and the person is told.
                        print(f"mdmem: warning: {root}: its clone {folder} is missing; this command leaves it "
                              "out (`mdmem workspace list` shows the mounts)", file=sys.stderr)
                        continue
                    notice = ensure(folder, sys.executable)
                    if notice:
                        print(notice, file=sys.stderr)
                    if notice == INSTALLED_NOTICE:
                        self._replace_forged_views(repo if root is None else repo.repo_for(root))  # type: ignore[attr-defined]
            self._repo = repo
        return self._repo

    def _replace_forged_views(self, repo: MemoryRepo) -> None:
        """The first mdmem command in a clone (it just installed the hooks) replaces a committed
        view that is not a fresh render of its notes: agents read MEMORY.md first, and a forged
        one pushed with --no-verify would reach them from every fresh clone."""
        user = None
        if hasattr(self.args, "as_user") and (self.args.as_user is not None or self.env.get("MDMEM_USER")):
            user = self.user
        try:
            forged = repo.replace_forged_views(as_user=user, now=self.now)
        except MdmemError as exc:
            print(f"mdmem: could not replace forged MEMORY views: {exc}", file=sys.stderr)
            return
        for view in forged:
            print(f"mdmem: replaced {view['path']}: it differed from a fresh render of its notes (last changed in "
                  f"{view['commit'][:10]} by {view['author']})" + ("" if user else "; commit it with "
                                                                   "`mdmem render --as YOU`"), file=sys.stderr)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._repo is not None and self._owns_repo:
            self._repo.close(leave_housekeeping=True)  # a CLI call returns; git's gc detaches too
        self._repo = None

    def _progress_always(self) -> ProgressCallback:
        if self._progress is None:
            self._progress = RichProgress()
        return self._progress

    def progress(self) -> ProgressCallback | None:
        """The progress callback for long library work (a bar on stderr), None with --json."""
        if self.json:
            return None
        if self._progress is None:
            self._progress = RichProgress()
        return self._progress

    def user_config(self) -> UserConfig:
        """The person's own config file (never the repo's): MDMEM_CONFIG, else
        $XDG_CONFIG_HOME/mdmem/config.toml, else ~/.config/mdmem/config.toml. Secrets it names
        are read from this process's environment."""
        # A relative MDMEM_CONFIG / XDG_CONFIG_HOME is the caller's folder's, not the daemon's.
        cfg = UserConfig.load(Path(self.cwd, user_config_path(self.env)), secret=self.env.get)
        if cfg.signing_key:
            key = cfg.signing_key
            if key == "~" or key.startswith("~/"):  # the caller's home, as their shell would say
                key = (self.env.get("HOME") or str(Path.home())) + key[1:]
            cfg = dataclasses.replace(cfg, signing_key=os.path.expanduser(key))
        return cfg

    def emit(self, data, text: str | None = None) -> None:
        if self.json:
            json.dump(data, sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
        elif text is not None:
            print(text)
