"""The pure layer agent code decides with: kinds, keys, arguments, resolutions, decide."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ledger import effects as fx
from tests.builders import fs_ref, op, sha

NOW = "2024-01-01T00:00:00.000000+00:00"
RUN = "0123456789abcdef0123456789abcdef"
A = fs_ref("/w/a.txt")
BEFORE, AFTER = sha(b"before"), sha(b"after")


def claim(
    seq: int = 1,
    kind: fx.EffectKind = fx.EffectKind.WRITE,
    effect_id: str = "e1",
    retry_of: str | None = None,
    duties: tuple[fx.Postcondition, ...] = (fx.Postcondition(A, fx.Predicate.SHA256, AFTER),),
) -> fx.EffectClaim:
    return fx.EffectClaim(
        effect_id=effect_id,
        seq=seq,
        action_id="a1",
        operation=op(),
        impact_scope=(A,),
        obligations=duties,
        recorded_at=NOW,
        kind=kind,
        idempotency_key=fx.idempotency_key(RUN, "e1"),
        retry_of=retry_of,
    )


def outcome(
    seq: int,
    execution: fx.ExecutionOutcome = fx.ExecutionOutcome.INTERRUPTED,
    impact: fx.Impact = fx.Impact.POSSIBLE,
    effect_id: str = "e1",
) -> fx.EffectOutcome:
    return fx.EffectOutcome(effect_id, seq, execution, impact, recorded_at=NOW)


def seen(seq: int, digest: str | None, *, exists: bool = True) -> fx.Observation:
    return fx.Observation(
        observation_id=f"o{seq}",
        seq=seq,
        resource=A,
        mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="a1",
        exists=exists,
        sha256=digest if exists else None,
        revision=None,
        recorded_at=NOW,
    )


def step(c: fx.EffectClaim, history: fx.History) -> fx.NextStep:
    return fx.decide(c, history).step


# --------------------------------------------------------------------------- keys and args


def test_an_idempotency_key_is_32_hex_the_same_everywhere_and_per_effect() -> None:
    key = fx.idempotency_key(RUN, "e1")
    assert len(key) == 32
    assert set(key) <= set("0123456789abcdef")
    assert key == fx.idempotency_key(RUN, "e1")
    assert key != fx.idempotency_key(RUN, "e2")
    assert key != fx.idempotency_key("f" * 32, "e1")
    # Length-prefixed: moving a character between run and effect changes the key.
    assert fx.idempotency_key("ab", "c") != fx.idempotency_key("a", "bc")


def test_canonical_args_sort_keys_drop_spaces_and_keep_unicode() -> None:
    assert fx.canonical_args({"b": 1, "a": [True, None, 1.5, "é"]}) == (
        '{"a":[true,null,1.5,"é"],"b":1}'.encode()
    )
    assert fx.canonical_args({"x": (1, 2)}) == fx.canonical_args({"x": [1, 2]})
    assert fx.args_digest({"b": 1, "a": 2}) == fx.args_digest({"a": 2, "b": 1})
    assert fx.args_digest({}) == sha(b"{}")


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        {"x": math.inf},
        {"x": -math.inf},
        {1: "a"},
        {"x": {1, 2}},
        {"x": b"raw"},
        {"x": object()},
        {"x": fx.EffectKind.READ},
        {"x": "\ud800"},
    ],
    ids=["nan", "inf", "-inf", "int-key", "set", "bytes", "object", "enum", "surrogate"],
)
def test_canonical_args_refuse_what_json_cannot_hold_exactly(bad: Any) -> None:
    with pytest.raises(ValueError, match="args"):
        fx.canonical_args(bad)


def test_a_claim_refuses_a_bad_key_or_a_retry_of_itself() -> None:
    with pytest.raises(ValueError, match="idempotency_key"):
        fx.EffectClaim("e1", 1, "a1", op(), (), (), NOW, idempotency_key="ABC")
    with pytest.raises(ValueError, match="retry of itself"):
        fx.EffectClaim("e1", 1, "a1", op(), (), (), NOW, retry_of="e1")
    with pytest.raises(TypeError, match="kind"):
        fx.EffectClaim("e1", 1, "a1", op(), (), (), NOW, kind="write")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- decide, rule by rule


def test_rule_1_a_resolution_decides_before_the_evidence() -> None:
    c = claim(kind=fx.EffectKind.IRREVERSIBLE)
    applied = fx.History((c,), (outcome(2),), (), (fx.Resolution("e1", 3, True, "ops", NOW),))
    assert step(c, applied) is fx.NextStep.DONE
    assert fx.assess(c, applied).resolution == "applied"
    assert not fx.assess(c, applied).unresolved_impact
    assert fx.assess(c, applied).verdict is fx.EffectVerdict.UNVERIFIED  # evidence unchanged
    not_applied = fx.History((c,), (outcome(2),), (), (fx.Resolution("e1", 3, False, "ops", NOW),))
    assert step(c, not_applied) is fx.NextStep.RETRY
    assert "ops" in fx.decide(c, not_applied).reason


def test_rules_2_to_5_follow_the_verdict() -> None:
    c = claim(kind=fx.EffectKind.IRREVERSIBLE)
    assert step(c, fx.History((c,))) is fx.NextStep.WAIT
    done = fx.History((c,), (outcome(2),), (seen(3, AFTER),))
    assert step(c, done) is fx.NextStep.DONE
    failed = fx.History((c,), (outcome(2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE),))
    assert step(c, failed) is fx.NextStep.RETRY
    said = fx.History((c,), (outcome(2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN),))
    assert step(c, said) is fx.NextStep.DONE


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (fx.EffectKind.READ, fx.NextStep.RETRY),
        (fx.EffectKind.IDEMPOTENT, fx.NextStep.RETRY),
        (fx.EffectKind.WRITE, fx.NextStep.ESCALATE),
        (fx.EffectKind.IRREVERSIBLE, fx.NextStep.ESCALATE),
    ],
)
def test_rule_6_an_interrupted_call_is_repeated_only_if_its_kind_allows(
    kind: fx.EffectKind, expected: fx.NextStep
) -> None:
    c = claim(kind=kind)
    decision = fx.decide(c, fx.History((c,), (outcome(2),)))
    assert decision.step is expected
    assert decision.idempotency_key == c.idempotency_key
    assert decision.reason.endswith(".")


def test_rule_7_a_write_whose_target_is_as_it_was_before_is_retried() -> None:
    c = claim(seq=2)
    unchanged = fx.History((c,), (outcome(3),), (seen(1, BEFORE), seen(4, BEFORE)))
    assert fx.assess(c, unchanged).verdict is fx.EffectVerdict.CONTRADICTED
    assert step(c, unchanged) is fx.NextStep.RETRY
    changed = fx.History((c,), (outcome(3),), (seen(1, BEFORE), seen(4, sha(b"other"))))
    assert step(c, changed) is fx.NextStep.ESCALATE
    never_seen_before = fx.History((c,), (outcome(3),), (seen(4, BEFORE),))
    assert step(c, never_seen_before) is fx.NextStep.ESCALATE
    absent_both_times = fx.History(
        (c,), (outcome(3),), (seen(1, None, exists=False), seen(4, None, exists=False))
    )
    assert step(c, absent_both_times) is fx.NextStep.RETRY
    irreversible = claim(seq=2, kind=fx.EffectKind.IRREVERSIBLE)
    assert (
        step(irreversible, fx.History((irreversible,), unchanged.outcomes, unchanged.observations))
        is fx.NextStep.ESCALATE
    )


def test_a_reported_success_the_evidence_contradicts_is_escalated() -> None:
    c = claim(seq=2)
    history = fx.History(
        (c,),
        (outcome(3, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN),),
        (seen(1, BEFORE), seen(4, sha(b"other"))),
    )
    assert step(c, history) is fx.NextStep.ESCALATE


def test_the_newest_retry_speaks_for_the_effect() -> None:
    first = claim(kind=fx.EffectKind.READ)
    retry = claim(seq=3, kind=fx.EffectKind.READ, effect_id="e2", retry_of="e1")
    history = fx.History((first, retry), (outcome(2),))
    assert step(first, history) is fx.NextStep.WAIT  # the retry has no outcome yet
    assert "e2" in fx.decide(first, history).reason
    assert fx.newest_attempt(first, history) == retry
    done = fx.History(
        (first, retry),
        (outcome(2), outcome(4, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.NONE, "e2")),
    )
    assert step(first, done) is fx.NextStep.DONE


def test_check_history_holds_retries_and_resolutions_to_their_claims() -> None:
    c = claim()
    stranger = claim(seq=2, effect_id="e2", retry_of="e9")
    with pytest.raises(ValueError, match="not claimed before it"):
        fx.check_history(fx.History((c, stranger)))
    other_key = fx.EffectClaim(
        "e2", 2, "a1", op(), (), (), NOW, retry_of="e1", idempotency_key="0" * 32
    )
    with pytest.raises(ValueError, match="another idempotency key"):
        fx.check_history(fx.History((c, other_key)))
    twice = (fx.Resolution("e1", 2, True, "ops", NOW), fx.Resolution("e1", 3, False, "ops", NOW))
    with pytest.raises(ValueError, match="resolved twice"):
        fx.check_history(fx.History((c,), (), (), twice))
    with pytest.raises(ValueError, match="not claimed before it"):
        fx.check_history(fx.History((c,), (), (), (fx.Resolution("e9", 2, True, "ops", NOW),)))


def test_external_refs_overlap_at_a_slash_of_the_uri() -> None:
    def ext(locator: str) -> fx.ResourceRef:
        return fx.ResourceRef("external", locator, "target")

    assert fx.overlaps(ext("https://h/v1"), ext("https://h/v1/users/7"))
    assert fx.overlaps(ext("https://h/v1/"), ext("https://h/v1/users"))
    assert fx.overlaps(ext("mcp://srv"), ext("mcp://srv/tool"))
    assert not fx.overlaps(ext("https://h/v1"), ext("https://h/v10"))
    assert not fx.overlaps(ext("mcp://srv"), ext("mcp://srv2/tool"))
    assert not fx.overlaps(ext("x:/w/a"), fx.ResourceRef("fs", "/w/a", "target"))
    for bad in ("no-scheme", "https://h/a b", "https://h/\x07"):
        with pytest.raises(ValueError, match="URI"):
            ext(bad)


# --------------------------------------------------------------------------- rule 7, case by case

B = fs_ref("/w/b.txt")
X, Y = sha(b"x"), sha(b"y")


def state(seq: int, target: fx.ResourceRef = A, **fields: Any) -> fx.Observation:
    """A complete observation of ``target`` with the given exists/sha256/revision."""
    coverage = fields.pop("coverage", fx.Coverage.COMPLETE)
    values: dict[str, Any] = {"exists": True, "sha256": None, "revision": None} | fields
    return fx.Observation(
        observation_id=f"o{seq}",
        seq=seq,
        resource=target,
        mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
        coverage=coverage,
        source_action_id="a1",
        recorded_at=NOW,
        **values,
    )


SAME_STATE = [
    # (before, now, the same?) as decide's rule 7 reads them
    ({"sha256": X}, {"exists": False}, False),
    ({"exists": False}, {"exists": False}, True),
    ({"exists": False}, {"sha256": X}, False),
    ({"sha256": X}, {"sha256": X}, True),
    ({"sha256": X}, {"sha256": Y}, False),
    ({"revision": "r1"}, {"sha256": X, "revision": "r1"}, False),
    ({"sha256": X, "revision": "r1"}, {"revision": "r1"}, False),
    ({"revision": "r1"}, {"revision": "r1"}, True),
    ({"revision": "r1"}, {"revision": "r2"}, False),
    ({}, {}, False),  # nothing but existence seen: not "exactly as it was"
    ({"revision": "r1"}, {"exists": False, "revision": "r1"}, False),
    ({"exists": False, "revision": "r1"}, {"revision": "r1"}, False),
]


@pytest.mark.parametrize(("before", "now", "same"), SAME_STATE)
def test_rule_7_retries_only_a_target_seen_exactly_as_before(
    before: dict[str, Any], now: dict[str, Any], *, same: bool
) -> None:
    """A violated postcondition counts as untouched only for the same absence, digest or revision."""
    # A postcondition the evidence violates, whatever it shows.
    predicate = fx.Predicate.EXISTS if now.get("exists") is False else fx.Predicate.ABSENT
    c = claim(seq=2, duties=(fx.Postcondition(A, predicate),))
    history = fx.History((c,), (outcome(3),), (state(1, **before), state(4, **now)))
    assert fx.assess(c, history).verdict is fx.EffectVerdict.CONTRADICTED
    assert step(c, history) is (fx.NextStep.RETRY if same else fx.NextStep.ESCALATE)


def test_rule_7_takes_the_last_complete_observation_of_the_target_itself_as_before() -> None:
    c = claim(seq=4, duties=(fx.Postcondition(A, fx.Predicate.SHA256, AFTER),))
    after = (outcome(5),)

    def decided(*before: fx.Observation) -> fx.NextStep:
        return step(c, fx.History((c,), after, (*before, state(6, sha256=BEFORE))))

    assert decided(state(1, sha256=BEFORE)) is fx.NextStep.RETRY
    # Another target seen in that state, or the target seen partly, is no baseline.
    assert decided(state(1, B, sha256=BEFORE)) is fx.NextStep.ESCALATE
    assert decided(state(1, sha256=BEFORE, coverage=fx.Coverage.PARTIAL)) is fx.NextStep.ESCALATE
    # The last one before the claim counts; one that says nothing about existence does not.
    assert decided(state(1, sha256=BEFORE), state(2, B, sha256=X)) is fx.NextStep.RETRY
    assert decided(state(1, sha256=X), state(2, sha256=BEFORE)) is fx.NextStep.RETRY
    assert decided(state(1, sha256=BEFORE), state(2, sha256=X)) is fx.NextStep.ESCALATE
    assert decided(state(1, sha256=BEFORE), state(2, exists=None)) is fx.NextStep.RETRY


def test_rule_7_looks_only_at_the_violated_postconditions() -> None:
    """A satisfied postcondition (its target changed, as intended) does not stop a retry."""
    duties = (
        fx.Postcondition(B, fx.Predicate.SHA256, Y),  # satisfied: b.txt changed to y
        fx.Postcondition(A, fx.Predicate.SHA256, AFTER),  # violated: a.txt as before
    )
    c = claim(seq=3, duties=duties)
    seen = (state(1, sha256=BEFORE), state(2, B, sha256=X), state(5, B, sha256=Y))
    history = fx.History((c,), (outcome(4),), (*seen, state(6, sha256=BEFORE)))
    assert fx.assess(c, history).verdict is fx.EffectVerdict.CONTRADICTED
    assert step(c, history) is fx.NextStep.RETRY
    # A postcondition with no evidence at all neither blocks nor allows it.
    unseen = claim(seq=3, duties=(fx.Postcondition(B, fx.Predicate.EXISTS), duties[1]))
    history = fx.History(
        (unseen,), (outcome(4),), (state(1, sha256=BEFORE), state(6, sha256=BEFORE))
    )
    assert step(unseen, history) is fx.NextStep.RETRY


def test_rule_7_is_not_confused_by_stale_observations_of_the_target() -> None:
    """An observation made while another claim on the target was in flight is stale."""
    c = claim(seq=2)
    other = claim(seq=4, effect_id="e2", duties=())
    done = outcome(6, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, "e2")
    history = fx.History(
        (c, other),
        (outcome(3), done),
        (state(1, sha256=BEFORE), state(5, sha256=X), state(7, sha256=BEFORE)),
    )
    assessment = fx.assess(c, history)
    assert (assessment.verdict, assessment.stale) == (fx.EffectVerdict.CONTRADICTED, ("o5",))
    assert step(c, history) is fx.NextStep.RETRY


def test_a_later_claim_that_is_not_a_retry_does_not_speak_for_the_effect() -> None:
    first = claim(kind=fx.EffectKind.READ)
    unrelated = claim(seq=3, kind=fx.EffectKind.READ, effect_id="e2")
    history = fx.History((first, unrelated), (outcome(2),))
    assert fx.newest_attempt(first, history) == first
    assert step(first, history) is fx.NextStep.RETRY


REASONS = [
    (
        fx.History((claim(),), (), (), (fx.Resolution("e1", 2, True, "ops", NOW),)),
        "A person (ops) checked that it landed.",
    ),
    (
        fx.History((claim(),), (), (), (fx.Resolution("e1", 2, False, "ops", NOW),)),
        "A person (ops) checked that it did not land.",
    ),
    (
        fx.History(
            (claim(),),
            (),
            (),
            (
                fx.Resolution(
                    "e1", 2, True, "ops", NOW, "", fx.ResolutionOrigin.WORKER, "u", "h", "a.py", 7
                ),
            ),
        ),
        "Its own worker, not a person, resolved that it landed (ops).",
    ),
    (
        fx.History((claim(),), (outcome(2),), (seen(3, AFTER),)),
        "Its postconditions are observed to hold.",
    ),
    (fx.History((claim(),)), "It has no outcome yet: its call may still be running."),
    (
        fx.History((claim(),), (outcome(2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE),)),
        "It failed without effect.",
    ),
    (
        fx.History(
            (claim(),), (outcome(2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN),)
        ),
        "Its call reported success and no evidence says otherwise.",
    ),
    (
        fx.History((claim(kind=fx.EffectKind.READ),), (outcome(2),)),
        "It only reads, so running it again changes nothing.",
    ),
    (
        fx.History((claim(kind=fx.EffectKind.IDEMPOTENT),), (outcome(2),)),
        "The system it calls ignores a repeat with the same key.",
    ),
    (
        fx.History((claim(seq=2),), (outcome(3),), (seen(1, BEFORE), seen(4, BEFORE))),
        "Its targets are observed exactly as they were before it.",
    ),
    (
        fx.History((claim(kind=fx.EffectKind.IRREVERSIBLE),), (outcome(2),)),
        "It cannot be undone or observed: a person must check.",
    ),
    (
        fx.History((claim(seq=2),), (outcome(3),), (seen(1, BEFORE), seen(4, X))),
        "The evidence contradicts it: a person must check.",
    ),
    (fx.History((claim(),), (outcome(2),)), "It may have landed: a person must check."),
]


@pytest.mark.parametrize(("history", "reason"), REASONS, ids=[r for _, r in REASONS])
def test_each_rule_gives_its_own_reason(history: fx.History, reason: str) -> None:
    """The sentence says which rule decided, capitalised, with a full stop."""
    assert fx.decide(history.claims[0], history).reason == reason
