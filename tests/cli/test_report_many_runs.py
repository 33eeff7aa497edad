"""`ledger report` on a store of many runs, each with an incident: lists capped, each row whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger._report.model import ATTENTION_LIMIT, INCIDENT_LIMIT, RUN_LIMIT
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import fs_ref, ledger, op
from tests.cli.test_report import Dom

RUNS = INCIDENT_LIMIT + 30


@pytest.mark.program
def test_many_runs_with_incidents_list_the_oldest_each_with_its_reason_and_target(
    tmp_path: Path,
) -> None:
    """More runs with an incident than the page lists: the oldest are listed, each with why
    and what it touched; the newest runs are drawn; the page says what it left out."""
    store = tmp_path / "store"
    for i in range(RUNS):
        with EffectLog(new_run_id(), store) as log:
            log.claim(
                effect_id=f"write-{i}",
                action_id="write",
                operation=op("write_file"),
                impact_scope=[fs_ref(f"/srv/out/{i}.txt")],
                args={"i": i},
            )
            log.outcome(
                effect_id=f"write-{i}",
                execution=fx.ExecutionOutcome.INTERRUPTED,
                impact=fx.Impact.POSSIBLE,
            )
    out = tmp_path / "page.html"
    made = ledger("report", "--store", str(store), "-o", str(out), timeout=300)
    assert made.returncode == 0, made.stderr
    dom = Dom.of(out.read_text(encoding="utf-8"))
    unresolved = json.loads(
        ledger("status", "--unresolved", "--json", "--store", str(store)).stdout
    )
    assert len(unresolved) == RUNS
    listed = unresolved[:INCIDENT_LIMIT]
    assert [(i["run_id"], i["effect_id"]) for i in dom.incidents] == [
        (u["run_id"], u["effect_id"]) for u in listed
    ]
    for row, expected in zip(dom.rows_of("incident"), listed, strict=True):
        i = expected["effect_id"].removeprefix("write-")
        assert f"target: /srv/out/{i}.txt" in row.text
        assert f'args: {{"i":{i}}}' in row.text
        assert "a person must check" in row.text  # the decision's reason
    needs = dom.rows_of("needs")
    assert len(needs) == ATTENTION_LIMIT
    assert all("target: /srv/out/" in row.text for row in needs)
    assert len(dom.lanes) == RUN_LIMIT
    text = " ".join(dom.all_text().split())
    assert f"{INCIDENT_LIMIT} of {RUNS} shown, the oldest claims first" in text
    assert f"{ATTENTION_LIMIT} of {RUNS} shown, the most urgent first" in text
