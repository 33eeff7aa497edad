"""The test suite's layout says what each test tests, and this keeps it true.

``tests/pure`` tests values and functions with no store at all; ``tests/contract`` tests
the library through its public API on a store of each backend (``tests/backends.py``),
so none of its modules may reach for one backend's driver; ``tests/sqlite``,
``tests/postgresql``, ``tests/cli``, ``tests/reliability``, ``tests/mcp``, ``tests/agent``
and ``tests/telemetry`` test the SQLite and PostgreSQL backends, the ``ledger`` command,
the long-running reliability scenarios, ``ledger mcp-proxy``, workers built with agent
frameworks and the OpenTelemetry spans and metrics.
docs/architecture.md describes it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Collection, Iterable
from pathlib import Path

import pytest

from tests.builders import REPO, python_stdout

TESTS = REPO / "tests"
FOLDERS = (
    "pure",
    "contract",
    "sqlite",
    "postgresql",
    "cli",
    "reliability",
    "mcp",
    "agent",
    "telemetry",
)
TOP_LEVEL = {"test_docs_imports.py", "test_layout.py", "test_packaging.py", "test_readme.py"}

# What a module that is not about one backend may not import, and what a pure one may not.
BACKEND = ("sqlite3", "ledger.sqlite", "psycopg", "ledger.postgresql")
STORAGE = (
    *BACKEND,
    "sqlalchemy",
    "alembic",
    "ledger.storage",
    "ledger.effect_log",
    "ledger._inspect",
)
# Fixtures that hand a test a store or a log.
STORE_FIXTURES = {"store_dir", "log", "backend"}

# The library's floors, by module prefix (the longest prefix that names a module or
# its package decides): a module imports from its own floor and those below, never
# from one above. docs/architecture.md draws them.
FLOORS = {
    # 0: the pure core, values and the rules over them: no storage, no errors to raise
    # but ValueError and TypeError.
    "ledger.effects": 0,
    "ledger._core": 0,
    "ledger._lifetime": 0,
    "ledger._chain": 0,
    "ledger._text": 0,
    "ledger.resources": 0,
    "ledger._owner": 0,
    "ledger._paths": 0,
    "ledger._combiner": 0,
    # 1: the contract between the log and the stores.
    "ledger.errors": 1,
    "ledger.storage": 1,
    # 2: the SQL both backends share.
    "ledger._sql": 2,
    # 3: the backends, side by side (neither imports the other: see below).
    "ledger.sqlite": 3,
    "ledger.postgresql": 3,
    # 4: the log, and what it is made of.
    "ledger.effect_log": 4,
    "ledger._run": 4,
    "ledger._dropped": 4,
    "ledger._telemetry": 4,
    # 5: the surfaces: the command, its reports and reads, the proxy, the bench, the demo.
    "ledger": 5,  # the package itself: what ``import ledger`` offers
    "ledger.__main__": 5,
    "ledger.cli": 5,
    "ledger._cli": 5,
    "ledger._inspect": 5,
    "ledger._report": 5,
    "ledger._jsonl": 5,
    "ledger._demo": 5,
    "ledger._mcp": 5,
    "ledger._bench": 5,
}
# Arrows up a floor that are known and accepted, as (importer, imported) prefixes.
FLOOR_EXCEPTIONS: set[tuple[str, str]] = set()
# Backends that must not import each other.
SIDE_BY_SIDE = ("ledger.sqlite", "ledger.postgresql")


def _modules(folder: str) -> list[Path]:
    return sorted((TESTS / folder).glob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, nested ones and child scripts included.

    A child script is a string constant holding ``import`` or ``from`` lines.
    """
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                script = ast.parse(node.value)
            except (SyntaxError, UnicodeEncodeError):  # not a script: text, a lone surrogate
                continue
            for inner in ast.walk(script):
                if isinstance(inner, ast.Import):
                    found += [(node.lineno, alias.name) for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom) and inner.module:
                    found += [(node.lineno, inner.module)]
                    found += [(node.lineno, f"{inner.module}.{a.name}") for a in inner.names]
    return found


def _offending(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in paths
        for line, module in _imports(path)
        if any(module == name or module.startswith(name + ".") for name in forbidden)
    ]


def test_every_test_module_is_in_a_folder_that_says_what_it_tests() -> None:
    """Test modules live in the folders that say what they test; a few stand alone."""
    stray = {p.name for p in TESTS.glob("test_*.py")} - TOP_LEVEL
    assert stray == set()
    for folder in FOLDERS:
        assert (TESTS / folder / "__init__.py").is_file(), folder
        assert list((TESTS / folder).glob("test_*.py")), folder


@pytest.mark.parametrize("folder", ["contract", "pure"])
def test_no_backend_is_imported_outside_its_own_tests(folder: str) -> None:
    """Neither the contract suite nor the pure tests import sqlite3 or ledger.sqlite."""
    assert _offending(_modules(folder), BACKEND) == []


def test_pure_tests_touch_no_storage() -> None:
    """Pure tests import no storage layer at all, and take no store or log fixture."""
    assert _offending(_modules("pure"), STORAGE) == []
    takers = [
        f"{path.relative_to(REPO)}::{node.name}"
        for path in _modules("pure")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
        and STORE_FIXTURES & {arg.arg for arg in node.args.args + node.args.kwonlyargs}
    ]
    assert takers == []


def test_the_layout_checks_see_imports_in_child_scripts_too(tmp_path: Path) -> None:
    """A child script's ``import sqlite3``, or a nested import, counts as the module's own."""
    module = tmp_path / "test_example.py"
    module.write_text(
        'SCRIPT = """\nimport os\nfrom ledger.sqlite import store\n"""\n\n\n'
        "def test_x() -> None:\n    import sqlite3\n"
    )
    assert sorted(m for _, m in _imports(module)) == [
        "ledger.sqlite",
        "ledger.sqlite.store",
        "os",
        "sqlite3",
    ]


# --------------------------------------------------------------------------- make mutants

# What runs the ``ledger`` program: the suite's name for the console script
# (tests/builders.py), which mutmut's environment does not install. (A child Python the
# suite starts imports the ledger from the tests' tree, which mutmut copies: it runs
# there, on the original code.)
PROGRAM_SEEDS = {"LEDGER"}


def _names(node: ast.AST) -> set[str]:
    """Every name ``node`` uses: bare names, attributes (``builders.ledger``), parameters."""
    found: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            found.add(inner.id)
        elif isinstance(inner, ast.Attribute):
            found.add(inner.attr)
        elif isinstance(inner, ast.arg):
            found.add(inner.arg)
    return found


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """The module's top-level functions and classes, by name."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
    return found


def _starters(definitions: Iterable[tuple[str, ast.AST]], known: set[str]) -> set[str]:
    """``known`` and the names among ``definitions`` that use one of them, to a fixed point."""
    starters, pending = set(known), list(definitions)
    changed = True
    while changed:
        changed = False
        for name, node in pending:
            if name not in starters and _names(node) & starters:
                starters.add(name)
                changed = True
    return starters


def _helper_starters() -> set[str]:
    """What the suite's helper modules (builders, drivers, fixtures) define that runs the program."""
    helpers = [p for p in TESTS.rglob("*.py") if not p.name.startswith("test_")]
    definitions = [
        item for path in helpers for item in _definitions(ast.parse(path.read_text())).items()
    ]
    return _starters(definitions, PROGRAM_SEEDS)


def _marked_program(node: ast.FunctionDef) -> bool:
    return any("program" in _names(d) and "mark" in _names(d) for d in node.decorator_list)


def _unmarked_program_runs(path: Path, helpers: set[str]) -> list[str]:
    """The tests of ``path`` that run the program without the ``program`` mark."""
    tree = ast.parse(path.read_text(), str(path))
    module_marked = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "program" in _names(node.value)
        for node in tree.body
    )
    if module_marked:
        return []
    local = _definitions(tree)
    helpers = helpers - local.keys()  # a local definition shadows a helper of that name
    starters = _starters([i for i in local.items() if not i[0].startswith("test_")], helpers)
    return [
        f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}::{node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and _names(node) & starters
        and not _marked_program(node)
    ]


def _mutants_selection() -> list[Path]:
    mutmut = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    return [REPO / a for a in mutmut["pytest_add_cli_args_test_selection"] if a.endswith(".py")]


def test_every_test_make_mutants_runs_leaves_the_program_alone() -> None:
    """A test of ``make mutants``' selection that runs the ``ledger`` program is marked ``program``.

    The program runs the original code, not mutmut's mutant, and mutmut's environment
    does not install it: unmarked, such a test fails the run's first, clean pass.
    """
    selection = _mutants_selection()
    assert selection
    assert all(path.is_file() for path in selection), selection
    helpers = _helper_starters()
    assert {"ledger", "ledger_all"} <= helpers  # the check sees the helpers
    assert [t for path in selection for t in _unmarked_program_runs(path, helpers)] == []


def test_the_mutants_check_sees_the_program_run_through_a_helper(tmp_path: Path) -> None:
    """Unmarked tests running the program, directly or through a module helper, are found; marked, not."""
    module = tmp_path / "test_example.py"
    body = (
        "import pytest\n"
        "from tests.builders import ledger\n\n\n"
        "def _verify():\n    return ledger('verify')\n\n\n"
        "{mark}def test_x():\n    ledger('status')\n\n\n"
        "{mark}def test_y():\n    _verify()\n\n\n"
        "def test_z(spawn):\n    spawn('load')\n"
    )
    helpers = _helper_starters()
    module.write_text(body.format(mark=""))
    assert _unmarked_program_runs(module, helpers) == [
        "test_example.py::test_x",
        "test_example.py::test_y",
    ]
    module.write_text(body.format(mark="@pytest.mark.program\n"))
    assert _unmarked_program_runs(module, helpers) == []


# --------------------------------------------------------------------------- the library's imports


def _package_modules() -> dict[str, Path]:
    """Every module of the ``ledger`` package by dotted name."""
    found = {}
    for path in sorted((REPO / "ledger").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _library_imports(name: str, path: Path, modules: Collection[str]) -> set[str]:
    """The ``ledger`` modules that module ``name`` imports, at module level or in a function.

    Not those under ``if TYPE_CHECKING:`` (never imported at run time). ``from pkg import
    mod`` is an arrow to ``pkg.mod``; to ``pkg`` too only for a name that is not a module.
    A package is not counted as imported by the import of one of its modules.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            submodules = {f"{module}.{a.name}" for a in node.names} & set(modules)
            named.update(submodules)
            if len(submodules) < len(node.names):
                named.add(module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    arrows = set()
    for module in named:
        parts = module.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts and parts[0] == "ledger" and ".".join(parts) != name:
            arrows.add(".".join(parts))
    return arrows


def _import_graph() -> dict[str, set[str]]:
    modules = _package_modules()
    return {name: _library_imports(name, path, modules) for name, path in modules.items()}


def _prefix(module: str, prefixes: Iterable[str]) -> str | None:
    found = [p for p in prefixes if module == p or module.startswith(p + ".")]
    return max(found, key=len, default=None)


def _floor_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for importer, imported in graph.items():
        for target in sorted(imported):
            low, high = _prefix(importer, FLOORS), _prefix(target, FLOORS)
            if low is None or high is None or FLOORS[high] <= FLOORS[low]:
                continue
            if (low, high) not in FLOOR_EXCEPTIONS:
                found.append(f"{importer} (floor {FLOORS[low]}) -> {target} (floor {FLOORS[high]})")
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_every_module_of_the_library_has_a_floor() -> None:
    """A new module is given its floor in FLOORS, so the import checks below see it."""
    assert [m for m in _import_graph() if _prefix(m, FLOORS) is None] == []


def test_no_import_goes_up_a_floor() -> None:
    """A lower floor never imports a higher one (nested imports count, TYPE_CHECKING not)."""
    assert _floor_violations(_import_graph()) == []


def test_the_backends_do_not_import_each_other() -> None:
    """No arrow from ledger.postgresql to ledger.sqlite, nor back."""
    graph = _import_graph()
    crossing = [
        f"{importer} -> {target}"
        for importer, imported in graph.items()
        for target in imported
        for side in SIDE_BY_SIDE
        if _prefix(importer, (side,))
        and any(_prefix(target, (other,)) for other in SIDE_BY_SIDE if other != side)
    ]
    assert crossing == []


def test_no_modules_import_each_other_in_a_cycle() -> None:
    """The library's import graph has no cycle, lazy imports in functions included."""
    assert _cycles(_import_graph()) == []


def test_the_import_checks_see_what_they_must(tmp_path: Path) -> None:
    """Nested and relative imports are arrows, TYPE_CHECKING ones are not; cycles and floors show."""
    module = tmp_path / "mod.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ledger import effects, storage as st\n"
        "from . import cli\n"
        "if TYPE_CHECKING:\n    from ledger import effect_log\n"
        "def f():\n    import ledger.sqlite.store\n    from ledger.sqlite import rows\n"
    )
    modules = {
        "ledger.x",
        "ledger.effects",
        "ledger.storage",
        "ledger.cli",
        "ledger.effect_log",
        "ledger.sqlite.store",
        "ledger.sqlite.rows",
    }
    assert _library_imports("ledger.x", module, modules) == {
        "ledger.effects",
        "ledger.storage",
        "ledger.cli",
        "ledger.sqlite.store",
        "ledger.sqlite.rows",
    }
    graph = {"ledger.errors": {"ledger.sqlite.rows"}, "ledger.sqlite.rows": {"ledger.errors"}}
    assert _cycles(graph) == [["ledger.errors", "ledger.sqlite.rows"]]
    assert _floor_violations(graph) == ["ledger.errors (floor 1) -> ledger.sqlite.rows (floor 3)"]


def test_importing_the_postgresql_backend_loads_no_sqlite_module() -> None:
    """``import ledger.postgresql`` in a fresh process loads none of the SQLite backend."""
    loaded = python_stdout(
        "import sys\nimport ledger.postgresql\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('ledger'))))"
    ).split()
    assert "ledger.postgresql" in loaded
    assert [m for m in loaded if m == "ledger.sqlite" or m.startswith("ledger.sqlite.")] == []
    assert (
        "sqlite3"
        not in python_stdout(
            "import sys\nimport ledger.postgresql\nprint(' '.join(sys.modules))"
        ).split()
    )


def test_the_sql_floor_loads_no_backend_and_no_driver() -> None:
    """``ledger._sql`` is dialect-neutral: importing all of it loads neither backend nor driver."""
    loaded = python_stdout(
        "import sys, pkgutil, importlib\nimport ledger._sql\n"
        "for m in pkgutil.iter_modules(ledger._sql.__path__):\n"
        "    importlib.import_module('ledger._sql.' + m.name)\n"
        "print(' '.join(sys.modules))"
    ).split()
    assert "ledger._sql.rows" in loaded
    forbidden = ("ledger.sqlite", "ledger.postgresql", "sqlite3", "psycopg")
    assert [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)] == []
