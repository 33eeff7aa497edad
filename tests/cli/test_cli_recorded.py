"""What a run's steps, recorded arguments and results look like to a person: show and report.

The values come from the worker's code, so they are untrusted text: control characters
and HTML must come out harmless.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, new_run_id
from tests.builders import ledger

pytestmark = pytest.mark.program

HOSTILE = "<script>alert(1)</script>\x1b[31m"


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str]:
    store, run_id = tmp_path / "store", new_run_id()
    with EffectLog(run_id, store) as log:
        with log.effect("send", args={"to": HOSTILE}, step="call-7") as call:
            call.succeeded(result={"id": "m-1", "note": HOSTILE})
        with log.effect("quiet", args={"n": 1}, record_args=False, record_result=False):
            pass
    return store, run_id


def test_show_prints_a_calls_step_arguments_and_result_with_control_characters_escaped(
    run: tuple[Path, str],
) -> None:
    store, run_id = run
    shown = ledger("show", run_id, "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    assert 'step "call-7"' in shown.stdout
    assert 'args {"to":"<script>alert(1)</script>\\u001b[31m"}' in shown.stdout
    assert 'result {"id":"m-1"' in shown.stdout
    assert "\x1b" not in shown.stdout
    quiet = [line for line in shown.stdout.splitlines() if " quiet (" in line]
    assert quiet
    assert "args" not in quiet[0]


def test_show_json_holds_the_values_whole(run: tuple[Path, str]) -> None:
    store, run_id = run
    shown = ledger("show", run_id, "--store", str(store), "--json")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert '"step": "call-7"' in text
    assert json.dumps(HOSTILE)[1:-1] in text  # the whole value, escaped as JSON escapes it
    assert '"result_recorded": false' in text


def test_the_report_shows_them_escaped(run: tuple[Path, str], tmp_path: Path) -> None:
    store, run_id = run
    page = tmp_path / "report.html"
    made = ledger("report", run_id, "--store", str(store), "--output", str(page))
    assert made.returncode == 0, made.stderr
    html = page.read_text()
    assert "call-7" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)</script>" not in html
    assert "not recorded" not in html  # a value not recorded shows nothing, as in show
