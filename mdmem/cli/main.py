"""Entry point: parse, dispatch to the command's module, map errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

import traceback

from ..errors import Internal, as_mdmem_error
from .context import Ctx

# One module per command; each defines register(subparsers) and run(ctx) -> int.
COMMANDS = ["init", "remember", "get", "keys", "history", "retire", "sweep", "consolidate",
            "review", "check", "recall", "index", "watch", "render", "startup", "serve", "forget", "prove-gone", "sync", "guard", "verify", "demo"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mdmem", description="Memory for AI agents, as markdown notes in git.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"mdmem.cli.cmd_{name.replace('-', '_')}")
        module.register(sub)
    return parser


def _show_warnings() -> None:
    """The library reports what it repaired on the ``mdmem`` logger: one line each on stderr."""
    logger = logging.getLogger("mdmem")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("mdmem: warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    _show_warnings()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    ctx = Ctx(args)
    try:
        code = args.run(ctx)
    except KeyboardInterrupt:
        return 130
    except Exception as raw:  # the one place the CLI maps errors (errors.py has the tree)
        exc = as_mdmem_error(raw)
        if isinstance(exc, Internal):
            traceback.print_exception(raw, file=sys.stderr)
        if ctx.json:
            json.dump(exc.to_dict(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        print(f"mdmem: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        ctx.close()
    return int(code or 0)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
