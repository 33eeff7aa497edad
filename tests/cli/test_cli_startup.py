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


def test_a_command_that_reads_a_store_imports_the_storage_layer(tmp_path: Path) -> None:
    """The check above can fail: a command that reads a store does import SQLAlchemy."""
    assert ledger("migrate", "--store", str(tmp_path)).returncode == 0
    modules = _imported("runs", "--store", str(tmp_path))
    assert {"sqlalchemy", "ledger._inspect", "ledger.sqlite.forensics"} <= modules
