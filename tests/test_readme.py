"""The README is tested: the tour runs in order and every command exits as the README says;
the exit-code table is the error classes; the Python example runs; the options sentence is
true of every command."""
import inspect
import re
import shlex
from pathlib import Path

import mdmem.errors as errors
from conftest import run_cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def indented_commands(text: str) -> list[tuple[str, str]]:
    """(command, trailing comment) for each command in the indented blocks, continuations joined."""
    out, pending = [], ""
    for line in text.splitlines():
        if not line.startswith("    ") or line.strip().startswith("#"):
            continue
        code, _, comment = line.strip().partition("  # ")
        code = code.strip()
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        out.append(((pending + code).strip(), comment.strip()))
        pending = ""
    return [c for c in out if c[0]]


def test_the_tour_runs_in_order_and_exits_as_the_readme_says(tmp_path):
    commands = indented_commands(section("A short tour"))
    assert len(commands) >= 10
    home = tmp_path / "memory"
    cwd, env, last = tmp_path, {}, ""
    for command, comment in commands:
        command = command.replace("~/memory", str(home))
        if command.startswith("cd "):
            cwd = Path(command[3:].strip())
            continue
        if command.startswith("export "):
            name, _, value = command[7:].partition("=")
            env[name] = value
            continue
        if "<id>" in command:
            command = command.replace("<id>", last.split()[0])
        argv = shlex.split(command)
        assert argv[0] == "mdmem", command
        wanted = re.search(r"exit (\d+)", comment)
        r = run_cli(*argv[1:], env={**env, "EDITOR": "true"}, cwd=cwd)
        assert r.returncode == (int(wanted.group(1)) if wanted else 0), (command, r.stdout, r.stderr)
        last = r.stdout


def test_the_exit_code_table_is_the_error_classes():
    table = {}
    for row in re.findall(r"^\| *(\d+) *\|[^|]*\|([^|]*)\|", section("Exit codes"), re.M):
        for name in re.findall(r"`(\w+)`", row[1]):
            table[name] = int(row[0])
    classes = {name: cls.exit_code for name, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, errors.MdmemError)}
    assert table == classes
    assert re.search(r"^\| *4 *\|", section("Exit codes"), re.M)  # held for review: an answer, not an error
    assert errors.HELD_EXIT_CODE == 4


def test_the_python_example_runs(tmp_path):
    block = "\n".join(line[4:] for line in section("Python").splitlines() if line.startswith("    ") or not line)
    assert "with MemoryRepo.open(" in block
    code = block.replace('"/tmp/mem"', repr(str(tmp_path / "mem")))
    exec(compile(code, "README.md", "exec"), {})


def test_the_common_options_sentence_is_true_of_every_command():
    from mdmem.cli.main import command_parsers

    sentence = section("Exit codes")
    without = set(re.findall(r"`mdmem (\w[\w-]*)`", sentence.split("take no `--as`")[0].rsplit(".", 1)[-1]))
    parsers = command_parsers()
    takes_as = {name for name, p in parsers.items() if "--as USER" in p.format_help()}
    assert without == set(parsers) - takes_as, (without, set(parsers) - takes_as)


def test_every_benchmark_command_says_where_its_data_comes_from():
    bench = section("Benchmarks")
    lines = [ln for ln in bench.splitlines() if "benchmarks/bench_" in ln]
    assert len(lines) >= 8
    for line in lines:
        script = re.search(r"benchmarks/(bench_\w+\.py)", line).group(1)
        assert (Path(__file__).resolve().parent.parent / "benchmarks" / script).exists(), script
        assert "# shared:" in line or "# generated" in line, line
