"""The run's memory under the log (``ledger._run.state``): values in, values out.

``RunState`` is what an ``EffectLog`` knows of its run and what it has reserved for the
records on their way to the store. These tests give it records and requests and read
what it answers: which records it builds and numbers, which it refuses (and why), what
entering a step does, and what recovery appends. No store, no clock, no thread.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings

from ledger import effects as fx
from ledger._run.requests import ClaimRequest, ObservationRequest, OutcomeRequest
from ledger._run.state import RunState, not_before, renumber
from ledger.errors import NeedsResolution, StillRunning
from tests.builders import (
    CERTAIN,
    FAILED,
    INTERRUPTED,
    NONE,
    POSSIBLE,
    RUNNING,
    SUCCESS,
    fs_ref,
    histories,
    op,
)

RUN = "a" * 32
NOW = "2026-12-05T12:00:00.000000Z"
TARGET = fs_ref("/w/out.txt")


def request(effect_id: str, **change: object) -> ClaimRequest:
    fields: dict[str, object] = {
        "effect_id": effect_id,
        "action_id": effect_id,
        "operation": op(),
        "impact_scope": (TARGET,),
    }
    return ClaimRequest(**(fields | change))  # type: ignore[arg-type]


def claim(effect_id: str, seq: int, **change: object) -> fx.EffectClaim:
    fields: dict[str, object] = {
        "effect_id": effect_id,
        "seq": seq,
        "action_id": effect_id,
        "operation": op(),
        "impact_scope": (TARGET,),
        "obligations": (),
        "recorded_at": NOW,
        "idempotency_key": fx.idempotency_key(RUN, effect_id),
    }
    return fx.EffectClaim(**(fields | change))  # type: ignore[arg-type]


def outcome(
    effect_id: str, seq: int, execution: fx.ExecutionOutcome, impact: fx.Impact, **more: object
) -> fx.EffectOutcome:
    return fx.EffectOutcome(effect_id, seq, execution, impact, recorded_at=NOW, **more)  # type: ignore[arg-type]


def state_of(*records: fx.Record) -> RunState:
    state = RunState(RUN)
    for record in records:
        state.remember(record)
    state.next_seq = len(records) + 1
    return state


def seen(observation_id: str) -> ObservationRequest:
    return ObservationRequest(
        observation_id, TARGET, fx.ObservationMechanism.FILESYSTEM_READ, exists=False
    )


# --------------------------------------------------------------------------- memory


def test_the_run_state_loads_nothing_of_storage() -> None:
    """Importing the run state loads no storage layer, no backend and no log."""
    script = (
        "import sys\n"
        "import ledger._run.state\n"
        "prefixes = ('sqlalchemy', 'alembic', 'ledger.storage', 'ledger.sqlite', "
        "'ledger.postgresql', 'ledger.effect_log', 'ledger._run.journal', 'ledger._run.writes')\n"
        "print(sorted(m for m in sys.modules if m.startswith(prefixes)))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert child.stdout.strip() == "[]"


@settings(max_examples=200, deadline=None)
@given(history=histories())
def test_a_loaded_history_is_what_the_state_remembers(history: fx.History) -> None:
    """Adopting a run's history gives it back whole, and the next seq follows its last record."""
    state = RunState(RUN)
    state.adopt(history)
    assert state.history() == history
    records = history.records()
    assert state.next_seq == (records[-1].seq + 1 if records else 1)


def test_records_are_numbered_after_the_reserved_ones() -> None:
    """A record built while others are queued takes the seq after them; renumber moves it."""
    state = state_of(claim("e1", 1))
    assert state.next_free == 2
    queued = state.claim_records([request("e2")], state.next_free, NOW)
    state.reserve(queued)
    assert state.next_free == 3
    built = state.claim_records([request("e3")], state.next_free, NOW)
    assert [c.seq for c in built] == [3]
    assert renumber(built[0], 2).seq == 2
    assert renumber(built[0], 3) is built[0]


# --------------------------------------------------------------------------- claims


@pytest.mark.parametrize("where", ["remembered", "reserved", "same batch"])
def test_an_effect_id_is_claimed_once_wherever_the_other_claim_is(where: str) -> None:
    """A claim whose effect id is durable, queued, or earlier in its batch is refused."""
    state = state_of(claim("e1", 1)) if where == "remembered" else RunState(RUN)
    if where == "reserved":
        state.reserve(state.claim_records([request("e1")], 1, NOW))
    batch = [request("e1")] if where != "same batch" else [request("e1"), request("e1")]
    with pytest.raises(ValueError, match=r"effect 'e1' is already claimed in run a{32}"):
        state.claim_records(batch, state.next_free, NOW)


def test_a_released_claim_frees_its_effect_id_step_and_key() -> None:
    """Releasing a claim that was not written lets the same claim be made again."""
    state = RunState(RUN)
    queued = state.claim_records([request("e1", step="s1")], 1, NOW)
    state.reserve(queued)
    assert state.steps.taken("s1")
    assert state.queued_keys[queued[0].idempotency_key] == 1
    state.release(queued)
    assert (state.queued, state.queued_claims, state.steps.queued) == (0, set(), set())
    assert not state.queued_keys
    assert [c.effect_id for c in state.claim_records([request("e1", step="s1")], 1, NOW)] == ["e1"]


def test_a_step_has_one_first_attempt() -> None:
    """A second first attempt of a step is refused; a retry of it is not a first attempt."""
    state = state_of(claim("e1", 1, step="s1"))
    with pytest.raises(ValueError, match="step 's1' already has a first attempt"):
        state.claim_records([request("e2", step="s1")], 2, NOW)
    (retry,) = state.claim_records([request("e2", step="s1", retry_of="e1")], 2, NOW)
    assert retry.idempotency_key == fx.idempotency_key(RUN, "e1")


def test_a_retry_repeats_an_effect_of_its_run() -> None:
    """A retry of an effect the run never claimed is refused."""
    with pytest.raises(ValueError, match="effect 'nope' is not claimed in run"):
        RunState(RUN).claim_records([request("e2", retry_of="nope")], 1, NOW)


# --------------------------------------------------------------------------- outcomes


def test_an_outcome_needs_a_durable_claim() -> None:
    """No claim is one error; a claim still being written is another, that says to wait."""
    state = RunState(RUN)
    ended = OutcomeRequest(effect_id="e1", execution=FAILED, impact=NONE)
    with pytest.raises(ValueError, match="effect 'e1' has no claim"):
        state.outcome_records([ended], 1, NOW)
    state.reserve(state.claim_records([request("e1")], 1, NOW))
    with pytest.raises(ValueError, match="still being claimed"):
        state.outcome_records([ended], 2, NOW)


def test_nothing_follows_a_terminal_outcome_but_running_may_precede_one() -> None:
    """RUNNING then FAILED in one batch is fine; another terminal outcome is refused."""
    state = state_of(claim("e1", 1))
    running = OutcomeRequest(effect_id="e1", execution=RUNNING, impact=POSSIBLE)
    ended = OutcomeRequest(effect_id="e1", execution=FAILED, impact=NONE)
    built = state.outcome_records([running, ended], 2, NOW)
    assert [(o.seq, o.execution) for o in built] == [(2, RUNNING), (3, FAILED)]
    with pytest.raises(ValueError, match="already has a terminal outcome"):
        state.outcome_records([ended, ended], 2, NOW)
    state.reserve(built)
    with pytest.raises(ValueError, match="already has a terminal outcome"):
        state.outcome_records([ended], 4, NOW)


def test_an_outcome_is_never_dated_before_its_claim() -> None:
    """A clock stepped back dates the outcome at its claim's time."""
    state = state_of(claim("e1", 1, recorded_at="2026-12-05T13:00:00.000000Z"))
    ended = OutcomeRequest(effect_id="e1", execution=FAILED, impact=NONE)
    (built,) = state.outcome_records([ended], 2, NOW)
    assert built.recorded_at == "2026-12-05T13:00:00.000000Z"
    assert not_before(NOW, claim("e2", 2)) == NOW


# --------------------------------------------------------------------------- observations


def test_an_observation_id_is_recorded_once() -> None:
    """An observation id given twice in a batch, durable, or reserved is refused."""
    state = RunState(RUN)
    with pytest.raises(ValueError, match="observation 'o1' is given twice"):
        state.observation_records([seen("o1"), seen("o1")], "a1", 1, NOW)
    (first,) = state.observation_records([seen("o1")], "a1", 1, NOW)
    assert (first.seq, first.source_action_id, first.exists) == (1, "a1", False)
    state.reserve([first])
    with pytest.raises(ValueError, match="observation 'o1' is already recorded"):
        state.observation_records([seen("o1")], "a1", 2, NOW)
    state.release([first])
    state.remember(first)
    with pytest.raises(ValueError, match="observation 'o1' is already recorded"):
        state.observation_records([seen("o1")], "a1", 2, NOW)


def test_observed_takes_observation_requests_only() -> None:
    """Anything else in ``observed`` is the caller's type error."""
    with pytest.raises(TypeError, match="observed takes ObservationRequest items, not dict"):
        RunState(RUN).observation_records([{"observation_id": "o1"}], "a1", 1, NOW)  # type: ignore[list-item]


# --------------------------------------------------------------------------- decisions


def test_a_retry_is_refused_unless_the_decision_is_retry() -> None:
    """ESCALATE refuses a retry; RETRY allows one, until a retry of it is reserved."""
    doubtful = state_of(claim("e1", 1), outcome("e1", 2, FAILED, POSSIBLE))
    with pytest.raises(ValueError, match=r"not to be retried: the decision is ESCALATE"):
        doubtful.check_retry("e1")
    failed = state_of(claim("e1", 1), outcome("e1", 2, FAILED, NONE))
    failed.check_retry("e1")
    failed.reserve(failed.claim_records([request("r1", retry_of="e1")], 3, NOW))
    with pytest.raises(ValueError, match=r"the decision is WAIT \(A retry of it is being claimed"):
        failed.check_retry("e1")


def test_entering_a_step_claims_retries_or_replays_it_by_its_decision() -> None:
    """New: claim. Failed without effect: retry it. Done with a result: replay it."""
    probe = claim("p", 1, step="s1")
    assert RunState(RUN).plan_step(probe, "s1", tool=False).plan.replay is None
    failed = state_of(claim("e1", 1, step="s1"), outcome("e1", 2, FAILED, NONE))
    plan = failed.plan_step(probe, "s1", tool=False).plan
    assert (plan.retry_of, plan.attempt, plan.replay) == ("e1", 2, None)
    done = state_of(claim("e1", 1, step="s1"), outcome("e1", 2, SUCCESS, CERTAIN, result=7))
    planned = done.plan_step(probe, "s1", tool=True)
    assert planned.plan.replay is not None
    assert planned.plan.replay.effect_id == "e1"
    assert planned.outcome is not None
    assert planned.outcome.result == 7


def test_automatic_steps_count_the_calls_of_one_operation_and_arguments() -> None:
    """Without a step, the n-th call with an operation and digest is that call's step."""
    state = RunState(RUN)
    probe = claim("p", 1)
    steps = [state.plan_step(probe, None, tool=False).step for _ in range(2)]
    digest = probe.operation.args_sha256[:16]
    assert steps == [f"write_file#1@{digest}", f"write_file#2@{digest}"]


def test_a_step_being_claimed_is_not_entered_twice() -> None:
    """While a step's first attempt is reserved, entering the step again raises StillRunning."""
    state = RunState(RUN)
    state.reserve(state.claim_records([request("e1", step="s1")], 1, NOW))
    with pytest.raises(StillRunning, match="step 's1' is being claimed by another call"):
        state.plan_step(claim("p", 1, step="s1"), "s1", tool=False)


def test_a_write_into_the_scope_of_an_effect_in_doubt_needs_a_person() -> None:
    """A WRITE overlapping an ESCALATE effect is refused; a READ, or a stranger's scope, is not."""
    state = state_of(claim("e1", 1), outcome("e1", 2, FAILED, POSSIBLE))
    with pytest.raises(NeedsResolution, match="would touch the scope of effect 'e1'"):
        state.plan_step(claim("p", 1), "s2", tool=False)
    state.plan_step(claim("p", 1, kind=fx.EffectKind.READ), "s3", tool=False)
    elsewhere = claim("p", 1, impact_scope=(fs_ref("/elsewhere"),))
    state.plan_step(elsewhere, "s4", tool=False)


# --------------------------------------------------------------------------- recovery, resolve


def test_recovery_marks_every_claim_without_an_outcome_from_the_next_seq() -> None:
    """Claims with no outcome get INTERRUPTED / POSSIBLE; RUNNING and settled ones do not."""
    state = state_of(
        claim("e1", 1),
        claim("e2", 2),
        outcome("e2", 3, RUNNING, POSSIBLE),
        claim("e3", 4),
        outcome("e3", 5, SUCCESS, CERTAIN),
        claim("e4", 6),
    )
    appended = state.recovery(NOW)
    assert [(o.effect_id, o.seq, o.execution, o.impact, o.replayed) for o in appended] == [
        ("e1", 7, INTERRUPTED, POSSIBLE, True),
        ("e4", 8, INTERRUPTED, POSSIBLE, True),
    ]


def test_resume_observes_the_files_of_effects_that_ended_otherwise_than_done() -> None:
    """A failed write's postcondition file is to be observed; a success's is not."""
    other = fs_ref("/w/other.txt")
    kept = fx.Postcondition(TARGET, fx.Predicate.EXISTS)
    left = fx.Postcondition(other, fx.Predicate.EXISTS)
    state = state_of(
        claim("e1", 1, obligations=(kept,)),
        outcome("e1", 2, FAILED, POSSIBLE),
        claim("e2", 3, impact_scope=(other,), obligations=(left,)),
        outcome("e2", 4, SUCCESS, CERTAIN),
    )
    assert state.resume_targets() == [TARGET]


def test_an_effect_is_resolved_once_with_boolean_answers() -> None:
    """A resolution needs a claim and bools; a second one, durable or reserved, is refused."""
    state = state_of(claim("e1", 1))
    with pytest.raises(TypeError, match="applied must be a bool, not str"):
        state.check_resolvable("e1", applied="yes", allow_self=False)
    with pytest.raises(ValueError, match="effect 'e2' has no claim"):
        state.check_resolvable("e2", applied=True, allow_self=False)
    state.check_resolvable("e1", applied=True, allow_self=False)
    state.queued_resolutions.add("e1")
    with pytest.raises(ValueError, match="effect 'e1' is already resolved"):
        state.check_resolvable("e1", applied=True, allow_self=False)
