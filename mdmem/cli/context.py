"""What every command shares: identity, the repo, output as text or JSON, exit codes."""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

from ..policy.access import user_from_env
from ..repo import MemoryRepo


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


def selector(args) -> dict:
    """The selector arguments as keyword arguments for MemoryRepo."""
    names = ("path", "subject", "kind", "key", "scope", "team")
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


@dataclass
class Ctx:
    args: argparse.Namespace

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def user(self) -> str:
        return user_from_env(getattr(self.args, "as_user", None))

    @property
    def now(self):
        return getattr(self.args, "now", None) or os.environ.get("MDMEM_NOW") or None

    def repo(self) -> MemoryRepo:
        path = getattr(self.args, "repo", None) or os.environ.get("MDMEM_REPO")
        return MemoryRepo.open(path) if path else MemoryRepo.find()

    def emit(self, data, text: str | None = None) -> None:
        if self.json:
            json.dump(data, sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
        elif text is not None:
            print(text)
