"""An approval request is durable when ``ApprovalPending`` is raised, even as a run's first record.

A person can only answer a request they can find: the run must be in the store, holding
the request, by the time the worker is told to wait, whether or not the run has claimed
anything yet.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import ApprovalPending
from tests.backends import Backend

POLICY = fx.ApprovalPolicy(ttl=timedelta(hours=1))


@pytest.mark.parametrize("observed_first", [False, True], ids=["alone", "after-an-observation"])
def test_a_runs_first_request_is_in_the_store_when_the_worker_is_told_to_wait(
    backend: Backend, store_dir: Path | str, observed_first: bool
) -> None:
    """The request, and any observation made before it, are read back by another log."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        if observed_first:
            log.observe(
                observation_id="look",
                resource=fx.ResourceRef("fs", "/w/a.txt", "target"),
                mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
                coverage=fx.Coverage.COMPLETE,
                source_action_id="a-look",
                exists=False,
            )
        with (
            pytest.raises(ApprovalPending) as pending,
            log.effect("pay", args={"n": 1}, approval=POLICY),
        ):
            pass
        # Read while the worker's log is still open: the request is durable already.
        stored = backend.query(
            store_dir, "SELECT approval_id FROM approval_requests WHERE run_id = ?", (run_id,)
        )
        assert stored == [(pending.value.approval_id,)]
        with EffectLog.load(run_id, store_dir) as other:
            history = other.history()
    assert [r.approval_id for r in history.approval_requests] == [pending.value.approval_id]
    assert len(history.observations) == (1 if observed_first else 0)
    assert [r.seq for r in history.records()] == list(range(1, len(history.records()) + 1))
