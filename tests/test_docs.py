"""The project's own documentation, checked like code: MEMORY.md stays within the 200 lines an
agent reads at startup, every package on disk is on its map and in docs/architecture.md, every
repository path the docs name exists, no path of one particular machine appears in them, and
each package says in its docstring what lives there and what it may not do.

The packages are read from disk, so a new package fails here until the docs describe it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mdmem"
MEMORY = ROOT / "MEMORY.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MEMORY_BUDGET = 200

# Paths of one machine: home folders, the workspace the project was built in, scratch files.
MACHINE_PATHS = [
    re.compile(r"/work/"),
    re.compile(r"/home/"),
    re.compile(r"/Users/"),
    re.compile(r"/root/"),
    re.compile(r"/tmp/(?!mdmem-)\w"),  # /tmp/mdmem-<uid>: the daemon's socket folder on every machine
    re.compile(r"\bnotes/(issue|attack)"),
    re.compile(r"\bscratch/"),
    re.compile(r"\bscratch [\w/.-]+\.py\b"),
    re.compile(r"\bs\d{1,2}/\w+\.py\b"),
    re.compile(r"\bclosing\d+\.md\b"),
]
# README's Python example runs as written (tests/test_readme.py puts it in a temporary folder).
ALLOWED_MACHINE_PATHS = {"README.md": ['"/tmp/mem"'], "tests/test_readme.py": ['"/tmp/mem"']}
# Scratch files of the machines this was built on that comments in the code and tests still
# cite, wherever those comments move; the comment rewrite removes them. Take a mention off once it
# is gone; never add one.
KNOWN_MACHINE_PATH_MENTIONS: list[str] = []
SOURCE_FOLDERS = ("mdmem", "tests", "benchmarks", "memory_repo_template", ".ci")


def packages() -> list[str]:
    """Every package under mdmem/, as its path below mdmem/ ("cli", "mcp/tools")."""
    return sorted(p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py") if p.parent != PKG)


def memory_map() -> str:
    """The indented block of MEMORY.md's "Map of the code" section (the map itself, not the prose
    around it: a package only promised in a sentence is not on the map)."""
    section = MEMORY.read_text(encoding="utf-8").split("## Map of the code", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("    "))


def names_package(text: str, rel: str) -> bool:
    return re.search(rf"(?<![\w/.-])(mdmem/)?{re.escape(rel)}/", text) is not None


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if re.search(r"[A-Za-z]{2}", s)]


def repository_entries() -> set[str]:
    """What may start a repository path: the checkout's top-level entries (not tool folders)."""
    return {p.name for p in ROOT.iterdir()
            if not (p.name.startswith(".") and p.name != ".ci") and not p.name.endswith(".egg-info")
            and p.name != "__pycache__"}


def mentioned_paths(text: str) -> list[str]:
    """Backticked spans that read as a path in this repository: one word, no placeholder, and
    starting at a top-level entry of the checkout, at a package or module under mdmem/, or a
    bare Python file name. Runtime paths (``.git/mdmem/``, ``audit/erasures.jsonl``,
    ``team/<team>/...``) start elsewhere and are not checked."""
    top = repository_entries()
    inner = {p.name for p in PKG.iterdir() if p.name != "__pycache__"}
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        span = span.strip().rstrip(".,:;")
        if not span or re.search(r"[\s<>*{}$~]", span) or span.startswith(("/", "..")):
            continue
        first = span.split("/", 1)[0]
        if "/" in span and (first in top or first in inner):
            found.append(span)
        elif "/" not in span and span.endswith(".py"):
            found.append(span)
    return found


def exists(path: str) -> bool:
    if "/" not in path:  # a bare module or test file name: somewhere in the code, tests or benchmarks
        return any(any(base.rglob(path)) for base in (PKG, ROOT / "tests", ROOT / "benchmarks"))
    first = path.split("/", 1)[0]
    base = ROOT if first in repository_entries() else PKG
    return (base / path).exists()


def test_memory_md_fits_the_startup_budget():
    lines = MEMORY.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MEMORY_BUDGET, (
        f"MEMORY.md has {len(lines)} lines; its budget is {MEMORY_BUDGET}: move detail to docs/ and point at it")


def test_the_docs_the_memory_points_at_exist():
    assert {p.name for p in DOCS} >= {"architecture.md", "decisions.md", "known-gaps.md"}
    text = MEMORY.read_text(encoding="utf-8")
    for doc in DOCS:
        assert f"docs/{doc.name}" in text, f"MEMORY.md does not point at docs/{doc.name}"


@pytest.mark.parametrize("rel", packages())
def test_every_package_is_on_the_memory_map(rel):
    assert names_package(memory_map(), rel), (
        f"mdmem/{rel}/ is not on MEMORY.md's map (the indented block under 'Map of the code'): add a line saying "
        "what it holds")


@pytest.mark.parametrize("rel", packages())
def test_every_package_has_a_section_in_the_architecture(rel):
    headings = [line for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines() if line.startswith("### ")]
    assert any(names_package(h, rel) for h in headings), (
        f"docs/architecture.md has no '### {rel}/' section: say what the package holds, each module's job and what "
        "it may import")


def test_the_package_list_is_read_from_disk():
    """The checks above follow the packages as they are: a package that appears is demanded."""
    assert {"cli", "mcp/tools", "storage", "search", "erasure", "remote", "hooks"} <= set(packages())
    assert not names_package("    mdmem/\n      clix/  not the cli\n", "cli")
    assert names_package("      mcp/tools/   one tool per module", "mcp/tools")


@pytest.mark.parametrize("doc", [MEMORY, *DOCS], ids=lambda p: p.name)
def test_every_repository_path_the_docs_name_exists(doc):
    missing = [p for p in mentioned_paths(doc.read_text(encoding="utf-8")) if not exists(p)]
    assert not missing, f"{doc.name} names paths that are not in the repository: {missing}"


def test_the_path_check_tells_a_repository_path_from_a_runtime_one():
    text = ("`mdmem/storage/gitstore.py` `storage/nowhere.py` `tests/test_gone.py` `.git/mdmem/` "
            "`audit/erasures.jsonl` `team/<team>/MEMORY.md` `gitdir.py` `missing_module.py` `mdmem.toml`")
    assert [p for p in mentioned_paths(text) if not exists(p)] == [
        "storage/nowhere.py", "tests/test_gone.py", "missing_module.py"]


@pytest.mark.parametrize("doc", [MEMORY, ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_path_of_one_machine_in_the_docs(doc):
    found = machine_paths_in(doc.read_text(encoding="utf-8"), ALLOWED_MACHINE_PATHS.get(doc.name, []))
    assert not found, f"{doc.name}: paths of a particular machine (scratch files, home folders): {found}"


def machine_paths_in(text: str, allowed: list[str]) -> list[str]:
    """Each match with a little context. Whitespace is folded first, so a name a comment wraps onto
    the next line ("scratch" / "warm3.py") is still found."""
    flat = " ".join(text.split())
    for example in allowed:
        flat = flat.replace(example, "")
    return [flat[max(0, m.start() - 30):m.end() + 30] for p in MACHINE_PATHS for m in p.finditer(flat)]


def source_files() -> list[Path]:
    """Every text file of the code, tests, benchmarks and template (this file excepted: it holds
    the patterns' examples), plus the checkout's top-level files."""
    found = [p for p in ROOT.iterdir() if p.is_file() and p.suffix in (".md", ".toml", ".txt", ".cfg")]
    for folder in SOURCE_FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".json", ".pyc", ".onnx")]
    return sorted(p for p in found if p != Path(__file__).resolve())


def test_no_new_source_file_names_a_path_of_one_machine():
    offenders = {}
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if found := machine_paths_in(text, [*ALLOWED_MACHINE_PATHS.get(rel, []), *KNOWN_MACHINE_PATH_MENTIONS]):
            offenders[rel] = found
    assert not offenders, f"paths of a particular machine (scratch files, home folders) in the repository: {offenders}"


def test_the_machine_path_check_finds_scratch_paths():
    for line in ["see /work/notes/issue-13.md", "scratch s17/w4.py", "/tmp/atk16/run.sh", "~ is /home/alice",
                 "notes/attack9.md", "closing note /work/closing17.md", "(scratch tocrace.py)"]:
        assert any(p.search(line) for p in MACHINE_PATHS), line
    for line in ["reads /proc/stat", "`.git/mdmem/daemon.sock`", "fetch to scratch refs"]:
        assert not any(p.search(line) for p in MACHINE_PATHS), line


@pytest.mark.parametrize("rel", ["", *packages()])
def test_each_package_says_what_lives_there_in_two_sentences(rel):
    init = PKG / rel / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    assert len(sentences(doc)) >= 2, (
        f"{init.relative_to(ROOT)}: its docstring should say in two sentences what lives there and what it may "
        f"not do; it says: {doc!r}")


@pytest.mark.parametrize("question,path,defines", [
    ("score floor", "mdmem/search/recall.py", "COSINE_FLOOR"),
    ("erasure journal", "mdmem/erasure/journal.py", "def "),
    ("guard hook", "mdmem/remote/guard.py", "def install_guard"),
])
def test_a_newcomer_finds_where_to_change_it_from_the_memory_alone(question, path, defines):
    """MEMORY.md's "Where to look" answers these without a search, and its answer is where the code is."""
    rows = [line for line in MEMORY.read_text(encoding="utf-8").split("## Where to look", 1)[1].splitlines()
            if line.startswith("|") and question in line]
    assert rows and f"`{path}`" in rows[0], f"MEMORY.md's 'Where to look' does not send a newcomer to {path} for {question}"
    assert defines in (ROOT / path).read_text(encoding="utf-8"), f"{path} no longer holds the {question}"


def strict_xfail_tests() -> set[str]:
    """Tests marked ``xfail(strict=True)``, directly or through a helper any test module defines
    (a function whose body builds that mark, e.g. ``open_defect(why)``)."""
    trees = [ast.parse(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "tests").glob("*.py"))]
    helpers = {node.name for tree in trees for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and not node.name.startswith("test_")
               and "xfail(strict=True" in ast.unparse(node).replace(" ", "")}
    found = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for deco in node.decorator_list:
                    text = ast.unparse(deco).replace(" ", "")
                    called = deco.func if isinstance(deco, ast.Call) else deco
                    if "xfail(strict=True" in text or (isinstance(called, ast.Name) and called.id in helpers):
                        found.add(node.name)
    return found


def test_known_gaps_lists_exactly_the_strict_xfail_tests():
    """Each open defect pinned by a strict xfail test is explained in docs/known-gaps.md, and a fixed
    one (its mark removed) leaves the page."""
    section = (ROOT / "docs" / "known-gaps.md").read_text(encoding="utf-8").split(
        "## Open defects pinned by strict xfail tests", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(test_\w+)`", section))
    pinned = strict_xfail_tests()
    assert pinned, "no strict xfail test found: the search for them is broken"
    assert named == pinned, (f"docs/known-gaps.md names {sorted(named - pinned)} that are not strict xfail tests, and "
                             f"misses {sorted(pinned - named)}")
