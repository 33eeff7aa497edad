"""The command line imports only what its command needs.

``ledger --version``, ``--help`` and a command's ``--help`` answer without the storage
layer (SQLAlchemy, Alembic, a backend), the page (Jinja2) or the MCP SDK: each of those
costs a large multiple of a bare Python start. What a process imported is read from
``python -X importtime``, which names every module as it is imported; no time is
asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger.sqlite.engine import (
    _migrations_dir,
    _read_revisions,
    _walk_revisions,
    head_revision,
    revisions,
)
from tests.builders import CHILD_TIMEOUT, ledger, subprocess_env

pytestmark = pytest.mark.program

# What none of these answers may load: each is a command's own business.
HEAVY = (
    "sqlalchemy",
    "alembic",
    "jinja2",
    "mcp",
    "psycopg",
    "ledger.sqlite",
    "ledger.postgresql",
    "ledger.storage",
    "ledger.effect_log",
    "ledger._inspect",
    "ledger._report",
    "ledger._jsonl",
    "ledger._mcp",
    "importlib.metadata",
)


def _imported(*args: str) -> set[str]:
    """Every module ``python -m ledger ARGS`` imported, after checking it exited 0."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ledger", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            modules.add(line.rpartition("|")[2].strip())
    assert "ledger.cli" in modules  # the report is read as it should be
    return modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        ("runs", "--help"),
        ("show", "--help"),
        ("status", "--help"),
        ("resolve", "--help"),
        ("migrate", "--help"),
        ("report", "--help"),
        ("mcp-proxy", "--help"),
    ],
    ids=" ".join,
)
def test_version_and_help_import_nothing_of_storage(args: tuple[str, ...]) -> None:
    """--version and every --help import neither storage, nor the page, nor the MCP SDK."""
    assert _heavy(_imported(*args)) == []


def test_a_command_that_reads_a_store_imports_sqlalchemy_but_not_alembic(tmp_path: Path) -> None:
    """A reader needs SQLAlchemy (so the check above can fail), but never migrates."""
    assert ledger("migrate", "--store", str(tmp_path)).returncode == 0
    for args in (("runs",), ("status", "--json"), ("verify",)):
        modules = _imported(*args, "--store", str(tmp_path))
        assert {"sqlalchemy", "ledger._inspect", "ledger.sqlite.forensics"} <= modules
        assert not [m for m in modules if m.partition(".")[0] == "alembic"], args


def test_status_attention_loads_the_attention_list_but_not_the_page(tmp_path: Path) -> None:
    """status --attention picks from status rows: neither the page's modules nor Jinja2 load."""
    assert ledger("migrate", "--store", str(tmp_path)).returncode == 0
    modules = _imported("status", "--attention", "--store", str(tmp_path))
    assert "ledger._report.attention" in modules
    page = [m for m in modules if m.startswith(("ledger._report.", "jinja2", "markupsafe"))]
    assert page == ["ledger._report.attention"]


def test_the_revisions_read_from_the_scripts_are_alembics() -> None:
    """Read without running the scripts, the schema's history is the one Alembic walks."""
    versions = _migrations_dir() / "versions"
    assert _read_revisions(versions) == _walk_revisions(str(_migrations_dir()))
    assert revisions() == _walk_revisions(str(_migrations_dir()))
    assert head_revision() == revisions()[-1]


@pytest.mark.parametrize(
    "scripts",
    [
        # a branch: two scripts on one parent
        {"a": ("0001", None), "b": ("0002", "0001"), "c": ("0003", "0001")},
        # a parent no script holds
        {"a": ("0001", None), "b": ("0003", "0002")},
        # two roots
        {"a": ("0001", None), "b": ("0002", None)},
    ],
    ids=["branch", "missing parent", "two roots"],
)
def test_a_history_that_is_not_one_line_is_left_to_alembic(
    tmp_path: Path, scripts: dict[str, tuple[str, str | None]]
) -> None:
    """A branch, a missing parent or two roots: not read, Alembic's walk decides."""
    for name, (revision, parent) in scripts.items():
        (tmp_path / f"{name}.py").write_text(
            f"revision: str = {revision!r}\ndown_revision: str | None = {parent!r}\n"
        )
    assert _read_revisions(tmp_path) is None


def test_a_revision_that_is_not_a_literal_is_left_to_alembic(tmp_path: Path) -> None:
    """A revision computed by code is not guessed at; a literal one is read."""
    (tmp_path / "a.py").write_text('revision = "00" + "01"\ndown_revision = None\n')
    assert _read_revisions(tmp_path) is None
    (tmp_path / "a.py").write_text('revision = "0001"\ndown_revision = None\n')
    assert _read_revisions(tmp_path) == ("0001",)
