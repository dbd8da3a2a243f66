"""What `mdmem init` lays down, read from the installed ``memory_repo_template/``."""
from __future__ import annotations

from importlib import resources


def read_template(name: str) -> str:
    return resources.files("mdmem_template").joinpath(name).read_text(encoding="utf-8")
