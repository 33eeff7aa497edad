"""The test suite's layout says what each test tests, and this keeps it true.

``tests/pure`` tests values and functions with no store at all; ``tests/contract`` tests
the library through its public API on a store of each backend (``tests/backends.py``),
so none of its modules may reach for one backend's driver; ``tests/sqlite``,
``tests/postgresql``, ``tests/cli``, ``tests/reliability``, ``tests/mcp`` and ``tests/agent``
test the SQLite and PostgreSQL backends, the ``ledger`` command, the long-running
reliability scenarios, ``ledger mcp-proxy`` and workers built with agent frameworks.
docs/architecture.md describes it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.builders import REPO

TESTS = REPO / "tests"
FOLDERS = ("pure", "contract", "sqlite", "postgresql", "cli", "reliability", "mcp", "agent")
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
