"""The decision: what a worker should do about an effect (:func:`decide`).

Pure, like the assessment it builds on; the rules are in ``docs/concepts.md#decisions``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

from ledger._core.assessment import _check_args, _current, _evidence, assess
from ledger._core.enums import Coverage, EffectKind, EffectVerdict, ExecutionOutcome, NextStep
from ledger._core.history import History
from ledger._core.records import EffectClaim, Observation, ResourceRef
from ledger._core.values import (
    _build,
    _check_enum,
    _check_key,
    _check_str,
    _Fields,
    check_identifier,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What a worker should do about an effect, and why, in one sentence."""

    effect_id: str
    step: NextStep
    reason: str
    idempotency_key: str

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_enum(self.step, NextStep, "step")
        _check_str(self.reason, "reason")
        _check_key(self.idempotency_key)

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as JSON types."""
        return {
            "effect_id": self.effect_id,
            "step": self.step.value,
            "reason": self.reason,
            "idempotency_key": self.idempotency_key,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a decision from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            step=f.enum("step", NextStep),
            reason=f.raw("reason"),
            idempotency_key=f.raw("idempotency_key"),
        )


def newest_attempt(claim: EffectClaim, history: History) -> EffectClaim:
    """The attempt that speaks for ``claim``: its newest retry's newest retry…, or itself."""
    _check_args(claim, history)
    attempt = claim
    while True:
        retries = [
            c for c in history.claims if c.retry_of == attempt.effect_id and c.seq > attempt.seq
        ]
        if not retries:
            return attempt
        attempt = retries[-1]  # claims are in seq order


def _same_state(now: Observation, before: Observation) -> bool:
    """Whether two observations show a resource exactly alike: both absent, or one digest."""
    if now.exists is False or before.exists is False:
        return now.exists is False and before.exists is False
    if now.sha256 is not None or before.sha256 is not None:
        return now.sha256 == before.sha256
    return now.revision is not None and now.revision == before.revision


def _before(claim: EffectClaim, target: ResourceRef, history: History) -> Observation | None:
    """The last complete observation of ``target`` that says anything, made before ``claim``."""
    found = None
    for obs in history.observations:
        if obs.seq >= claim.seq:
            break
        if (
            obs.coverage is Coverage.COMPLETE
            and obs.exists is not None
            and obs.resource.same_target(target)
        ):
            found = obs
    return found


def _unchanged(claim: EffectClaim, history: History) -> bool:
    """Whether every violated obligation is violated by the target as it was before the claim."""
    current = _current(claim.effect_id, history.outcomes)
    if current is None:
        return False
    violated = 0
    for condition in claim.obligations:
        best = _evidence(claim, condition, current, history, {})
        if best is None or best[1]:
            continue
        violated += 1
        before = _before(claim, condition.target, history)
        if before is None or not _same_state(best[0], before):
            return False
    return violated > 0


def _step(claim: EffectClaim, history: History) -> tuple[NextStep, str]:
    """The first of the decision rules that applies to one attempt, and why."""
    resolution = history.resolution(claim.effect_id)
    if resolution is not None:
        # Who wrote it is said: a worker's word on its own effect is not a person's check.
        landed = "it landed" if resolution.applied else "it did not land"
        step = NextStep.DONE if resolution.applied else NextStep.RETRY
        if resolution.by_person:
            return step, f"a person ({resolution.by}) checked that {landed}"
        return step, f"its own worker, not a person, resolved that {landed} ({resolution.by})"
    assessment = assess(claim, history)
    verdict = assessment.verdict
    if verdict is EffectVerdict.VERIFIED:
        return NextStep.DONE, "its postconditions are observed to hold"
    if verdict is EffectVerdict.PENDING:
        return NextStep.WAIT, "it has no outcome yet: its call may still be running"
    if verdict is EffectVerdict.FAILED:
        return NextStep.RETRY, "it failed without effect"
    if (
        assessment.execution is ExecutionOutcome.REPORTED_SUCCESS
        and verdict is EffectVerdict.UNVERIFIED
    ):
        return NextStep.DONE, "its call reported success and no evidence says otherwise"
    if claim.kind is EffectKind.READ:
        return NextStep.RETRY, "it only reads, so running it again changes nothing"
    if claim.kind is EffectKind.IDEMPOTENT:
        return NextStep.RETRY, "the system it calls ignores a repeat with the same key"
    if (
        claim.kind is EffectKind.WRITE
        and verdict is EffectVerdict.CONTRADICTED
        and _unchanged(claim, history)
    ):
        return NextStep.RETRY, "its targets are observed exactly as they were before it"
    if claim.kind is EffectKind.IRREVERSIBLE:
        return NextStep.ESCALATE, "it cannot be undone or observed: a person must check"
    if verdict is EffectVerdict.CONTRADICTED:
        return NextStep.ESCALATE, "the evidence contradicts it: a person must check"
    return NextStep.ESCALATE, "it may have landed: a person must check"


def decide(claim: EffectClaim, history: History) -> Decision:
    """What to do next about ``claim``: done, wait, retry with its key, or escalate.

    Pure, like :func:`assess`. Once an effect has a retry, the newest retry speaks for
    it. The rules, first that applies: a person's resolution (applied: DONE, not
    applied: RETRY); VERIFIED: DONE; PENDING: WAIT; FAILED: RETRY; a reported success
    no evidence contradicts: DONE; a READ or IDEMPOTENT effect: RETRY; a WRITE whose
    violated postconditions all show the target as it was before: RETRY; else ESCALATE.
    """
    attempt = newest_attempt(claim, history)
    step, why = _step(attempt, history)
    if attempt is not claim:
        why = f"its newest retry {attempt.effect_id!r}: {why}"
    return Decision(claim.effect_id, step, why[0].upper() + why[1:] + ".", claim.idempotency_key)
