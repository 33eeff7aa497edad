"""The log's doors for code that writes beside it: ``reload``, ``strict`` outcomes, ``observed``.

A process that shares its run with others (``ledger resolve`` adds a resolution to a run
a worker holds) meets a write refused because the store holds a record its log does not
know. ``outcome_many(strict=True)`` lets it see that as an error instead of a degraded
log, and ``reload()`` reads the run again. ``claim_many`` and ``outcome_many`` take what
the worker saw (``observed=``) into the same transaction as the claims or outcomes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import (
    EffectLog,
    EffectPersistenceError,
    ObservationRequest,
    OutcomeRequest,
    new_run_id,
)
from tests.builders import (
    CERTAIN,
    FAILED,
    POSSIBLE,
    SUCCESS,
    claim_requests,
    fs_ref,
)

TARGET = fs_ref("/w/out.txt")


def seen(observation_id: str, *, exists: bool = False) -> ObservationRequest:
    return ObservationRequest(
        observation_id, TARGET, fx.ObservationMechanism.FILESYSTEM_READ, exists=exists
    )


def resolved_elsewhere(store_dir: Path, run_id: str, effect_id: str) -> None:
    """A second log of the run (another holder, as ``ledger resolve`` is) resolves an effect."""
    with EffectLog.load(run_id, store_dir) as other:
        other.resolve(effect_id, applied=False, by="me")


def test_reload_reads_what_another_log_wrote_and_keeps_the_options(store_dir: Path) -> None:
    """The reloaded log knows the resolution written meanwhile; the old one is closed."""
    run_id = new_run_id()
    first = EffectLog(run_id, store_dir, writer_name="w1", record_args=False)
    try:
        (claim,) = first.claim_many(claim_requests("e1"))
        first.outcome(effect_id="e1", execution=FAILED, impact=POSSIBLE)
        resolved_elsewhere(store_dir, run_id, claim.effect_id)
        assert first.decide("e1").step is fx.NextStep.ESCALATE  # it has not read the run
        again = first.reload()
    finally:
        first.close()
    with again:
        assert again.decide("e1").step is fx.NextStep.RETRY
        assert again.recording == first.recording
        assert again.history().resolutions[0].by == "me"
    with pytest.raises(ValueError, match="the log is closed"):
        first.outcome(effect_id="e1", execution=FAILED, impact=POSSIBLE)


def test_a_strict_outcome_the_store_refuses_raises_and_degrades_nothing(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused because the run moved on: an error, no outcome in memory, no degraded log."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1", "e2"))
        resolved_elsewhere(store_dir, run_id, "e1")
        ended = OutcomeRequest(effect_id="e2", execution=SUCCESS, impact=CERTAIN)
        with (
            caplog.at_level(logging.WARNING, logger="ledger"),
            pytest.raises(EffectPersistenceError),
        ):
            log.outcome_many((ended,), strict=True)
        assert caplog.records == []
        assert not log.degraded
        assert log.history().outcomes == ()
        with log.reload() as again:
            (written,) = again.outcome_many((ended,), strict=True)
            assert written.seq == 4  # after the two claims and the resolution
    with EffectLog.load(run_id, store_dir) as loaded:
        assert [o.effect_id for o in loaded.history().outcomes] == ["e2"]


def test_the_same_refusal_without_strict_degrades_the_log(store_dir: Path) -> None:
    """Without ``strict`` the outcome stays in memory and the log writes nothing more."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1", "e2"))
        resolved_elsewhere(store_dir, run_id, "e1")
        ended = OutcomeRequest(effect_id="e2", execution=SUCCESS, impact=CERTAIN)
        log.outcome_many((ended,))
        assert log.degraded
        assert [o.effect_id for o in log.history().outcomes] == ["e2"]


def test_observed_lands_in_the_transaction_of_the_claims_and_of_the_outcomes(
    store_dir: Path,
) -> None:
    """Observations given to claim_many come first; to outcome_many, after the outcomes."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        (claim,) = log.claim_many(claim_requests("e1"), observed=[seen("before")])
        ended = OutcomeRequest(effect_id="e1", execution=SUCCESS, impact=CERTAIN)
        log.outcome_many(
            (ended,), observed=[seen("after", exists=True)], source_action_id="a-after"
        )
    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
    assert [(type(r).__name__, r.seq) for r in history.records()] == [
        ("Observation", 1),
        ("EffectClaim", 2),
        ("EffectOutcome", 3),
        ("Observation", 4),
    ]
    before, after = history.observations
    assert (before.source_action_id, before.exists) == (claim.action_id, False)
    assert (after.source_action_id, after.exists) == ("a-after", True)


def test_bad_observed_is_refused_before_anything_is_written(store_dir: Path) -> None:
    """A wrong type, or observations with no source action, write nothing."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        with pytest.raises(TypeError, match="observed takes ObservationRequest items"):
            log.claim_many(claim_requests("e1"), observed=[{"observation_id": "o1"}])  # type: ignore[list-item]
        assert log.history().records() == ()
        log.claim_many(claim_requests("e1"))
        with pytest.raises(ValueError, match="source_action_id"):
            log.outcome_many((), observed=[seen("o1")])
        with pytest.raises(TypeError, match="strict must be a bool"):
            log.outcome_many((), strict="yes")  # type: ignore[arg-type]
        assert len(log.history().records()) == 1


def test_outcome_of_is_the_terminal_outcome_or_none(store_dir: Path) -> None:
    """``outcome_of`` says whether an effect has settled, as ``assess`` would, in one look."""
    with EffectLog(new_run_id(), store_dir) as log:
        log.claim_many(claim_requests("e1"))
        assert log.outcome_of("e1") is None
        running = log.outcome(
            effect_id="e1", execution=fx.ExecutionOutcome.RUNNING, impact=POSSIBLE
        )
        assert not running.terminal
        assert log.outcome_of("e1") is None
        assert log.assess("e1").execution is fx.ExecutionOutcome.RUNNING
        settled = log.outcome(effect_id="e1", execution=SUCCESS, impact=CERTAIN)
        assert log.outcome_of("e1") == settled
        with pytest.raises(ValueError, match="no claim"):
            log.outcome_of("never-claimed")
