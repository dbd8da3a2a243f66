"""Guidance an agent can follow literally: every example in the root MEMORY.md and in the
MCP instructions and tool descriptions runs as written (CLI through the real command, MCP
through the SDK's client against `mdmem serve`), with the MCP parameter names."""
import ast
import importlib
import re
import shlex

from conftest import T0, run_cli, team_fact

from mdmem.mcp.server import INSTRUCTIONS, TOOLS

CLI_EXAMPLE = re.compile(r"`(mdmem [^`]+)`")
MCP_EXAMPLE = re.compile(r"`([a-z_]+\([^`]*\))`")


def mcp_calls(text: str) -> list[tuple[str, dict]]:
    out = []
    for example in MCP_EXAMPLE.findall(text):
        call = ast.parse(example.replace("<team>", "payments"), mode="eval").body
        assert isinstance(call, ast.Call) and not call.args, example  # keyword arguments only
        out.append((call.func.id, {k.arg: ast.literal_eval(k.value) for k in call.keywords}))
    return out


def test_every_cli_example_in_the_root_guide_runs_as_written(repo):
    guide = (repo.root / "MEMORY.md").read_text()
    examples = CLI_EXAMPLE.findall(guide)
    assert {shlex.split(e)[1] for e in examples} >= {"startup", "remember", "recall", "get", "keys", "history"}
    for example in examples:
        command = example.replace("<you>", "bob").replace("<team>", "payments")
        assert "<" not in command, example
        r = run_cli(*shlex.split(command)[1:], "--repo", str(repo.root))
        assert r.returncode == 0, (example, r.stdout, r.stderr)
    # They did what the guide says: the team fact is in the team's root, the working note is keyed.
    assert (repo.root / "team/payments/service/web/fact/deploy.window.md").exists()
    assert (repo.root / "team/payments/service/web/fact/rollback.review.md").exists()
    assert (repo.root / "private/bob/task/current/working/file.md").exists()
    # ...and the refusal it describes happens without --new-key.
    r = run_cli("remember", "Chargebacks go to finance", "--kind", "fact", "--subject", "service:web",
                "--key", "chargeback", "--scope", "team", "--team", "payments", "--as", "bob",
                "--repo", str(repo.root))
    assert r.returncode == 3 and "deploy.window" in r.stderr


def test_every_mcp_example_runs_through_the_real_client(repo):
    from test_mcp import data, run

    guide = (repo.root / "MEMORY.md").read_text()
    texts = [INSTRUCTIONS, guide] + [importlib.import_module(f"mdmem.mcp.tools.{n}").DESCRIPTION for n in TOOLS]
    calls = [c for text in texts for c in mcp_calls(text)]
    assert {name for name, _ in calls} >= {"startup", "remember", "recall", "get", "keys", "history"}
    team_fact(repo, "The web app deploys any weekday before 3pm", subject="service:web", now=T0)  # looked up below
    calls.sort(key=lambda c: c[0] != "remember")  # writes first, as an agent would have
    out = run(repo, "bob", "read,write", calls)
    for (name, args), result in zip(calls, out["results"]):
        assert not result.is_error, (name, args, result.content)
        if name == "remember":
            # The agent's own fact waits for a person (the gate's closed default); working state commits.
            assert data(result)["status"] == ("committed" if args["kind"] == "working" else "held"), args


def test_no_guidance_names_a_cli_flag_where_an_mcp_parameter_is_meant():
    texts = [INSTRUCTIONS] + [importlib.import_module(f"mdmem.mcp.tools.{n}").DESCRIPTION for n in TOOLS]
    for text in texts:
        assert not re.search(r"--[a-z]", text), text
