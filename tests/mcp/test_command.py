"""``ledger mcp-proxy`` as a command: its arguments, its mistakes, and life without the SDK.

The ledger imports without the MCP SDK; only ``ledger mcp-proxy`` needs it, and says
how to get it in one line. Mistakes are one line and an exit code, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.builders import ledger, python_stdout, run_python

pytestmark = pytest.mark.program

# A child Python in which the SDK cannot be imported, as if it were not installed.
WITHOUT_SDK = "import sys\nsys.modules['mcp'] = None\nsys.modules['mcp_types'] = None\n"


def test_the_ledger_imports_without_the_mcp_sdk() -> None:
    """The library and the command line import with the SDK missing."""
    script = WITHOUT_SDK + (
        "import ledger, ledger.cli, ledger.effect_log, ledger.effects, ledger.resources\n"
        "print('ok')\n"
    )
    assert python_stdout(script) == "ok\n"


def test_mcp_proxy_without_the_sdk_says_how_to_install_it(tmp_path: Path) -> None:
    """One line naming the extra, exit 1, no traceback."""
    script = WITHOUT_SDK + (
        "from ledger.cli import main\n"
        "sys.argv = ['ledger', 'mcp-proxy', '--store', sys.argv[1], '--', 'true']\n"
        "main()\n"
    )
    result = run_python(script, tmp_path / "store")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "Error: ledger mcp-proxy needs the MCP SDK: pip install tool-ledger[mcp]"
    ]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--kind", "send_email", "--", "true"], "is not TOOL=KIND"),
        (["--kind", "send_email=maybe", "--", "true"], "is not TOOL=KIND"),
        (["--error-impact", "send_email", "--", "true"], "is not TOOL=possible or TOOL=none"),
        (["--error-impact", "=none", "--", "true"], "is not TOOL=possible or TOOL=none"),
        (["--error-impact", "a=certain", "--", "true"], "is not TOOL=possible or TOOL=none"),
        ([], "Missing argument"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], words: str
) -> None:
    """A bad --kind or --error-impact, or no command: a usage error."""
    result = ledger("mcp-proxy", "--store", str(tmp_path / "store"), *args)
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    """A server that does not exist: one line naming it, exit 1."""
    missing = str(tmp_path / "no-such-server")
    result = ledger("mcp-proxy", "--store", str(tmp_path / "store"), "--name", "x", "--", missing)
    assert result.returncode == 1
    assert (
        result.stderr.splitlines()[-1]
        == f"Error: cannot start {missing}: No such file or directory"
    )
    assert "Traceback" not in result.stderr


def test_the_proxy_exits_with_the_servers_status(tmp_path: Path) -> None:
    """A server that exits at once ends the proxy, with the server's status."""
    result = ledger(
        "mcp-proxy", "--store", str(tmp_path / "store"), "--", sys.executable, "-c", "exit(3)"
    )
    assert result.returncode == 3
    assert result.stdout == ""
