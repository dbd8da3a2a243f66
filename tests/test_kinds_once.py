"""Kinds are described in one place (model/kinds.py): the MCP remember tool's description,
the MCP instructions and the CLI's help are generated from the contracts, so a kind added
there is described everywhere, and nothing names a kind that does not exist."""
import datetime as dt
import importlib
import re

from mdmem.cli.main import command_parsers
from mdmem.model import kinds
from mdmem.model.kinds import DEFAULT_CONTRACTS, KIND_GUIDE, Contract


def cli_help(command: str) -> str:
    return command_parsers()[command].format_help()


def texts() -> dict[str, str]:
    remember = importlib.import_module("mdmem.mcp.tools.remember")
    recall = importlib.import_module("mdmem.mcp.tools.recall")
    server = importlib.import_module("mdmem.mcp.server")
    return {"mcp remember": remember.DESCRIPTION, "mcp recall": recall.DESCRIPTION,
            "mcp instructions": server.INSTRUCTIONS, "cli remember --help": cli_help("remember"),
            "cli new --help": cli_help("new"), "cli recall --help": cli_help("recall"),
            "cli ls --help": cli_help("ls")}


def missing_kinds() -> dict[str, list[str]]:
    out = {}
    for where, text in texts().items():
        flat = " ".join(text.split())  # argparse wraps help lines
        lost = [name for name in DEFAULT_CONTRACTS if not re.search(rf"\b{name}\b", flat)]
        if lost:
            out[where] = lost
    return out


def test_every_kind_is_described_everywhere_from_its_contract():
    assert missing_kinds() == {}
    assert [k for k, _, _ in KIND_GUIDE] == list(DEFAULT_CONTRACTS)
    # What the texts say of a kind is read off its contract.
    remember = texts()["mcp remember"]
    assert "working (keyed: a write under an existing key supersedes it; expires after ttl, default 1h)" in remember
    assert "episode (append-only; key optional)" in remember
    rule = kinds.agent_review_rule()
    assert rule in texts()["mcp instructions"]
    assert "; episode and working notes in your private memory are written at once" in rule


def test_examples_name_only_real_kinds():
    known = set(DEFAULT_CONTRACTS) | {a for c in DEFAULT_CONTRACTS.values() for a in c.aliases}
    for where, text in texts().items():
        for name in re.findall(r'kind=\\?"([a-z]+)\\?"', text):
            assert name in known, f"{where} names kind {name!r}, which kinds.py does not define"


def test_a_kind_added_to_kinds_py_shows_up_in_every_description(monkeypatch):
    """The attack: a new kind in kinds.py and nowhere else. Generated texts carry it at once;
    the guide (the one hand-written description per kind) is caught missing it."""
    gossip = Contract("gossip", True, False, kinds.READ_RANK_LIVE, default_ttl=dt.timedelta(days=2))
    # The server module is not reloaded (its classes are shared with other tests): its
    # instructions are checked through agent_review_rule, which they are made of.
    modules = ["mdmem.mcp.tools.remember", "mdmem.mcp.tools.recall", "mdmem.cli.cmd_remember",
               "mdmem.cli.cmd_new", "mdmem.cli.cmd_recall", "mdmem.cli.cmd_ls"]
    monkeypatch.setitem(DEFAULT_CONTRACTS, "gossip", gossip)
    try:
        for name in modules:
            importlib.reload(importlib.import_module(name))
        assert {where: lost for where, lost in missing_kinds().items() if where != "mcp instructions"} == {}
        assert "gossip (keyed: a write under an existing key supersedes it; expires after ttl, default 2d)" in \
            texts()["mcp remember"]
        assert "gossip" in kinds.agent_review_rule()  # an agent's gossip waits for review (closed by default)
        assert [k for k, _, _ in KIND_GUIDE] != list(DEFAULT_CONTRACTS)  # the guide check above would fail
    finally:
        monkeypatch.undo()
        for name in modules:
            importlib.reload(importlib.import_module(name))
    assert "gossip" not in texts()["mcp remember"]
