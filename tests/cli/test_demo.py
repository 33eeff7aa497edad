"""The main job: `ledger demo` kills a worker mid-effect and reports every verdict honestly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog
from tests.builders import ledger


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("demo") / "store"
    result = ledger("demo", "--store", str(store), "--report", str(store.parent / "demo.html"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return store, result.stdout


def _row(output: str, effect: str) -> list[str]:
    for line in output.splitlines():
        if line.startswith(effect + " "):
            return line.split()
    raise AssertionError(f"no row for {effect} in:\n{output}")


def test_demo_kills_the_worker_and_recovers_the_interrupted_effect(demo_run) -> None:
    """The worker is SIGKILLed mid-write and the restarted one recovers exactly that effect."""
    _, out = demo_run
    assert "killed with SIGKILL in the middle of e3-report" in out
    assert "recovered: e3-report" in out


def test_demo_table_is_honest(demo_run) -> None:
    """Completed writes verify, the clean failure fails, the torn write is contradicted and unresolved.

    Beside each verdict the next step: done, retry the failed delete, a person for the torn write.
    """
    _, out = demo_run
    assert _row(out, "e1-plan")[3:] == ["reported_success", "certain", "verified", "no", "done"]
    assert _row(out, "e2-cleanup")[3:] == ["failed", "none", "failed", "no", "retry"]
    assert _row(out, "e3-report")[3:] == [
        "interrupted",
        "possible",
        "contradicted",
        "yes",
        "escalate",
    ]
    assert _row(out, "e5-summary")[3:] == ["reported_success", "certain", "verified", "no", "done"]
    assert "e3-report: ESCALATE: The evidence contradicts it: a person must check." in out


def test_demo_store_agrees_with_its_table(demo_run) -> None:
    """Loading the demo's run gives the same verdicts the demo printed."""
    store, out = demo_run
    run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("run "))
    with EffectLog.load(run_id, store) as log:
        verdicts = {c.effect_id: log.assess(c.effect_id).verdict for c in log.history().claims}
    assert verdicts["e3-report"] is fx.EffectVerdict.CONTRADICTED
    assert verdicts["e4-data"] is fx.EffectVerdict.VERIFIED
    assert len(verdicts) == 5


@pytest.mark.usefixtures("sqlite3_shell")
def test_demo_prints_a_working_sqlite3_command(demo_run) -> None:
    """The printed sqlite3 command, run as shown, lists the same verdicts from effect_status."""
    _, out = demo_run
    command = next(line.strip() for line in out.splitlines() if line.strip().startswith("sqlite3 "))
    shown = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=30, check=True
    )
    assert "contradicted" in shown.stdout
    assert shown.stdout.count("verified") == 3


def test_demo_ends_with_the_path_of_its_report(demo_run) -> None:
    """With --report, the demo's last line is the path of the page of its run, which exists."""
    store, out = demo_run
    page = Path(out.splitlines()[-1].strip())
    assert page == store.parent / "demo.html"
    html = page.read_text()
    assert html.count('<g class="lane ') == 5
    assert "interrupted (recovery)" in html
