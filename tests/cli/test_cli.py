"""The `ledger` console script (the rest of the command line is documented in docs/)."""

from __future__ import annotations

import subprocess

from tests.builders import PYTHON, ledger, subprocess_env


def test_path_prints_the_database_of_the_given_store(tmp_path) -> None:
    """`ledger path --store DIR` prints DIR/ledger.sqlite3 and creates nothing."""
    result = ledger("path", "--store", str(tmp_path / "s"))
    assert result.returncode == 0
    assert result.stdout.strip() == str(tmp_path / "s" / "ledger.sqlite3")
    assert not (tmp_path / "s").exists()


def test_path_defaults_to_ledger_dir(tmp_path) -> None:
    """Without --store the path follows $LEDGER_DIR."""
    env = subprocess_env() | {"LEDGER_DIR": str(tmp_path / "x")}
    assert ledger("path", env=env).stdout.strip() == str(tmp_path / "x" / "ledger.sqlite3")


def test_python_dash_m_ledger_is_the_same_command() -> None:
    """`python -m ledger --help` lists the commands."""
    result = subprocess.run(
        [PYTHON, "-m", "ledger", "--help"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "demo" in result.stdout
    assert "path" in result.stdout


def test_storage_trouble_is_one_line_and_exit_1(tmp_path) -> None:
    """A store whose database file is a directory gives a one-line error, exit 1, no traceback."""
    (tmp_path / "store" / "ledger.sqlite3").mkdir(parents=True)
    result = ledger("demo", "--store", str(tmp_path / "store"))
    assert result.returncode == 1
    assert "not a regular file" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("Error: ")


def test_a_file_given_as_store_is_a_usage_error(tmp_path) -> None:
    """A --store that is a file is refused as a usage mistake: exit 2, no traceback."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = ledger("demo", "--store", str(blocker))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "is a file" in result.stderr
