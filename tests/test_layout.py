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
from pathlib import Path

import pytest

from tests.builders import REPO

TESTS = REPO / "tests"
FOLDERS = ("pure", "contract", "sqlite", "postgresql", "cli", "reliability", "mcp", "agent")
TOP_LEVEL = {"test_layout.py", "test_packaging.py", "test_readme.py"}

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
