"""Which attempt speaks for an effect: its newest retry, followed retry by retry.

``newest_attempt`` and ``decide`` directly, on histories where the oldest retry, the
newest retry and the newest claim of the retry tree are three different answers.
"""

from __future__ import annotations

from ledger import effects as fx
from tests.builders import op

NOW = "2024-01-01T00:00:00.000000+00:00"
RUN = "0123456789abcdef0123456789abcdef"
KEY = fx.idempotency_key(RUN, "e1")


def attempt(effect_id: str, seq: int, retry_of: str | None = None) -> fx.EffectClaim:
    """A READ (run again whenever it failed) carrying e1's key."""
    return fx.EffectClaim(
        effect_id,
        seq,
        "a1",
        op(),
        (),
        (),
        NOW,
        kind=fx.EffectKind.READ,
        idempotency_key=KEY,
        retry_of=retry_of,
    )


def ended(effect_id: str, seq: int, execution: fx.ExecutionOutcome) -> fx.EffectOutcome:
    impact = fx.Impact.NONE if execution is fx.ExecutionOutcome.FAILED else fx.Impact.POSSIBLE
    return fx.EffectOutcome(effect_id, seq, execution, impact, recorded_at=NOW)


E1 = attempt("e1", 1)
E2 = attempt("e2", 3, retry_of="e1")  # the oldest retry of e1: failed, so RETRY
E3 = attempt("e3", 5, retry_of="e1")  # the newest retry of e1: no outcome, so WAIT
TWO_RETRIES = fx.History(
    (E1, E2, E3),
    (
        ended("e1", 2, fx.ExecutionOutcome.INTERRUPTED),
        ended("e2", 4, fx.ExecutionOutcome.FAILED),
    ),
)


def test_of_two_retries_of_one_effect_the_newest_speaks() -> None:
    fx.check_history(TWO_RETRIES)
    assert fx.newest_attempt(E1, TWO_RETRIES) == E3
    decision = fx.decide(E1, TWO_RETRIES)
    assert decision.step is fx.NextStep.WAIT
    assert decision.reason.startswith("Its newest retry 'e3': ")
    assert decision.idempotency_key == KEY
    # Each retry speaks for itself: neither has a retry of its own.
    assert fx.newest_attempt(E2, TWO_RETRIES) == E2
    assert fx.decide(E2, TWO_RETRIES).step is fx.NextStep.RETRY


def test_the_newest_retry_is_followed_to_its_own_newest_retry() -> None:
    e4 = attempt("e4", 6, retry_of="e3")
    history = fx.History(
        (E1, E2, E3, e4),
        (*TWO_RETRIES.outcomes, ended("e4", 7, fx.ExecutionOutcome.REPORTED_SUCCESS)),
    )
    fx.check_history(history)
    assert [fx.newest_attempt(c, history).effect_id for c in history.claims] == [
        "e4",
        "e2",
        "e4",
        "e4",
    ]
    assert fx.decide(E1, history).step is fx.NextStep.DONE


def test_a_retry_of_an_older_retry_does_not_speak_over_the_newest_retry() -> None:
    """e1's newest retry is e3; e4, claimed later, retries e2: e1 follows e3, not e4."""
    e4 = attempt("e4", 6, retry_of="e2")
    history = fx.History(
        (E1, E2, E3, e4),
        (*TWO_RETRIES.outcomes, ended("e4", 7, fx.ExecutionOutcome.REPORTED_SUCCESS)),
    )
    fx.check_history(history)
    assert fx.newest_attempt(E1, history) == E3
    assert fx.decide(E1, history).step is fx.NextStep.WAIT
    assert fx.newest_attempt(E2, history) == e4
    assert fx.decide(E2, history).step is fx.NextStep.DONE


def test_a_claim_naming_an_effect_it_precedes_is_no_retry_of_it() -> None:
    """Only a later claim retries: an earlier one naming the effect is passed over."""
    early = attempt("e0", 1, retry_of="e1")
    e1 = attempt("e1", 2)
    history = fx.History((early, e1))
    assert fx.newest_attempt(e1, history) == e1
