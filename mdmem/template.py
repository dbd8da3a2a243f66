"""What `mdmem init` lays down, read from the installed ``memory_repo_template/``."""
from __future__ import annotations

import pkgutil


def read_template(name: str) -> str:
    # pkgutil.get_data, not importlib.resources: every command compares the installed git hooks
    # with these files, and importlib.resources imports zipfile and its readers on the way
    # (~10-30 ms of a ~450 ms CLI recall); the package's own loader reads the file either way.
    data = pkgutil.get_data("mdmem_template", name)
    if data is None:  # a loader that cannot read data files
        raise FileNotFoundError(f"mdmem_template/{name}")
    # Newlines as text mode gave them: a CRLF checkout of mdmem's source (core.autocrlf) must
    # not install a `#!/bin/sh\r` hook.
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
