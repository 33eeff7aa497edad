"""``fx.assess``: one test per verdict rule (docs/concepts.md), a worked example, and properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import effects as fx
from tests.builders import (
    ABSENT,
    CERTAIN,
    CONTRADICTED,
    EXISTS,
    FAILED,
    FAILED_VERDICT,
    INTERRUPTED,
    NONE,
    PENDING,
    POSSIBLE,
    REVISION,
    RUNNING,
    SHA256,
    SUCCESS,
    UNVERIFIED,
    VERIFIED,
    fs_ref,
    op,
    sha,
)

NOW = fx.utc_now()
A = fs_ref("/sandbox/a.txt")
B = fs_ref("/sandbox/b.txt")
DIR = fs_ref("/sandbox")
D1, D2 = sha(b"one"), sha(b"two")


# --------------------------------------------------------------------------- builders


def cond(
    target: fx.ResourceRef = A, predicate: fx.Predicate = EXISTS, expected: str | None = None
) -> fx.Postcondition:
    """A postcondition on ``target``."""
    return fx.Postcondition(target, predicate, expected)


def claim(
    effect_id: str,
    seq: int,
    scope: tuple[fx.ResourceRef, ...] = (A,),
    obligations: tuple[fx.Postcondition, ...] | None = None,
) -> fx.EffectClaim:
    """A claim touching ``scope``; by default obliged to make ``A`` exist."""
    if obligations is None:
        obligations = (cond(A, EXISTS),)
    return fx.EffectClaim(effect_id, seq, f"act-{effect_id}", op(), scope, obligations, NOW)


def outcome(
    effect_id: str,
    seq: int,
    execution: fx.ExecutionOutcome = SUCCESS,
    impact: fx.Impact = POSSIBLE,
    *,
    replayed: bool = False,
) -> fx.EffectOutcome:
    """An outcome of ``effect_id``."""
    return fx.EffectOutcome(effect_id, seq, execution, impact, replayed=replayed, recorded_at=NOW)


def seen(
    observation_id: str,
    seq: int,
    resource: fx.ResourceRef = A,
    *,
    exists: bool | None = True,
    sha256: str | None = None,
    revision: str | None = None,
    coverage: fx.Coverage = fx.Coverage.COMPLETE,
) -> fx.Observation:
    """An observation of ``resource``; by default complete and showing it exists."""
    return fx.Observation(
        observation_id,
        seq,
        resource,
        fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage,
        "reader",
        exists,
        sha256,
        revision,
        NOW,
    )


def history(*records: fx.EffectClaim | fx.EffectOutcome | fx.Observation) -> fx.History:
    """A valid history of ``records`` (checked with ``fx.check_history``)."""
    ordered = sorted(records, key=lambda r: r.seq)
    result = fx.History(
        claims=tuple(r for r in ordered if isinstance(r, fx.EffectClaim)),
        outcomes=tuple(r for r in ordered if isinstance(r, fx.EffectOutcome)),
        observations=tuple(r for r in ordered if isinstance(r, fx.Observation)),
    )
    fx.check_history(result)
    return result


def assess(
    effect_id: str, *records: fx.EffectClaim | fx.EffectOutcome | fx.Observation
) -> fx.Assessment:
    """Assess ``effect_id`` against the history of ``records``."""
    h = history(*records)
    c = h.claim(effect_id)
    assert c is not None
    return fx.assess(c, h)


def verdict_of(
    effect_id: str, *records: Any
) -> tuple[fx.EffectVerdict, tuple[str, ...], tuple[str, ...]]:
    """The verdict, evidence and stale ids of ``effect_id``."""
    result = assess(effect_id, *records)
    return result.verdict, result.evidence, result.stale


# --------------------------------------------------------------------------- 1. PENDING


def test_pending_without_outcome() -> None:
    """Rule 1: a claim with no outcome is PENDING, with no execution or impact and possible impact."""
    result = assess("e1", claim("e1", 1), seen("o1", 2))
    assert result == fx.Assessment("e1", PENDING, None, None, True, (), ())


def test_pending_while_running() -> None:
    """Rule 1: a RUNNING current outcome is PENDING even when an observation satisfies the claim."""
    result = assess("e1", claim("e1", 1), outcome("e1", 2, RUNNING, CERTAIN), seen("o1", 3))
    assert result == fx.Assessment("e1", PENDING, RUNNING, CERTAIN, True, (), ())


def test_last_running_outcome_is_current() -> None:
    """current is the last RUNNING outcome when there is no terminal one."""
    result = assess(
        "e1", claim("e1", 1), outcome("e1", 2, RUNNING, CERTAIN), outcome("e1", 3, RUNNING, NONE)
    )
    assert result == fx.Assessment("e1", PENDING, RUNNING, NONE, False, (), ())


def test_running_then_terminal_uses_terminal() -> None:
    """current is the terminal outcome once one follows RUNNING; its execution and impact are reported."""
    result = assess(
        "e1",
        claim("e1", 1),
        outcome("e1", 2, RUNNING, POSSIBLE),
        outcome("e1", 3, SUCCESS, CERTAIN),
        seen("o1", 4),
    )
    assert result == fx.Assessment("e1", VERIFIED, SUCCESS, CERTAIN, False, ("o1",), ())


def test_outcomes_of_other_effects_do_not_count() -> None:
    """Only outcomes with the claim's effect_id make its current outcome."""
    result = assess("e1", claim("e1", 1), claim("e2", 2, (B,)), outcome("e2", 3), seen("o1", 4))
    assert result == fx.Assessment("e1", PENDING, None, None, True, (), ())


# --------------------------------------------------------------------------- 2. FAILED


def test_failed_with_no_impact_is_failed() -> None:
    """Rule 2: FAILED with impact NONE is FAILED, whatever later observations show."""
    result = assess(
        "e1", claim("e1", 1), outcome("e1", 2, FAILED, NONE), seen("o1", 3, exists=False)
    )
    assert result == fx.Assessment("e1", FAILED_VERDICT, FAILED, NONE, False, (), ())


@pytest.mark.parametrize("impact", [POSSIBLE, CERTAIN])
def test_failed_with_possible_impact_is_not_settled_clean(impact: fx.Impact) -> None:
    """Rule 2: FAILED with impact POSSIBLE or CERTAIN is not settled-clean, so evidence decides."""
    unobserved = assess("e1", claim("e1", 1), outcome("e1", 2, FAILED, impact))
    assert unobserved == fx.Assessment("e1", UNVERIFIED, FAILED, impact, True, (), ())
    observed = assess("e1", claim("e1", 1), outcome("e1", 2, FAILED, impact), seen("o1", 3))
    assert observed == fx.Assessment("e1", VERIFIED, FAILED, impact, False, ("o1",), ())


def test_reported_success_with_no_impact_is_not_failed() -> None:
    """Only a FAILED execution is settled-clean: REPORTED_SUCCESS with impact NONE is assessed on evidence."""
    result = assess("e1", claim("e1", 1), outcome("e1", 2, SUCCESS, NONE))
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, NONE, False, (), ())


# --------------------------------------------------------------------------- 3. CONTRADICTED

VIOLATIONS: list[Any] = [
    pytest.param(cond(A, EXISTS), {"exists": False}, id="exists-false"),
    pytest.param(cond(A, ABSENT), {"exists": True}, id="absent-true"),
    pytest.param(cond(A, SHA256, D1), {"exists": False}, id="sha256-missing"),
    pytest.param(
        cond(A, SHA256, D1), {"exists": False, "sha256": D1}, id="sha256-missing-same-digest"
    ),
    pytest.param(cond(A, SHA256, D1), {"exists": True, "sha256": D2}, id="sha256-differs"),
    pytest.param(
        cond(A, SHA256, D1), {"exists": None, "sha256": D2}, id="sha256-differs-exists-unknown"
    ),
    pytest.param(cond(A, REVISION, "r1"), {"exists": False}, id="revision-missing"),
    pytest.param(
        cond(A, REVISION, "r1"), {"exists": False, "revision": "r1"}, id="revision-missing-same-rev"
    ),
    pytest.param(
        cond(A, REVISION, "r1"), {"exists": True, "revision": "r2"}, id="revision-differs"
    ),
    pytest.param(
        cond(A, REVISION, "r1"),
        {"exists": None, "revision": "r2"},
        id="revision-differs-exists-unknown",
    ),
]


@pytest.mark.parametrize(("obligation", "observed"), VIOLATIONS)
def test_violated_obligation_is_contradicted(
    obligation: fx.Postcondition, observed: dict[str, Any]
) -> None:
    """Rule 3: evidence that violates an obligation (per the predicate table) makes the claim CONTRADICTED."""
    result = assess(
        "e1", claim("e1", 1, obligations=(obligation,)), outcome("e1", 2), seen("o1", 3, **observed)
    )
    assert result == fx.Assessment("e1", CONTRADICTED, SUCCESS, POSSIBLE, True, ("o1",), ())


def test_contradiction_wins_over_satisfied_obligations() -> None:
    """Rule 3: one violated obligation makes the claim CONTRADICTED even when others are satisfied."""
    result = assess(
        "e1",
        claim("e1", 1, (A, B), (cond(A, EXISTS), cond(B, ABSENT))),
        outcome("e1", 2, SUCCESS, CERTAIN),
        seen("oa", 3, A, exists=True),
        seen("ob", 4, B, exists=True),
    )
    assert result == fx.Assessment("e1", CONTRADICTED, SUCCESS, CERTAIN, True, ("oa", "ob"), ())


def test_contradicted_with_no_impact_has_no_unresolved_impact() -> None:
    """CONTRADICTED with impact NONE has unresolved_impact False."""
    result = assess(
        "e1", claim("e1", 1), outcome("e1", 2, SUCCESS, NONE), seen("o1", 3, exists=False)
    )
    assert result == fx.Assessment("e1", CONTRADICTED, SUCCESS, NONE, False, ("o1",), ())


def test_contradiction_then_later_satisfaction_verifies() -> None:
    """Evidence is the highest-seq fresh candidate: a later satisfying observation replaces a violating one."""
    records = (claim("e1", 1), outcome("e1", 2))
    assert verdict_of("e1", *records, seen("o1", 3, exists=False), seen("o2", 4)) == (
        VERIFIED,
        ("o2",),
        (),
    )
    assert verdict_of("e1", *records, seen("o1", 3), seen("o2", 4, exists=False)) == (
        CONTRADICTED,
        ("o2",),
        (),
    )


# --------------------------------------------------------------------------- 4. VERIFIED

SATISFACTIONS: list[Any] = [
    pytest.param(cond(A, EXISTS), {"exists": True}, id="exists"),
    pytest.param(cond(A, ABSENT), {"exists": False}, id="absent"),
    pytest.param(cond(A, SHA256, D1), {"exists": True, "sha256": D1}, id="sha256"),
    pytest.param(cond(A, SHA256, D1), {"exists": None, "sha256": D1}, id="sha256-exists-unknown"),
    pytest.param(cond(A, REVISION, "r1"), {"exists": True, "revision": "r1"}, id="revision"),
    pytest.param(
        cond(A, REVISION, "r1"), {"exists": None, "revision": "r1"}, id="revision-exists-unknown"
    ),
]


@pytest.mark.parametrize(("obligation", "observed"), SATISFACTIONS)
def test_satisfied_obligation_is_verified(
    obligation: fx.Postcondition, observed: dict[str, Any]
) -> None:
    """Rule 4: evidence that satisfies the only obligation (per the predicate table) makes the claim VERIFIED."""
    result = assess(
        "e1", claim("e1", 1, obligations=(obligation,)), outcome("e1", 2), seen("o1", 3, **observed)
    )
    assert result == fx.Assessment("e1", VERIFIED, SUCCESS, POSSIBLE, False, ("o1",), ())


def test_every_obligation_satisfied_is_verified() -> None:
    """Rule 4: a claim is VERIFIED when every obligation has satisfying evidence; evidence follows obligation order."""
    result = assess(
        "e1",
        claim("e1", 1, (A, B), (cond(B, SHA256, D2), cond(A, EXISTS))),
        outcome("e1", 2, SUCCESS, CERTAIN),
        seen("oa", 3, A),
        seen("ob", 4, B, sha256=D2),
    )
    assert result == fx.Assessment("e1", VERIFIED, SUCCESS, CERTAIN, False, ("ob", "oa"), ())


def test_one_observation_may_serve_several_obligations() -> None:
    """Evidence lists one id per obligation, so an observation deciding two obligations appears twice."""
    result = assess(
        "e1",
        claim("e1", 1, obligations=(cond(A, EXISTS), cond(A, SHA256, D1))),
        outcome("e1", 2),
        seen("o1", 3, sha256=D1),
    )
    assert (result.verdict, result.evidence) == (VERIFIED, ("o1", "o1"))


def test_interrupted_write_observed_in_place_verifies() -> None:
    """Rule 4: an INTERRUPTED (replayed) effect whose result is observed in place is VERIFIED."""
    result = assess(
        "e1",
        claim("e1", 1, obligations=(cond(A, SHA256, D1),)),
        outcome("e1", 2, INTERRUPTED, POSSIBLE, replayed=True),
        seen("o1", 3, sha256=D1),
    )
    assert result == fx.Assessment("e1", VERIFIED, INTERRUPTED, POSSIBLE, False, ("o1",), ())


def test_role_and_revision_of_the_observed_ref_do_not_matter() -> None:
    """A candidate needs the same kind and locator as the target; role and ref revision are ignored."""
    note = fx.ResourceRef("owned", "notes/u/t/c/n1", "target", "r1")
    seen_as = fx.ResourceRef("owned", "notes/u/t/c/n1", "observed", "r2")
    result = assess(
        "e1",
        claim("e1", 1, (note,), (cond(note, REVISION, "r2"),)),
        outcome("e1", 2),
        seen("o1", 3, seen_as, revision="r2"),
    )
    assert (result.verdict, result.evidence) == (VERIFIED, ("o1",))


# --------------------------------------------------------------------------- 5. UNVERIFIED


@pytest.mark.parametrize(("impact", "unresolved"), [(POSSIBLE, True), (NONE, False)])
def test_no_obligations_is_unverified(impact: fx.Impact, unresolved: bool) -> None:
    """Rule 5: a finished claim without obligations is UNVERIFIED, never VERIFIED."""
    result = assess(
        "e1", claim("e1", 1, obligations=()), outcome("e1", 2, SUCCESS, impact), seen("o1", 3)
    )
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, impact, unresolved, (), ())


UNDECIDABLE: list[Any] = [
    pytest.param(cond(A, EXISTS), {"exists": None}, id="exists-unknown"),
    pytest.param(cond(A, ABSENT), {"exists": None}, id="absent-unknown"),
    pytest.param(cond(A, SHA256, D1), {"exists": True, "sha256": None}, id="sha256-not-read"),
    pytest.param(cond(A, SHA256, D1), {"exists": None, "sha256": None}, id="sha256-nothing"),
    pytest.param(
        cond(A, SHA256, D1), {"exists": True, "revision": "r1"}, id="sha256-only-revision"
    ),
    pytest.param(
        cond(A, REVISION, "r1"), {"exists": True, "revision": None}, id="revision-not-read"
    ),
    pytest.param(
        cond(A, REVISION, "r1"), {"exists": True, "sha256": D1}, id="revision-only-digest"
    ),
]


@pytest.mark.parametrize(("obligation", "observed"), UNDECIDABLE)
def test_undecidable_observation_is_not_evidence(
    obligation: fx.Postcondition, observed: dict[str, Any]
) -> None:
    """Rule 5: an observation that cannot decide the predicate is no evidence, so the claim is UNVERIFIED."""
    result = assess(
        "e1", claim("e1", 1, obligations=(obligation,)), outcome("e1", 2), seen("o1", 3, **observed)
    )
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ())


def test_undecidable_later_observation_keeps_earlier_evidence() -> None:
    """Evidence is the highest-seq candidate that can decide: an undecidable later one is skipped."""
    assert verdict_of(
        "e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3), seen("o2", 4, exists=None)
    ) == (VERIFIED, ("o1",), ())


def test_missing_evidence_for_one_obligation_is_unverified() -> None:
    """Rule 5: if any obligation lacks evidence the claim is UNVERIFIED; evidence lists the others."""
    result = assess(
        "e1",
        claim("e1", 1, (A, B), (cond(A, EXISTS), cond(B, EXISTS))),
        outcome("e1", 2),
        seen("oa", 3, A),
    )
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, POSSIBLE, True, ("oa",), ())


def test_partial_coverage_is_ignored() -> None:
    """An observation with PARTIAL coverage is never a candidate, neither evidence nor stale."""
    assert verdict_of(
        "e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3, coverage=fx.Coverage.PARTIAL)
    ) == (UNVERIFIED, (), ())
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3, exists=False, coverage=fx.Coverage.PARTIAL),
    ) == (UNVERIFIED, (), ())
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3, coverage=fx.Coverage.PARTIAL),
        claim("e2", 4),
    ) == (UNVERIFIED, (), ())


def test_observations_before_the_outcome_are_ignored() -> None:
    """Observations with seq before the current outcome's seq (before the claim, or before it ended) are no candidates."""
    assert verdict_of("e1", seen("o0", 1), claim("e1", 2), seen("o1", 3), outcome("e1", 4)) == (
        UNVERIFIED,
        (),
        (),
    )
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2, RUNNING),
        seen("o1", 3, exists=False),
        outcome("e1", 4),
    ) == (UNVERIFIED, (), ())


def test_observation_at_the_outcome_seq_is_ignored() -> None:
    """An observation sharing the current outcome's seq is not after it, so it is no candidate."""
    h = fx.History(
        claims=(claim("e1", 1),), outcomes=(outcome("e1", 2),), observations=(seen("o1", 2),)
    )
    assert fx.assess(h.claims[0], h) == fx.Assessment(
        "e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ()
    )


def test_overlap_only_observation_is_not_evidence() -> None:
    """Seeing the parent directory (or a file inside a claimed directory) is not evidence for the target."""
    assert verdict_of("e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3, DIR)) == (
        UNVERIFIED,
        (),
        (),
    )
    on_dir = claim("e1", 1, (DIR,), (cond(DIR, EXISTS),))
    assert verdict_of("e1", on_dir, outcome("e1", 2), seen("o1", 3, A)) == (UNVERIFIED, (), ())


def test_same_locator_of_another_kind_is_not_evidence() -> None:
    """An owned record whose locator equals the fs target's path is not evidence for it."""
    twin = fx.ResourceRef("owned", A.locator, "target")
    assert verdict_of("e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3, twin)) == (
        UNVERIFIED,
        (),
        (),
    )


# --------------------------------------------------------------------------- staleness


def test_claim_after_observation_makes_it_stale() -> None:
    """Stale: another overlapping claim made after O (here on the parent directory) makes O stale."""
    result = assess("e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3), claim("e2", 4, (DIR,)))
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ("o1",))


def test_claim_without_terminal_outcome_before_observation_makes_it_stale() -> None:
    """Stale: another overlapping claim made before O with no terminal outcome before O makes O stale."""
    records = (claim("e2", 1), claim("e1", 2), outcome("e1", 3), seen("o1", 4))
    assert verdict_of("e1", *records) == (UNVERIFIED, (), ("o1",))
    assert verdict_of(
        "e1", *records[:2], outcome("e2", 3, RUNNING), outcome("e1", 4), seen("o1", 5)
    ) == (
        UNVERIFIED,
        (),
        ("o1",),
    )
    assert verdict_of("e1", *records, outcome("e2", 5, SUCCESS, CERTAIN)) == (
        UNVERIFIED,
        (),
        ("o1",),
    )


def test_claim_settled_before_observation_does_not_stale_it() -> None:
    """An overlapping claim with a terminal outcome before O was not in flight, so O is fresh."""
    assert verdict_of(
        "e1",
        claim("e2", 1),
        claim("e1", 2),
        outcome("e2", 3, SUCCESS, CERTAIN),
        outcome("e1", 4),
        seen("o1", 5),
    ) == (VERIFIED, ("o1",), ())


def test_settled_clean_claim_does_not_stale() -> None:
    """A claim in flight during O whose current outcome is FAILED with impact NONE does not make O stale."""
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3),
        claim("e2", 4),
        outcome("e2", 5, FAILED, NONE),
    ) == (VERIFIED, ("o1",), ())
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        claim("e2", 3),
        outcome("e2", 4, RUNNING, POSSIBLE),
        seen("o1", 5),
        outcome("e2", 6, FAILED, NONE),
    ) == (VERIFIED, ("o1",), ())


def test_failed_with_possible_impact_still_stales() -> None:
    """A claim in flight during O that FAILED with impact POSSIBLE is not settled-clean, so O is stale."""
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3),
        claim("e2", 4),
        outcome("e2", 5, FAILED, POSSIBLE),
    ) == (UNVERIFIED, (), ("o1",))


def test_non_overlapping_claim_does_not_stale() -> None:
    """A claim in flight whose scope does not overlap the target leaves O fresh."""
    assert verdict_of(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3),
        claim("e2", 4, (B, fx.ResourceRef("owned", A.locator, "t"))),
    ) == (VERIFIED, ("o1",), ())


def test_claim_obligations_do_not_count_as_scope() -> None:
    """Staleness looks at the other claim's impact scope, not at its obligations."""
    other = claim("e2", 4, (B,), (cond(A, EXISTS),))
    assert verdict_of("e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3), other) == (
        VERIFIED,
        ("o1",),
        (),
    )


@pytest.mark.parametrize(
    ("target", "other", "stale"),
    [
        pytest.param("/a", "/ab", False, id="a-vs-ab"),
        pytest.param("/ab", "/a", False, id="ab-vs-a"),
        pytest.param("/a/b", "/a", True, id="parent-claimed"),
        pytest.param("/a", "/a/b", True, id="child-claimed"),
        pytest.param("/a/b", "/", True, id="root-claimed"),
        pytest.param("/", "/z", True, id="root-target"),
    ],
)
def test_staleness_follows_path_overlap(target: str, other: str, stale: bool) -> None:
    """Staleness uses fs overlap: ``/a`` and ``/ab`` are unrelated, ancestors and ``/`` overlap."""
    ref = fs_ref(target)
    expected = (UNVERIFIED, (), ("o1",)) if stale else (VERIFIED, ("o1",), ())
    assert (
        verdict_of(
            "e1",
            claim("e1", 1, (ref,), (cond(ref, EXISTS),)),
            outcome("e1", 2),
            seen("o1", 3, ref),
            claim("e2", 4, (fs_ref(other),)),
        )
        == expected
    )


def test_owned_claim_stales_only_the_same_record() -> None:
    """Owned refs overlap only with an equal locator, whatever their revisions."""
    note = fx.ResourceRef("owned", "notes/u/t/c/n1", "target")
    sibling = fx.ResourceRef("owned", "notes/u/t/c/n10", "target")
    same = fx.ResourceRef("owned", "notes/u/t/c/n1", "editor", "r9")
    records = (
        claim("e1", 1, (note,), (cond(note, EXISTS),)),
        outcome("e1", 2),
        seen("o1", 3, note),
    )
    assert verdict_of("e1", *records, claim("e2", 4, (sibling,))) == (VERIFIED, ("o1",), ())
    assert verdict_of("e1", *records, claim("e2", 4, (same,))) == (UNVERIFIED, (), ("o1",))


def test_fresh_evidence_after_stale_candidate() -> None:
    """A stale candidate is listed in stale while a later fresh one is the evidence."""
    result = assess(
        "e1",
        claim("e1", 1),
        outcome("e1", 2),
        seen("o1", 3),
        claim("e2", 4, (B, DIR)),
        outcome("e2", 5, SUCCESS, CERTAIN),
        seen("o2", 6),
    )
    assert result == fx.Assessment("e1", VERIFIED, SUCCESS, POSSIBLE, False, ("o2",), ("o1",))


def test_stale_candidate_that_cannot_decide_is_still_listed() -> None:
    """stale lists every stale candidate, even one that could not decide the predicate."""
    assert verdict_of(
        "e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3, exists=None), claim("e2", 4)
    ) == (UNVERIFIED, (), ("o1",))


def test_stale_ids_in_seq_order_each_once() -> None:
    """stale lists each stale candidate once, in seq order, across obligations."""
    result = assess(
        "e1",
        claim("e1", 1, (A, B), (cond(B, EXISTS), cond(A, EXISTS), cond(A, SHA256, D1))),
        outcome("e1", 2),
        claim("e2", 3, (DIR,)),
        seen("oa1", 4, A, sha256=D1),
        seen("ob", 5, B),
        seen("oa2", 6, A, sha256=D1),
    )
    assert result == fx.Assessment(
        "e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ("oa1", "ob", "oa2")
    )


def test_stale_is_mixed_with_evidence_per_obligation() -> None:
    """Only obligations whose target another claim overlaps lose their evidence to staleness."""
    result = assess(
        "e1",
        claim("e1", 1, (A, B), (cond(A, EXISTS), cond(B, EXISTS))),
        outcome("e1", 2),
        seen("oa", 3, A),
        seen("ob", 4, B),
        claim("e2", 5, (B,)),
    )
    assert result == fx.Assessment("e1", UNVERIFIED, SUCCESS, POSSIBLE, True, ("oa",), ("ob",))


def test_stale_violation_does_not_contradict() -> None:
    """A stale observation that would violate the obligation is not evidence, so it cannot contradict."""
    assert verdict_of(
        "e1", claim("e1", 1), outcome("e1", 2), seen("o1", 3, exists=False), claim("e2", 4)
    ) == (UNVERIFIED, (), ("o1",))


def test_own_scope_never_stales() -> None:
    """The assessed claim itself is never the other claim that makes its evidence stale."""
    assert verdict_of("e1", claim("e1", 1, (fs_ref("/"),)), outcome("e1", 2), seen("o1", 3)) == (
        VERIFIED,
        ("o1",),
        (),
    )


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(
            (
                claim("e1", 1),
                outcome("e1", 2, RUNNING),
                seen("o1", 3),
                claim("e2", 4),
                seen("o2", 5),
            ),
            id="pending",
        ),
        pytest.param(
            (
                claim("e1", 1),
                outcome("e1", 2, FAILED, NONE),
                seen("o1", 3),
                claim("e2", 4),
                seen("o2", 5),
            ),
            id="failed",
        ),
    ],
)
def test_evidence_and_stale_empty_when_pending_or_failed(records: tuple[Any, ...]) -> None:
    """PENDING and FAILED assessments carry no evidence and no stale ids, whatever was observed."""
    result = assess("e1", *records)
    assert result.verdict in {PENDING, FAILED_VERDICT}
    assert (result.evidence, result.stale) == ((), ())


# --------------------------------------------------------------------------- unresolved_impact


@pytest.mark.parametrize(
    ("records", "verdict", "unresolved"),
    [
        pytest.param((claim("e1", 1),), PENDING, True, id="pending-no-outcome"),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, RUNNING, POSSIBLE)),
            PENDING,
            True,
            id="pending-possible",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, RUNNING, NONE)), PENDING, False, id="pending-none"
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, SUCCESS, NONE)),
            UNVERIFIED,
            False,
            id="unverified-none",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, SUCCESS, CERTAIN)),
            UNVERIFIED,
            True,
            id="unverified-certain",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, INTERRUPTED, POSSIBLE, replayed=True)),
            UNVERIFIED,
            True,
            id="unverified-interrupted",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, SUCCESS, NONE), seen("o1", 3, exists=False)),
            CONTRADICTED,
            False,
            id="contradicted-none",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, SUCCESS, CERTAIN), seen("o1", 3, exists=False)),
            CONTRADICTED,
            True,
            id="contradicted-certain",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, SUCCESS, CERTAIN), seen("o1", 3)),
            VERIFIED,
            False,
            id="verified",
        ),
        pytest.param(
            (claim("e1", 1), outcome("e1", 2, FAILED, NONE)), FAILED_VERDICT, False, id="failed"
        ),
    ],
)
def test_unresolved_impact_truth_table(
    records: tuple[Any, ...], verdict: fx.EffectVerdict, unresolved: bool
) -> None:
    """unresolved_impact is true exactly for PENDING, UNVERIFIED or CONTRADICTED with impact other than NONE."""
    result = assess("e1", *records)
    assert (result.verdict, result.unresolved_impact) == (verdict, unresolved)


# --------------------------------------------------------------------------- worked example


def test_worked_example() -> None:
    """A worked example: verified, made stale by a new claim, recovered, re-verified."""
    e1 = claim("e1", 1)
    step1 = (e1, outcome("e1", 2, SUCCESS, POSSIBLE), seen("o1", 3))
    h1 = history(*step1)
    assert fx.assess(e1, h1) == fx.Assessment("e1", VERIFIED, SUCCESS, POSSIBLE, False, ("o1",), ())

    e2 = claim("e2", 4)
    h2 = history(*step1, e2)
    assert fx.assess(e1, h2) == fx.Assessment(
        "e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ("o1",)
    )
    assert fx.assess(e2, h2) == fx.Assessment("e2", PENDING, None, None, True, (), ())

    recovered = outcome("e2", 5, INTERRUPTED, POSSIBLE, replayed=True)
    h3 = history(*step1, e2, recovered)
    assert fx.assess(e2, h3) == fx.Assessment("e2", UNVERIFIED, INTERRUPTED, POSSIBLE, True, (), ())
    assert fx.assess(e1, h3) == fx.Assessment(
        "e1", UNVERIFIED, SUCCESS, POSSIBLE, True, (), ("o1",)
    )

    h4 = history(*step1, e2, recovered, seen("o2", 6))
    assert fx.assess(e1, h4) == fx.Assessment(
        "e1", VERIFIED, SUCCESS, POSSIBLE, False, ("o2",), ("o1",)
    )
    assert fx.assess(e2, h4) == fx.Assessment(
        "e2", VERIFIED, INTERRUPTED, POSSIBLE, False, ("o2",), ()
    )


def test_assess_rejects_non_records() -> None:
    """assess raises TypeError unless given an EffectClaim and a History."""
    h = history(claim("e1", 1))
    with pytest.raises(TypeError):
        fx.assess("e1", h)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fx.assess(h.claims[0], h.to_dict())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

# A small world, weighted so that verdicts of every kind and stale candidates come up often.
_REFS = [fs_ref(p) for p in ("/s/a",) * 6 + ("/s", "/s/ab", "/", "/t")] + [
    fx.ResourceRef("owned", loc, "target") for loc in ("n/1", "n/1", "n/10")
]
_refs = st.sampled_from(_REFS)
_conds = (
    st.builds(cond, _refs, st.sampled_from([EXISTS, EXISTS, EXISTS, ABSENT]))
    | st.builds(cond, _refs, st.just(SHA256), st.sampled_from([D1, D1, D2]))
    | st.builds(cond, _refs, st.just(REVISION), st.sampled_from(["r1", "r1", "r2"]))
)
_EVENTS = ["claim", "observation", "observation", "outcome"]


@st.composite
def valid_histories(draw: st.DrawFn) -> fx.History:
    """A history a durable run can hold: gap-free seqs, outcomes after claims, none after terminal."""
    claims: list[fx.EffectClaim] = []
    outcomes: list[fx.EffectOutcome] = []
    observations: list[fx.Observation] = []
    settled: set[str] = set()

    def add_outcome(effect_id: str, *, terminal: bool = False) -> None:
        executions = [SUCCESS, FAILED, INTERRUPTED, SUCCESS] + ([] if terminal else [RUNNING])
        execution = draw(st.sampled_from(executions))
        if execution is INTERRUPTED:
            impact, replayed = POSSIBLE, draw(st.booleans())
        else:
            impact, replayed = draw(st.sampled_from(fx.Impact)), False
        seq = len(claims) + len(outcomes) + len(observations) + 1
        outcomes.append(outcome(effect_id, seq, execution, impact, replayed=replayed))
        if execution is not RUNNING:
            settled.add(effect_id)

    def add_observation(ref: fx.ResourceRef) -> None:
        observations.append(
            seen(
                f"o{len(observations) + 1}",
                len(claims) + len(outcomes) + len(observations) + 1,
                ref,
                exists=draw(st.sampled_from([True, True, False, None])),
                sha256=draw(st.sampled_from([D1, D1, D2, None])),
                revision=draw(st.sampled_from(["r1", "r1", "r2", None])),
                coverage=draw(st.sampled_from([fx.Coverage.COMPLETE] * 3 + [fx.Coverage.PARTIAL])),
            )
        )

    for _ in range(draw(st.integers(0, 12) | st.integers(6, 12))):
        seq = len(claims) + len(outcomes) + len(observations) + 1
        open_ids = [c.effect_id for c in claims if c.effect_id not in settled]
        kind = draw(st.sampled_from(_EVENTS if open_ids else _EVENTS[:3]))
        if kind == "claim":
            scope = tuple(draw(st.lists(_refs, max_size=2)))
            obligations = tuple(
                draw(st.lists(_conds, min_size=draw(st.sampled_from([1, 1, 0])), max_size=2))
            )
            claims.append(claim(f"e{len(claims) + 1}", seq, scope, obligations))
            if draw(st.booleans()):  # an effect that ends at once, as most do
                add_outcome(claims[-1].effect_id)
        elif kind == "outcome":
            add_outcome(draw(st.sampled_from(open_ids)))
        else:
            add_observation(draw(_refs))
    if draw(st.booleans()):  # a recovery-like ending: settle what is open, then look again
        for effect_id in [c.effect_id for c in claims if c.effect_id not in settled]:
            add_outcome(effect_id, terminal=True)
        for ref in draw(st.lists(_refs, max_size=3)):
            add_observation(ref)
    return fx.History(tuple(claims), tuple(outcomes), tuple(observations))


def _model(c: fx.EffectClaim, h: fx.History) -> fx.Assessment:
    """The verdict rules of docs/concepts.md transcribed literally, as an independent oracle."""

    def current(effect_id: str) -> fx.EffectOutcome | None:
        outs = [o for o in h.outcomes if o.effect_id == effect_id]
        terminal = [o for o in outs if o.execution is not RUNNING]
        return terminal[0] if terminal else (outs[-1] if outs else None)

    def settled_clean(o: fx.EffectOutcome | None) -> bool:
        return o is not None and o.execution is FAILED and o.impact is NONE

    def overlap(a: fx.ResourceRef, b: fx.ResourceRef) -> bool:
        if a.kind != b.kind:
            return False
        if a.locator == b.locator:
            return True
        return a.kind == "fs" and (
            "/" in (a.locator, b.locator)
            or b.locator.startswith(a.locator + "/")
            or a.locator.startswith(b.locator + "/")
        )

    def in_flight(c2: fx.EffectClaim, o: fx.Observation) -> bool:
        return c2.seq > o.seq or not any(
            x.effect_id == c2.effect_id and x.execution is not RUNNING and x.seq < o.seq
            for x in h.outcomes
        )

    def is_stale(o: fx.Observation, target: fx.ResourceRef) -> bool:
        return any(
            c2.effect_id != c.effect_id
            and any(overlap(r, target) for r in c2.impact_scope)
            and in_flight(c2, o)
            and not settled_clean(current(c2.effect_id))
            for c2 in h.claims
        )

    def decide(p: fx.Postcondition, o: fx.Observation) -> bool | None:
        if p.predicate is EXISTS:
            return {True: True, False: False, None: None}[o.exists]
        if p.predicate is ABSENT:
            return {True: False, False: True, None: None}[o.exists]
        value = o.sha256 if p.predicate is SHA256 else o.revision
        if o.exists is not False and value == p.expected:
            return True
        if o.exists is False or (value is not None and value != p.expected):
            return False
        return None

    cur = current(c.effect_id)
    execution = None if cur is None else cur.execution
    impact = None if cur is None else cur.impact

    def make(
        verdict: fx.EffectVerdict, evidence: tuple[str, ...] = (), stale: tuple[str, ...] = ()
    ) -> fx.Assessment:
        unresolved = verdict in {PENDING, UNVERIFIED, CONTRADICTED} and impact is not NONE
        return fx.Assessment(c.effect_id, verdict, execution, impact, unresolved, evidence, stale)

    if cur is None or cur.execution is RUNNING:
        return make(PENDING)
    if settled_clean(cur):
        return make(FAILED_VERDICT)
    decisions: list[bool | None] = []
    evidence: list[str] = []
    stale: set[fx.Observation] = set()
    for p in c.obligations:
        candidates = [
            o
            for o in h.observations
            if o.seq > cur.seq
            and o.resource.kind == p.target.kind
            and o.resource.locator == p.target.locator
            and o.coverage is fx.Coverage.COMPLETE
        ]
        stale_here = {o for o in candidates if is_stale(o, p.target)}
        stale |= stale_here
        fresh = [o for o in candidates if o not in stale_here and decide(p, o) is not None]
        best = max(fresh, key=lambda o: o.seq, default=None)
        decisions.append(None if best is None else decide(p, best))
        if best is not None:
            evidence.append(best.observation_id)
    stale_ids = tuple(o.observation_id for o in sorted(stale, key=lambda o: o.seq))
    if False in decisions:
        return make(CONTRADICTED, tuple(evidence), stale_ids)
    if c.obligations and all(d is True for d in decisions):
        return make(VERIFIED, tuple(evidence), stale_ids)
    return make(UNVERIFIED, tuple(evidence), stale_ids)


@settings(deadline=None, max_examples=150)
@given(h=valid_histories())
def test_assess_is_pure_and_total(h: fx.History) -> None:
    """On any valid history assess never raises, gives the same answer twice and leaves its inputs unchanged."""
    fx.check_history(h)
    snapshot = h.to_dict()
    observation_ids = [o.observation_id for o in h.observations]
    for c in h.claims:
        claim_snapshot = c.to_dict()
        first = fx.assess(c, h)
        second = fx.assess(c, h)
        assert first == second
        assert c.to_dict() == claim_snapshot
        assert first.effect_id == c.effect_id
        if first.verdict in {PENDING, FAILED_VERDICT}:
            assert (first.evidence, first.stale) == ((), ())
        assert len(first.evidence) <= len(c.obligations)
        assert set(first.evidence) <= set(observation_ids)
        assert not set(first.evidence) & set(first.stale)
        assert list(first.stale) == sorted(set(first.stale), key=observation_ids.index)
    assert h.to_dict() == snapshot


@settings(deadline=None, max_examples=150)
@given(h=valid_histories())
def test_assess_matches_the_written_rules(h: fx.History) -> None:
    """For every claim of any valid history, assess agrees with a literal transcription of its rules."""
    for c in h.claims:
        assert fx.assess(c, h) == _model(c, h)


def test_assess_refuses_arguments_of_the_wrong_type_naming_the_type_given() -> None:
    """A claim or history of another type is an InvalidTypeError saying what was given."""
    with pytest.raises(fx.InvalidTypeError, match=r"^claim must be an EffectClaim, not dict$"):
        fx.assess({}, fx.History())  # type: ignore[arg-type]
    with pytest.raises(fx.InvalidTypeError, match=r"^history must be a History, not list$"):
        fx.assess(claim("e1", 1), [])  # type: ignore[arg-type]
