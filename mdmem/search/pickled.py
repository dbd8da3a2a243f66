"""Classes whose instances Whoosh pickles into a user's index, named there by a registry code.

Whoosh pickles the schema into every index's table of contents, and pickle names a class by its
module path: moving or renaming such a class would make every existing index unreadable. Each class
here is registered as a copyreg extension (pickle protocol 2+, which Whoosh uses), so a new index
stores only the code and the code resolves to wherever the class lives now. Never renumber or reuse
a code (tests/test_index_pickles.py pins them). Indexes written before the registry name
``mdmem.search.textfield.FastText`` and ``mdmem.search.doctable.Int64Column`` by path: those
classes stay where they are for them.
"""
from __future__ import annotations

import copyreg

from .doctable import Int64Column
from .textfield import FastText

# copyreg's codes 0x7f000000-0x7fffffff are for private use; "MM" marks mdmem's.
PICKLED: dict[int, type] = {
    0x7F4D4D01: FastText,
    0x7F4D4D02: Int64Column,
}


def register() -> None:
    """Register every code (idempotent; copyreg refuses a code or class mapped twice differently)."""
    for code, cls in PICKLED.items():
        copyreg.add_extension(cls.__module__, cls.__qualname__, code)


register()
