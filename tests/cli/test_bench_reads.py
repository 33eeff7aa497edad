"""`ledger bench --reads`: the reading commands as real processes, on tiny runs.

Timings are not tests: nothing here asserts a figure or a ratio, only that every command
ran on every store, that every figure is a finite positive number, that the ratios are
the documented ones, and that the scratch directory is gone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger._bench import reads as _bench_reads
from ledger.cli import main
from tests.builders import ledger, subprocess_env

# Every test here runs the program, or reads what its runs measured.
pytestmark = pytest.mark.program

COMMANDS = ["status", "status_unresolved", "runs", "show", "report"]
LABELS = ["1", "20", "200"]  # the fixed-cost run, the small run and the large one


def _positive(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One real measurement, on runs of 20 and 200 effects, in an empty directory."""
    directory = tmp_path_factory.mktemp("bench-reads")
    with pytest.MonkeyPatch.context() as mp:
        # The commands run as child processes of this one: they import this ledger.
        mp.setenv("PYTHONPATH", subprocess_env()["PYTHONPATH"])
        mp.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default") / "ledger"))
        found = _bench_reads.run(directory, quick=True, sizes=(20, 200))
    return directory, found


@pytest.fixture(scope="module")
def report(measured: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    return measured[1]


def test_the_scratch_directory_is_removed(measured: tuple[Path, dict[str, Any]]) -> None:
    directory, found = measured
    assert list(directory.iterdir()) == []
    assert found["store"] == str(directory)
    assert any("was removed" in note for note in found["notes"])


def test_every_command_ran_on_every_store_and_exited_well(report: dict[str, Any]) -> None:
    cases = report["cases"]
    assert list(cases) == [f"{name}_{label}" for label in LABELS for name in COMMANDS]
    for name, case in cases.items():
        assert case["error"] is None, (name, case["error"])
        assert _positive(case["median_s"]), name
        assert _positive(case["max_rss_mb"]), name
        assert case["n"] >= 1, name
        assert case["command"].startswith("ledger "), name
        assert case["effects"] == int(name.rsplit("_", 1)[1]), name
    assert cases["show_20"]["command"] == "ledger show RUN"
    assert cases["report_20"]["command"] == "ledger report -o FILE.html"


def test_ratios_are_per_effect_large_over_small(report: dict[str, Any]) -> None:
    names = [f"{name}_200_vs_20" for name in COMMANDS]
    assert list(report["ratios"]) == names
    assert list(report["met"]) == names
    assert list(report["net_ratios"]) == [f"{n}_beyond_fixed" for n in names]
    assert report["target"] == "<= 1.5"
    for name in names:
        ratio = report["ratios"][name]
        assert _positive(ratio), name
        assert report["met"][name] is (ratio <= 1.5)
    for name, costs in report["per_effect_us"].items():
        assert list(costs) == ["20", "200", "20_beyond_fixed", "200_beyond_fixed"], name
        assert _positive(costs["20"]), name
        assert _positive(costs["200"]), name
        # The whole cost per effect, over the effects, is the ratio's. Both are printed
        # rounded (the costs to 0.1 µs, the ratio to three places), so they agree within
        # that rounding, not exactly: a ratio of 0.044 stands for up to 0.0445.
        expected = costs["200"] / costs["20"]
        assert report["ratios"][f"{name}_200_vs_20"] == pytest.approx(
            expected, rel=0.01, abs=0.0006
        )


def test_start_up_is_measured_against_a_bare_python(report: dict[str, Any]) -> None:
    startup = report["startup"]
    assert set(startup) == {"ledger_version_s", "python_pass_s", "ratio", "n"}
    assert _positive(startup["ledger_version_s"])
    assert _positive(startup["python_pass_s"])
    # The times are printed to the millisecond and the ratio to the hundredth, from the
    # unrounded times: it lies within what the rounded times allow, and no further.
    version, bare, half = startup["ledger_version_s"], startup["python_pass_s"], 0.0005
    low = (version - half) / (bare + half) - 0.005
    high = (version + half) / max(bare - half, 1e-9) + 0.005
    assert low <= startup["ratio"] <= high, startup


def test_the_stores_built_are_reported(report: dict[str, Any]) -> None:
    assert [b["name"] for b in report["builds"]] == [
        "one run of 1 effects",
        "one run of 20 effects",
        "one run of 200 effects",
    ]
    assert all(_positive(b["records"]) for b in report["builds"])


def test_the_report_is_printed_as_tables(
    report: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def measure(directory: Path | None, *, quick: bool, progress: object) -> dict[str, Any]:
        calls.append((directory, quick))
        return report

    monkeypatch.setattr(_bench_reads, "run", measure)
    result = CliRunner().invoke(main, ["bench", "--reads", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert calls == [(tmp_path, False)]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ledger bench --reads --quick in ")
    for name in report["cases"]:
        assert any(line.startswith(f"{name} ") for line in lines), name
    for name in report["ratios"]:
        (row,) = [line for line in lines if line.startswith(f"{name} ")]
        assert " met " in row or " missed " in row, row
    assert any(line.startswith("start-up: ledger --version ") for line in lines)
    assert all(line == line.rstrip() for line in lines)


def test_a_postgresql_store_is_refused_in_one_line() -> None:
    result = ledger("bench", "--reads", "--store", "postgresql://nobody@localhost/none")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "SQLite stores only" in result.stderr
    assert result.stdout == ""
