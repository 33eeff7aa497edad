"""The built wheel is a complete product: installed alone, it creates and upgrades a store."""

from __future__ import annotations

import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from tests.builders import PYTHON, REPO

SMOKE = """
import os, pathlib, sys
import ledger
assert not pathlib.Path(ledger.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[2])), ledger.__file__
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
store = pathlib.Path(sys.argv[1])
ref = fx.ResourceRef("fs", "/srv/out.txt", "target")
run = new_run_id()
with EffectLog(run, store) as log:
    log.claim(effect_id="e1", action_id="a1", operation=fx.OperationRef("write", "", "0" * 64),
              impact_scope=[ref], obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)])
with EffectLog.load(run, store) as log:
    print(len(log.recover_interrupted()), log.assess("e1").verdict.value)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("tool_ledger-*.whl")
    return built


def test_wheel_ships_migrations_and_type_marker(wheel: Path) -> None:
    """The wheel carries the Alembic scripts and the report's templates inside the package, and py.typed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ledger/_migrations/env.py" in names
    assert "ledger/_migrations/versions/0001_initial.py" in names
    assert "ledger/py.typed" in names
    for template in ("report.html.j2", "report.css", "report.js"):
        assert f"ledger/templates/{template}" in names
    assert not any(name.startswith(("tests/", "migrations/", "tools/")) for name in names)


def test_wheel_leaves_out_the_doc_generator(wheel: Path) -> None:
    """The generator of docs/cli.md writes into the source tree: the wheel does not carry it."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not any("clidoc" in name for name in names)
    assert "ledger/cli.py" in names


def test_installed_wheel_creates_a_store_outside_the_tree(wheel: Path, tmp_path: Path) -> None:
    """In a fresh venv, away from the source tree, the wheel creates, writes, loads and recovers."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            str(REPO / "constraints.txt"),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    smoke = tmp_path / "smoke.py"
    smoke.write_text(SMOKE)
    result = subprocess.run(
        [str(python), str(smoke), str(tmp_path / "store"), str(REPO)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "unverified"]
    path = subprocess.run(
        [str(env_dir / "bin" / "ledger"), "path", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert path.stdout.strip() == str(tmp_path / "store" / "ledger.sqlite3")
    # The report's template and assets are read from the installed package.
    page = tmp_path / "report.html"
    report = subprocess.run(
        [
            str(env_dir / "bin" / "ledger"),
            "report",
            "--store",
            str(tmp_path / "store"),
            "-o",
            str(page),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    assert '<g class="lane verdict-unverified unresolved"' in page.read_text()
