"""The README is tested: the tour runs in order and every command exits as the README says;
the exit-code table is the error classes; the Python example runs; the options sentence is
true of every command."""
import inspect
import json
import re
import shlex
import time
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


def run_tour(tmp_path) -> tuple[Path, dict]:
    """Run the tour's commands in order, asserting each exits as its comment says; return (cwd, env)."""
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
        if "supersedes" in comment:
            time.sleep(1.1)  # a person types slower than git's one-second commit times
        argv = shlex.split(command)
        assert argv[0] == "mdmem", command
        wanted = re.search(r"exit (\d+)", comment)
        r = run_cli(*argv[1:], env={**env, "EDITOR": "true"}, cwd=cwd)
        assert r.returncode == (int(wanted.group(1)) if wanted else 0), (command, r.stdout, r.stderr)
        last = r.stdout
    return cwd, env


def test_the_tour_runs_in_order_and_exits_as_the_readme_says(tmp_path):
    run_tour(tmp_path)


def test_the_recall_examples_find_what_they_say_in_the_tours_repo(tmp_path):
    cwd, env = run_tour(tmp_path)
    history = json.loads(run_cli("history", "--subject", "service:billing", "--kind", "fact",
                                 "--key", "deploy.window", "--json", env=env, cwd=cwd).stdout)["versions"]
    first_time = min(v["time"] for v in history)
    wanted = {  # what each example's first hit must say
        "When is billing allowed": "weekday before 3pm",
        "--history": "only on Tuesdays",
        "--at": "only on Tuesdays",
        "--key refund.window": "Refunds within 30 days",
    }
    commands = [c for c, _ in indented_commands(section("Recall")) if c.startswith("mdmem recall")]
    assert len(commands) == len(wanted)
    for command in commands:
        command = command.replace("<time>", first_time)
        r = run_cli(*shlex.split(command)[1:], "--json", env=env, cwd=cwd)
        assert r.returncode == 0, (command, r.stderr)
        hits = json.loads(r.stdout)["hits"]
        expect = next(text for marker, text in wanted.items() if marker in command)
        assert hits and expect in hits[0]["text"], (command, hits)


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


def test_the_erasure_section_runs_top_to_bottom_in_the_tours_repo(tmp_path):
    """Each command of the erasure section, in order, in the repo the tour left, exits as its
    comment says (before, the second exited 6 and the third named a note nothing created)."""
    cwd, env = run_tour(tmp_path)
    commands = indented_commands(section("Erasure"))
    assert len(commands) >= 6
    for command, comment in commands:
        argv = shlex.split(command)
        assert argv[0] == "mdmem", command
        r = run_cli(*argv[1:], env=env, cwd=cwd)
        wanted = 0 if "exit 7 if" in comment else int(re.search(r"exit (\d+)", comment).group(1)) \
            if re.search(r"exit (\d+)", comment) else 0
        assert r.returncode == wanted, (command, r.stdout, r.stderr)
    notes = "".join(p.read_text() for p in cwd.rglob("*.md") if ".git" not in p.parts)
    assert "async standups" not in notes and "555-0142" not in notes
