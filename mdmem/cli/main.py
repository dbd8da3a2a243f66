"""Entry point: parse, dispatch to the command's module, map errors to exit codes."""
from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import os
import sys
import traceback
from collections.abc import Mapping

from ..errors import BadInput, Internal, as_mdmem_error
from ..model.text import escape_controls
from .context import Ctx, Opener, open_repo

# One module per command; each defines register(subparsers) and run(ctx) -> int.
COMMANDS = ["init", "remember", "import", "get", "keys", "history", "retire", "sweep", "consolidate",
            "review", "check", "recall", "index", "watch", "render", "startup", "serve", "forget",
            "prove-gone", "sync", "guard", "verify", "demo", "hooks", "new", "ls", "show", "daemon", "token",
            "workspace", "host", "split", "export"]


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser, by name (what the README's claims about options are checked on)."""
    return _build()[1]


# Parsers built in this process, by the command they were built for (None: all), with the
# register functions they were built from: parsing does not change a parser, and the daemon
# answers every call in one process -- building recall's again for each agent's prompt cost
# ~2-5 ms of it. A module loaded again (a new register) is built again.
_BUILT: dict[str | None, tuple[tuple, argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]] = {}


def _build(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser of every command, or of ``only`` that one: a call names its command first,
    and importing and registering the other 26 cost ~15-25 ms of every CLI call."""
    key = only if only in COMMANDS else None
    registers = tuple(importlib.import_module(f"mdmem.cli.cmd_{name.replace('-', '_')}").register
                      for name in ([key] if key else COMMANDS))
    built = _BUILT.get(key)
    if built is None or built[0] != registers:
        parser = argparse.ArgumentParser(prog="mdmem", description="Memory for AI agents, as markdown notes in git.")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for register in registers:
            register(sub)
        built = _BUILT[key] = (registers, parser, dict(sub.choices))
    return built[1], dict(built[2])


class _ToStderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when a record comes: in the daemon each call has its own."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 -- a warning that cannot be shown must not fail the command
            self.handleError(record)


def _show_warnings() -> None:
    """The library reports what it repaired on the ``mdmem`` logger: one line each on stderr."""
    logger = logging.getLogger("mdmem")
    if not logger.handlers:
        handler = _ToStderr()
        handler.setFormatter(logging.Formatter("mdmem: warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


def _check_arguments(argv: list[str]) -> None:
    """Python hands non-UTF-8 bytes on the command line over as lone surrogates; they would
    fail much later (in a commit, in print). Refuse them here, naming the argument."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            raise BadInput(f"argument {i} ({shown}): not valid UTF-8; pass UTF-8 text") from None


class _EscapingStream(io.TextIOBase):
    """Text output with control characters made visible (see model.text)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_controls(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()


def main(argv: list[str] | None = None, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
         opener: Opener | None = None) -> int:
    """Run one command. The daemon (cli/daemon.py) passes the caller's environment and folder
    and an ``opener`` that lends it repos it keeps open; a plain call uses this process's."""
    # stderr carries warnings and problems that name committed files: escaped like stdout (rich's
    # progress bar writes to the real stderr, its own escapes intact).
    # Started with stdout or stderr closed (`mdmem recall ... >&-`): Python has None there; what
    # would be written goes nowhere, as the shell asked.
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 -- for the process's life
    real_stdout, real_stderr = sys.stdout, sys.stderr
    if not isinstance(sys.stderr, _EscapingStream):
        sys.stderr = _EscapingStream(sys.stderr)
    _show_warnings()
    argv = sys.argv[1:] if argv is None else list(argv)
    ctx = None
    try:
        _check_arguments(argv)
        parser = _build(argv[0] if argv else None)[0]
        args = parser.parse_args(argv)
        if not getattr(args, "command", None):
            parser.print_help()
            return 2
        ctx = Ctx(args, env=os.environ if env is None else env, cwd=cwd or _current_folder(),
                  opener=opener or open_repo)
        if not ctx.json and args.command != "serve":  # serve speaks JSON-RPC on stdout
            sys.stdout = _EscapingStream(real_stdout)
        code = args.run(ctx)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`mdmem recall ... | head`): not an error to report.
        _silence_stdout()
        return 141
    except Exception as raw:  # the one place the CLI maps errors (errors.py has the tree)
        exc = as_mdmem_error(raw)
        if isinstance(exc, Internal):
            traceback.print_exception(raw, file=sys.stderr)
        if ctx is not None and ctx.json:
            json.dump(exc.to_dict(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        for line in exc.lines():
            print(f"mdmem: {escape_controls(line, newlines=False)}", file=sys.stderr)
        return exc.exit_code
    finally:
        sys.stdout = real_stdout
        if ctx is not None:
            ctx.close()
        sys.stderr = real_stderr
    return int(code or 0)


def _current_folder() -> str:
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise BadInput("the current folder no longer exists (deleted under the shell); cd to a folder "
                       "that does") from None


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's last flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
