"""What Whoosh pickles into a user's index names mdmem's classes by registry code, not by module path,
so refactors cannot make existing indexes unreadable; and the codes never change."""
from __future__ import annotations

import pickle
import pickletools

from mdmem.search import fulltext, pickled
from mdmem.search.textfield import FastText


def _globals(data: bytes) -> list[str]:
    return [str(arg) for op, arg, _ in pickletools.genops(data) if op.name in ("GLOBAL", "STACK_GLOBAL")]


def test_the_pickled_schema_names_no_mdmem_module():
    data = pickle.dumps(fulltext.make_schema(), 2)  # the protocol Whoosh writes its table of contents with
    assert b"mdmem" not in data, [g for g in _globals(data) if "mdmem" in g]
    back, made = pickle.loads(data), fulltext.make_schema()
    assert [(n, type(back[n])) for n in back.names()] == [(n, type(made[n])) for n in made.names()]
    assert type(back["body"]) is FastText


def test_registry_codes_are_pinned():
    # Changing a code makes every index written with the old one unreadable: add codes, never renumber.
    assert {code: f"{cls.__module__}.{cls.__qualname__}" for code, cls in pickled.PICKLED.items()} == {
        0x7F4D4D01: "mdmem.search.textfield.FastText", 0x7F4D4D02: "mdmem.search.doctable.Int64Column"}


def test_an_index_pickled_by_module_path_still_loads():
    # Indexes written before the registry name the class by path.
    old = b"\x80\x02cmdmem.search.textfield\nFastText\nq\x00)\x81q\x01}q\x02b."
    assert type(pickle.loads(old)) is FastText
