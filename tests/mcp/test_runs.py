"""The proxy's run (``ledger._mcp.runs``) when a person writes to it meanwhile.

``ledger resolve`` on the live run appends a record the proxy's log does not know: its
next write meets it, and the proxy loads the run again and writes once more, saying
nothing false ("degraded") on the way.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger._mcp.runs import ProxyRun
from ledger.effects import EffectKind, NextStep
from ledger.errors import EffectPersistenceError
from tests.backends import SQLITE
from tests.builders import CERTAIN, FAILED, POSSIBLE, SUCCESS, ledger
from tests.reliability.test_validation import RECORDS, _append

pytestmark = pytest.mark.program


def test_a_resolution_between_a_claim_and_its_outcome_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The outcome lands after the run is loaded again; no degraded log is reported."""
    store = tmp_path / "store"
    run = ProxyRun(store, "srv")
    run.start()
    try:
        first = run.claim("write", {"a": 1}, kind=EffectKind.WRITE, backend="srv/1", server="srv")
        run.settle(first.effect_id, FAILED, POSSIBLE)
        refusal = run.refusal("write", {"a": 1}, EffectKind.WRITE)
        assert refusal is not None
        assert refusal.effect_id == first.effect_id
        second = run.claim("write", {"a": 2}, kind=EffectKind.WRITE, backend="srv/1", server="srv")
        resolved = ledger(
            "resolve",
            run.run_id,
            first.effect_id,
            "--not-applied",
            "--by",
            "me",
            "--store",
            str(store),
        )
        assert resolved.returncode == 0, resolved.stderr
        with caplog.at_level(logging.WARNING, logger="ledger"):
            run.settle(second.effect_id, SUCCESS, CERTAIN)
        assert caplog.records == []
        assert run.refusal("write", {"a": 1}, EffectKind.WRITE) is None
    finally:
        run.close()
    reloaded = ProxyRun(store, "srv")
    try:
        reloaded.start()
    finally:
        reloaded.close()
    shown = ledger("show", run.run_id, "--json", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    decisions = {d["effect_id"]: d["step"] for d in json.loads(shown.stdout)["decisions"]}
    assert decisions == {
        first.effect_id: NextStep.RETRY.value,
        second.effect_id: NextStep.DONE.value,
    }


def test_a_store_holding_a_run_that_does_not_validate_is_refused_at_start(tmp_path: Path) -> None:
    """A forged run could hide an earlier identical call from the guard: the proxy does not start.

    The run's only call was settled by a row with a wrong hash, so it is not in the
    incident list by its (forged) verdict; it is named instead of believed.
    """
    store = tmp_path / "store"
    run = ProxyRun(store, "srv")
    run.start()
    try:
        claim = run.claim("write", {"a": 1}, kind=EffectKind.WRITE, backend="srv/1", server="srv")
    finally:
        run.close()
    records = SQLITE.query(store, f"SELECT max(seq) FROM ({RECORDS})", (run.run_id,) * 4)
    forged = fx.EffectOutcome(
        claim.effect_id,
        records[0][0] + 1,
        fx.ExecutionOutcome.REPORTED_SUCCESS,
        fx.Impact.CERTAIN,
        recorded_at=claim.recorded_at,
    )
    _append(SQLITE, store, run.run_id, forged, wrong_hash=True)
    again = ProxyRun(store, "srv")
    try:
        with pytest.raises(EffectPersistenceError, match=f"run {run.run_id} does not validate"):
            again.start()
    finally:
        again.close()


@pytest.mark.parametrize("kind", list(EffectKind))
def test_the_guard_holds_exactly_the_calls_decide_escalates(
    tmp_path: Path, kind: EffectKind
) -> None:
    """Whatever a call's kind and outcome, it is refused again iff decide says ESCALATE.

    The proxy decides only the outcomes that can escalate; this checks, on every outcome
    it can record, that the ones it does not decide never escalate.
    """
    run = ProxyRun(tmp_path / "store", "srv")
    run.start()
    try:
        outcomes = [
            (execution, impact)
            for execution in fx.ExecutionOutcome
            if execution is not fx.ExecutionOutcome.RUNNING
            for impact in fx.Impact
        ]
        for n, (execution, impact) in enumerate(outcomes):
            args = {"n": n}
            claim = run.claim("tool", args, kind=kind, backend="srv/1", server="srv")
            try:
                run.settle(claim.effect_id, execution, impact)
            except ValueError:  # not an outcome (INTERRUPTED is always POSSIBLE)
                continue
            escalated = run._log.decide(claim.effect_id).step is NextStep.ESCALATE
            refusal = run.refusal("tool", args, kind)
            refused = refusal is not None and refusal.effect_id == claim.effect_id
            guarded = kind in (EffectKind.WRITE, EffectKind.IRREVERSIBLE)
            assert refused is (escalated and guarded), (kind, execution, impact)
    finally:
        run.close()
