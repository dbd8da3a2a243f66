"""The layout's rules, checked on the source (ast), so a change that breaks one fails CI.

- only storage/ touches git: imports pygit2 or subprocess, calls ``store.git(...)`` or
  reaches the raw pygit2 repository (``store.repo``);
- only cli/ and mcp/ read the environment (os.environ, os.getenv);
- search/ and storage/ never import ops/ or the MemoryRepo facade (repo.py); model/ and
  policy/ import neither storage, search, views, ops nor erasure; ops/, views/ and erasure/
  never import the facade (the operations are functions of ops/state.py's RepoState; the
  facade is one thin method per operation over them, not a second home for their logic);
- no module uses a private (_underscore) name another mdmem module defines.

KNOWN_* list today's debt, module by module; a module leaving the list must stay out (the
test fails on a listed module that no longer breaks the rule, so the lists only shrink).
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "mdmem"

KNOWN_GIT_OUTSIDE_STORAGE: set[str] = set()
KNOWN_PRIVATE_USE: set[str] = set()
# Not debt: the boundary mapping names libgit2's exception class to map it; it runs no git.
MAY_NAME_PYGIT2 = {"errors.py"}
# Not debt: starts the bulk import's index worker (a Python child, search/index_worker.py); no git.
MAY_START_PROCESSES = {"search/index_worker.py",
                       "cli/launch.py",  # starts `mdmem daemon run` (cli/daemon.py); no git
                       "search/catch_up_aside.py"}  # starts the index catch-up to disk (a Python child); no git


def modules() -> dict[str, ast.Module]:
    return {p.relative_to(PKG).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(PKG.rglob("*.py"))}


def imported(tree: ast.Module, rel: str) -> set[str]:
    """Absolute module names a module imports (relative imports resolved)."""
    package = ["mdmem", *rel.split("/")[:-1]]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def touches_git(tree: ast.Module, rel: str) -> list[str]:
    found = []
    for name in imported(tree, rel):
        if name.split(".")[0] == "pygit2" and rel in MAY_NAME_PYGIT2:
            continue
        if name.split(".")[0] == "subprocess" and rel in MAY_START_PROCESSES:
            continue
        if name.split(".")[0] in ("pygit2", "subprocess"):
            found.append(f"imports {name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "git":
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
        if (isinstance(node, ast.Attribute) and node.attr == "repo"
                and ast.unparse(node.value).split(".")[-1] == "store"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_only_storage_touches_git():
    offenders = {rel: why for rel, tree in modules().items()
                 if not rel.startswith("storage/") and (why := touches_git(tree, rel))}
    new = {rel: why for rel, why in offenders.items() if rel not in KNOWN_GIT_OUTSIDE_STORAGE}
    assert not new, f"git outside storage/ (add a named operation to storage/ instead): {new}"
    cleared = KNOWN_GIT_OUTSIDE_STORAGE - set(offenders)
    assert not cleared, f"no longer touching git, take them off KNOWN_GIT_OUTSIDE_STORAGE: {cleared}"


def test_only_the_boundaries_read_the_environment():
    """A child process may be handed the environment with a few values changed
    (``{**os.environ, "TMPDIR": ...}``): that forwards it, it does not read a setting."""
    offenders = []
    for rel, tree in modules().items():
        if rel.startswith(("cli/", "mcp/")):
            continue
        forwarded = {id(v) for node in ast.walk(tree) if isinstance(node, ast.Dict)
                     for k, v in zip(node.keys, node.values) if k is None}
        for node in ast.walk(tree):
            if id(node) in forwarded:
                continue
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                offenders.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    any(a.name in ("environ", "getenv") for a in node.names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, f"the library reads the environment (resolve it in cli/ and pass it): {offenders}"


def test_layers_import_downwards():
    rules = {
        ("search/", "storage/"): ("mdmem.ops", "mdmem.repo", "mdmem.erasure", "mdmem.cli", "mdmem.mcp"),
        ("model/", "policy/"): ("mdmem.storage", "mdmem.search", "mdmem.views", "mdmem.ops", "mdmem.erasure",
                                "mdmem.repo", "mdmem.cli", "mdmem.mcp"),
        ("views/", "ops/", "erasure/", "remote/", "hooks/", "watch.py", "results.py", "errors.py"):
            ("mdmem.cli", "mdmem.mcp"),
        ("ops/", "views/", "erasure/", "hooks/install.py"): ("mdmem.repo", "mdmem.remote", "mdmem.hooks.run"),
        ("ops/", "views/", "erasure/", "search/", "storage/", "model/", "policy/"): ("mdmem.remote",),
        # workspace/ sits above the facade and remote/, below the boundaries
        ("workspace/",): ("mdmem.cli", "mdmem.mcp"),
        ("repo.py", "ops/", "views/", "erasure/", "remote/", "hooks/", "search/", "storage/", "model/", "policy/",
         "watch.py", "results.py", "errors.py", "config.py", "cache.py"): ("mdmem.workspace",),
        # Token verification knows nothing of the memory: the server checks the person against it.
        ("auth/",): ("mdmem.cli", "mdmem.mcp", "mdmem.repo", "mdmem.ops", "mdmem.search", "mdmem.views",
                     "mdmem.erasure", "mdmem.remote", "mdmem.hooks"),
        # interop/ speaks other tools' formats on top of the facade and its gate: never around it
        # (no ops/ or storage/ of its own), and nothing below it knows of it.
        ("interop/",): ("mdmem.cli", "mdmem.mcp", "mdmem.ops.write", "mdmem.ops.state", "mdmem.ops.read",
                        "mdmem.ops.lifecycle", "mdmem.ops.holds", "mdmem.ops.review", "mdmem.storage",
                        "mdmem.search", "mdmem.erasure"),  # ops/importing.py reads files, no repo
        ("model/", "policy/", "search/", "storage/", "views/", "ops/", "erasure/", "remote/", "hooks/", "watch.py",
         "results.py", "errors.py", "repo.py", "config.py", "auth/"): ("mdmem.interop",),
    }
    bad = []
    for rel, tree in modules().items():
        for prefixes, banned in rules.items():
            if rel.startswith(prefixes):
                bad += [f"{rel} imports {m}" for m in imported(tree, rel)
                        if any(m == b or m.startswith(b + ".") for b in banned)]
    assert not bad, bad


def module_imports() -> dict[str, set[str]]:
    """Module name -> the mdmem modules it imports anywhere (function-level imports too, since a
    cycle through a lazy import is still a cycle; ``if TYPE_CHECKING:`` blocks excepted)."""
    trees = modules()
    names = {rel: "mdmem." + rel[:-3].replace("/", ".").removesuffix(".__init__") for rel in trees}
    known = set(names.values())
    graph = {}
    for rel, tree in trees.items():
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        found = set()
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            found |= imported(ast.Module(body=[node], type_ignores=[]), rel)
        graph[names[rel]] = {m for m in found if m in known} - {names[rel]}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    """No module reaches itself through imports, lazy ones included: a circle means two concerns
    that cannot be understood (or moved) apart."""
    assert not import_cycles(module_imports()), import_cycles(module_imports())


def test_the_cycle_check_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def defined_private_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)  # its own attribute (setting another object's counts as use)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_module_uses_another_modules_private_names():
    trees = modules()
    own = {rel: defined_private_names(tree) for rel, tree in trees.items()}
    offenders: dict[str, list[str]] = {}
    for rel, tree in trees.items():
        elsewhere = set().union(*(names for other, names in own.items() if other != rel)) - own[rel]
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Attribute) and node.attr in elsewhere and \
                    not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                hit = f"line {node.lineno}: {ast.unparse(node)}"
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("mdmem")):
                hit = next((f"line {node.lineno}: imports {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")), None)
            if hit:
                offenders.setdefault(rel, []).append(hit)
    new = {rel: hits for rel, hits in offenders.items() if rel not in KNOWN_PRIVATE_USE}
    assert not new, f"private names used across modules (make them public or add an operation): {new}"
    cleared = KNOWN_PRIVATE_USE - set(offenders)
    assert not cleared, f"clean now, take them off KNOWN_PRIVATE_USE: {cleared}"


def test_the_facade_is_thin():
    """repo.py holds no operation's logic: each public method is one call into ops/ or erasure/
    (opening and the erasure wiring excepted), so each concern keeps one home."""
    tree = modules()["repo.py"]
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MemoryRepo")
    fat = []
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            statements = sum(1 for s in body for _ in ast.walk(s) if isinstance(_, ast.stmt))
            if statements > 8:
                fat.append(f"{node.name}: {statements} statements")
    assert not fat, f"operation logic in the facade (move it to ops/): {fat}"
    assert len(ast.unparse(tree).splitlines()) < 300, "repo.py grew past a facade"


def test_only_gitdir_names_the_cache_folder():
    """The caches live in .git/mdmem/ (storage/gitdir.py: a commit can fill or redirect a work-tree
    folder). Code that builds a path with ".mdmem" writes where a teammate's
    commit can reach: every cache path comes from cache_dir(). The watchers only skip the old
    folder's events."""
    allowed = {"storage/gitdir.py", "storage/tree_watch.py", "watch.py"}
    offenders = sorted(rel for rel, tree in modules().items() if rel not in allowed
                       and any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                               and n.value.split("/")[0] == ".mdmem" for n in ast.walk(tree)))
    assert not offenders, f"a cache path outside storage/gitdir.cache_dir: {offenders}"


def test_every_package_is_declared_for_installation():
    """An editable install finds subpackages through the folder; a wheel ships only the packages
    pyproject.toml lists: a package left out works here and is missing for every user."""
    import tomllib

    declared = set(tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"mdmem." + p.parent.relative_to(PKG).as_posix().replace("/", ".") if p.parent != PKG else "mdmem"
             for p in PKG.rglob("__init__.py")}
    assert found - declared == set(), f"packages missing from pyproject.toml [tool.setuptools] packages: {found - declared}"
