"""`ledger bench`: one real --quick run through the command line, and its refusals.

Timings are not tests: nothing here asserts a figure or a ratio, only that every
figure is there, is a finite positive number, and that the scratch directory is gone.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger._bench import cases as _bench_cases
from ledger._bench import mcp as _bench_mcp
from ledger._bench import runner as _bench
from ledger.cli import main
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.store import unsynchronised
from tests.builders import PYTHON, op, subprocess_env

# The MCP cases run when the SDK the proxy needs is installed (it is, in make's environment).
MCP = ["mcp_direct", "mcp_call"] if _bench_mcp.available() else []
LATENCY = [
    *("raw", "jsonl", "claim", "claim_outcome", "claim_many8", "effect", "raw_off", "cpu_off"),
    *("sql", "sql_off"),
    *MCP,
]
CONCURRENCY = ["threads1", "threads8", "threads8_shared", "processes4"]
SCALE = [
    *("assess_1k", "assess_10k", "recover_1k", "recover_10k", "status_1k", "status_10k"),
    *("recovery_10k", "recovery_100k"),
]
# The acceptance table's order: what the code controls, then the disk and the scale.
CONTROLLED = [
    "cpu_off_vs_sql_off",
    "sql_off_vs_raw_off",
    "cpu_off_vs_raw_off",
    "effect_vs_claim_outcome",
    "claim_many8_vs_claim",
    "threads8_shared_vs_single",
    *(["mcp_call_vs_claim_outcome"] if MCP else []),
    "claim_vs_raw",
]
SCALE_RATIOS = ["assess_100k_vs_1k", "recovery_1m_vs_10k", "status_100k_vs_1k"]
RATIOS = [*CONTROLLED, *SCALE_RATIOS]
TARGETS = {
    "cpu_off_vs_sql_off": "<= 1.5",
    "sql_off_vs_raw_off": "<= 3",
    "cpu_off_vs_raw_off": "<= 4.5",
    "effect_vs_claim_outcome": "<= 1.15",
    "claim_many8_vs_claim": "<= 0.18",
    "threads8_shared_vs_single": ">= 3",
    "mcp_call_vs_claim_outcome": "<= 1.3",
    "claim_vs_raw": "<= 2",
    "assess_100k_vs_1k": "<= 1.5",
    "recovery_1m_vs_10k": "<= 1.5",
    "status_100k_vs_1k": "<= 1.5",
}
EXTRA_RATIOS = [
    "claim_vs_jsonl",
    "threads8_vs_single",
    "sql_vs_raw",
    *(["mcp_call_vs_direct"] if MCP else []),
]
EARLIER_TARGETS = {
    "claim_vs_raw": "<= 1.5",
    "claim_vs_jsonl": "<= 1.1",
    "cpu_off_vs_raw_off": "<= 4",
}


def _bench_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "ledger", "bench", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        # Only against a hang: on a loaded machine a quick run takes minutes, not seconds.
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def quick(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One real `ledger bench --quick --json` in an empty directory."""
    directory = tmp_path_factory.mktemp("bench")
    return directory, _bench_cli("--quick", "--json", "--store", str(directory))


@pytest.fixture(scope="module")
def report(quick: tuple[Path, subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    _, result = quick
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def _positive(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def test_quick_run_exits_0_and_leaves_nothing_behind(quick) -> None:
    """The run succeeds, prints only JSON, and removes its scratch directory."""
    directory, result = quick
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # progress goes to stderr only when it is a terminal
    assert list(directory.iterdir()) == []


def test_report_describes_the_run(report, quick) -> None:
    """The top-level keys say what ran, where, on what machine, with notes."""
    directory, _ = quick
    assert report["quick"] is True
    assert report["store"] == str(directory)
    assert set(report["machine"]) == {"cpus", "platform", "python", "sqlite"}
    assert report["notes"]
    assert all(isinstance(note, str) and note for note in report["notes"])
    assert any("--quick" in note for note in report["notes"])
    assert any("WAL" in note for note in report["notes"])
    assert any("synchronous=OFF" in note for note in report["notes"])
    assert any("threads8_shared" in note for note in report["notes"])
    assert any("sql_vs_raw" in note for note in report["notes"])


def test_every_case_has_finite_positive_figures(report) -> None:
    """Each case, in the quick sizes, has n, p50_us, p99_us and per_s, all finite and > 0."""
    cases = report["cases"]
    assert list(cases) == LATENCY + CONCURRENCY + SCALE
    for name, case in cases.items():
        assert isinstance(case["what"], str), name
        assert isinstance(case["n"], int), name
        for key in ("n", "p50_us", "p99_us", "per_s"):
            assert _positive(case[key]), f"{name}.{key} = {case[key]!r}"
        assert case["p99_us"] >= case["p50_us"], name
    assert _positive(cases["claim_many8"]["per_claim_p50_us"])
    for name in SCALE:
        assert _positive(cases[name]["records"]), name
    assert cases["recovery_100k"]["records"] > cases["recovery_10k"]["records"]


def test_ratios_targets_and_verdicts_have_exactly_the_keys_in_order(report) -> None:
    """ratios, targets and met share the keys of the acceptance table, in its order."""
    assert list(report["ratios"]) == RATIOS
    assert list(report["targets"]) == RATIOS
    assert list(report["met"]) == RATIOS
    for name in RATIOS:
        value, target = report["ratios"][name], report["targets"][name]
        assert _positive(value), name
        assert target == TARGETS[name], name
        op, bound = target.split()
        assert report["met"][name] is (
            value <= float(bound) if op == "<=" else value >= float(bound)
        )


def test_ratios_are_the_quotients_of_their_cases(report) -> None:
    """Each new ratio divides the p50s it names, rounded to three places."""
    cases = report["cases"]
    pairs = {
        "cpu_off_vs_sql_off": ("cpu_off", "sql_off"),
        "sql_off_vs_raw_off": ("sql_off", "raw_off"),
        "effect_vs_claim_outcome": ("effect", "claim_outcome"),
        **({"mcp_call_vs_claim_outcome": ("mcp_call", "claim_outcome")} if MCP else {}),
    }
    for name, (top, bottom) in pairs.items():
        expected = round(cases[top]["p50_us"] / cases[bottom]["p50_us"], 3)
        assert report["ratios"][name] == expected, name


def test_earlier_targets_are_kept_with_their_verdicts(report) -> None:
    """The targets the ratios were first held to stay reported, each with a value and verdict."""
    earlier = report["earlier_targets"]
    assert {name: e["target"] for name, e in earlier.items()} == EARLIER_TARGETS
    for name, e in earlier.items():
        measured = report["ratios"].get(name, report["extra_ratios"].get(name))
        assert e["value"] == measured, name
        assert e["met"] is (e["value"] <= float(e["target"].split()[1])), name
    assert any("Earlier targets" in note for note in report["notes"])


def test_extra_ratios_stand_outside_the_seven_without_a_target(report) -> None:
    """claim_vs_jsonl, threads8_vs_single, ... stand beside the ratios, without a target."""
    assert list(report["extra_ratios"]) == EXTRA_RATIOS
    for name in EXTRA_RATIOS:
        assert _positive(report["extra_ratios"][name]), name
        for key in ("ratios", "targets", "met"):
            assert name not in report[key], (key, name)
    keys = list(report)
    assert keys.index("met") < keys.index("extra_ratios") < keys.index("earlier_targets")
    assert keys.index("earlier_targets") < keys.index("processes4")


def test_threads8_shared_runs_as_many_claims_as_threads8(report) -> None:
    """8 threads sharing one log claim as often as 8 with a log each, 8 times 1 thread."""
    cases = report["cases"]
    assert cases["threads8_shared"]["n"] == cases["threads8"]["n"] == 8 * cases["threads1"]["n"]
    assert "one log" in cases["threads8_shared"]["what"]


def test_processes4_reports_errors_and_the_longest_wait(report) -> None:
    """processes4: an error count, the slowest claim in seconds, claims per second."""
    procs = report["processes4"]
    assert isinstance(procs["errors"], int)
    assert not isinstance(procs["errors"], bool)
    assert procs["errors"] >= 0
    assert isinstance(procs["max_wait_s"], float)
    assert _positive(procs["max_wait_s"])
    assert _positive(procs["claims_per_s"])
    assert procs["met"] is (procs["errors"] == 0 and procs["p99_us"] <= 5_000)
    assert procs["target"] == "errors == 0, p99 <= 5 ms"
    assert report["cases"]["processes4"]["n"] == 4 * 50


def test_builds_are_reported(report) -> None:
    """What the scale cases needed built, with its size and time, not counted in any case."""
    assert report["builds"]
    for build in report["builds"]:
        assert isinstance(build["name"], str)
        assert _positive(build["records"])
        assert build["seconds"] >= 0


def test_human_output_is_a_table_of_cases_and_ratios(report, tmp_path, monkeypatch) -> None:
    """Without --json the command renders the report as tables (the run itself is reused)."""
    calls = []

    def measured(directory, *, quick, progress):
        calls.append((directory, quick, progress))
        return report

    monkeypatch.setattr(_bench, "run", measured)
    result = CliRunner().invoke(main, ["bench", "--quick", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert calls == [(tmp_path, True, None)]  # not a terminal: no progress lines
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ledger bench --quick in ")
    header = next(line for line in lines if line.startswith("CASE"))
    assert header.split() == ["CASE", "N", "P50", "µs", "P99", "µs", "PER", "SECOND", "WHAT"]
    for name in report["cases"]:
        assert any(line.startswith(f"{name} ") for line in lines), name
    for name in [*RATIOS, "processes4"]:
        rows = [line for line in lines if line.startswith(f"{name} ")]
        assert any(row.endswith((" met", " missed")) for row in rows), name
    start = next(i for i, line in enumerate(lines) if line.startswith("RATIO"))
    ratio_rows = [line.split() for line in lines[start + 1 : lines.index("", start)]]
    expected = [*CONTROLLED, "processes4", *SCALE_RATIOS, *EXTRA_RATIOS]
    assert [row[0] for row in ratio_rows] == expected
    for row in ratio_rows[-len(EXTRA_RATIOS) :]:
        assert row[-2:] == ["-", "informative"], row  # no target, no verdict
    start = next(i for i, line in enumerate(lines) if line.startswith("EARLIER TARGET"))
    earlier_rows = [line.split() for line in lines[start + 1 : lines.index("", start)]]
    assert [row[0] for row in earlier_rows] == list(EARLIER_TARGETS)
    for row in earlier_rows:
        assert " ".join(row[2:4]) == EARLIER_TARGETS[row[0]], row
        assert row[-1] in {"met", "missed"}, row
    notes = [line for line in lines if line.startswith("- ")]
    assert len(notes) == len(report["notes"])
    assert "\x1b[" not in result.stdout  # not a terminal: no escape codes
    assert all(line == line.rstrip() for line in lines)


def test_a_file_as_directory_is_one_line_and_exit_1(tmp_path) -> None:
    """A --store that is a file: one line on stderr, exit 1, no traceback, nothing written."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = _bench_cli("--quick", "--store", str(blocker))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not a directory" in result.stderr
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == [blocker]


def test_a_missing_directory_is_refused(tmp_path) -> None:
    """A --store that does not exist is refused, not created."""
    result = _bench_cli("--quick", "--json", "--store", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no such directory" in result.stderr
    assert not (tmp_path / "missing").exists()


def test_default_directory_is_beside_the_default_store(tmp_path, monkeypatch) -> None:
    """Without --store the scratch goes beside the default store, or its nearest ancestor."""
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path / "state" / "ledger"))
    assert _bench.default_directory() == tmp_path
    (tmp_path / "state").mkdir()
    assert _bench.default_directory() == tmp_path / "state"


# --------------------------------------------------------------------------- synchronous=OFF


def _synchronous(log: EffectLog) -> int:
    """PRAGMA synchronous on the connection the log's records are written on."""
    log.claim(
        effect_id=f"e{len(log.history().claims)}", action_id="a", operation=op(), impact_scope=[]
    )
    assert log._journal.store is not None
    level: int = log._journal.store._connection().execute("PRAGMA synchronous").fetchone()[0]
    return level


def test_only_the_bench_store_is_off_while_its_block_runs(tmp_path) -> None:
    """Inside the bench's OFF block, a store in another directory opens FULL (2), its own OFF (0)."""
    with unsynchronised(tmp_path / "bench"), EffectLog(new_run_id(), tmp_path / "bench") as off:
        with EffectLog(new_run_id(), tmp_path / "other") as other:
            assert _synchronous(other) == 2
        assert _synchronous(off) == 0
        with EffectLog(new_run_id(), tmp_path / "bench") as sharing:
            assert _synchronous(sharing) == 0  # the same store, opened inside the block


def test_a_log_opened_after_the_block_is_full_while_an_off_one_stays_open(tmp_path) -> None:
    """After the block, even on the bench's directory and with its OFF log open, a new log is FULL."""
    directory = tmp_path / "bench"
    with unsynchronised(directory):
        off = EffectLog(new_run_id(), directory)
        assert _synchronous(off) == 0  # a log takes its store at its first write
    try:
        with EffectLog(new_run_id(), directory) as later:
            assert _synchronous(later) == 2
        assert _synchronous(off) == 0
    finally:
        off.close()
    with EffectLog(new_run_id(), directory) as after:
        assert _synchronous(after) == 2


def test_an_open_store_cannot_be_made_off(tmp_path) -> None:
    """A directory whose store is already open is refused: its logs would not be OFF."""
    with EffectLog(new_run_id(), tmp_path / "store") as log:
        log.claim(effect_id="e0", action_id="a", operation=op(), impact_scope=[])
        with pytest.raises(RuntimeError, match="already open"), unsynchronised(log.directory):
            pass
        assert _synchronous(log) == 2


def test_stores_opened_beside_and_after_the_cpu_off_case_are_full(tmp_path) -> None:
    """The real cpu_off case runs OFF; stores opened beside it, or after it on its directory, are FULL."""
    off = _bench_cases.CpuOff(tmp_path / "store_off")
    try:
        with EffectLog(new_run_id(), tmp_path / "store") as beside:
            assert len(off.chunk(3)) == 3
            assert _synchronous(beside) == 2
        with EffectLog(new_run_id(), tmp_path / "store_off") as after:
            assert _synchronous(after) == 2
    finally:
        off.keeper.close()


# --------------------------------------------------------------------------- sql


@pytest.mark.parametrize("synchronous", ["FULL", "OFF"])
def test_the_sql_case_writes_the_claims_the_library_would(tmp_path, synchronous) -> None:
    """What the sql case commits loads back as the run's claims: the chain verifies, and
    each claim has its scope_index row, so the guards ran and nothing was left out."""
    directory = tmp_path / "store"
    case = _bench_cases.Sql(directory, synchronous)
    try:
        level = case.conn.execute("PRAGMA synchronous").fetchone()[0]
        assert level == (2 if synchronous == "FULL" else 0)
        assert len(case.chunk(5)) == 5
        written = case.seq - 1  # the library's first claim, the warm-up and the chunk
        scoped = case.conn.execute(
            "SELECT count(*) FROM scope_index WHERE run_id = ?", (case.run_id,)
        ).fetchone()[0]
    finally:
        case.conn.close()
    assert written > 5
    assert scoped == written
    with EffectLog.load(case.run_id, directory) as log:  # load checks every hash and link
        claims = log.history().claims
        assert [c.seq for c in claims] == list(range(1, written + 1))
        assert claims[-1].effect_id == f"s{written}"
        assert log.assess(claims[-1].effect_id) is not None
