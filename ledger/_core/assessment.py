"""The assessment: the verdict the history gives one claim (:func:`assess`).

Pure: no clock, no disk, no global state. The rules are in ``docs/concepts.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Self

from ledger._core.enums import Coverage, EffectVerdict, ExecutionOutcome, Impact, Predicate
from ledger._core.history import History
from ledger._core.records import (
    EffectClaim,
    EffectOutcome,
    Observation,
    Postcondition,
    ResourceRef,
    overlaps,
)
from ledger._core.values import (
    InvalidTypeError,
    _build,
    _check_enum,
    _Fields,
    _frozen,
    _tuple_of,
    check_identifier,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Assessment:
    """The verdict on one claim, with the observations it rests on."""

    effect_id: str
    verdict: EffectVerdict
    execution: ExecutionOutcome | None
    impact: Impact | None
    unresolved_impact: bool
    evidence: tuple[str, ...]
    stale: tuple[str, ...]
    resolution: str | None = None  # "applied" or "not_applied": a person settled it

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_enum(self.verdict, EffectVerdict, "verdict")
        if self.resolution not in (None, "applied", "not_applied"):
            raise ValueError(
                f"resolution must be 'applied', 'not_applied' or None, got {self.resolution!r:.40}"
            )
        if self.execution is not None:
            _check_enum(self.execution, ExecutionOutcome, "execution")
        if self.impact is not None:
            _check_enum(self.impact, Impact, "impact")
        if not isinstance(self.unresolved_impact, bool):
            raise InvalidTypeError("unresolved_impact must be a bool")
        _frozen(self, "evidence", _tuple_of(self.evidence, str, "evidence"))
        _frozen(self, "stale", _tuple_of(self.stale, str, "stale"))

    def to_dict(self) -> dict[str, Any]:
        """Return the assessment as JSON types."""
        return {
            "effect_id": self.effect_id,
            "verdict": self.verdict.value,
            "execution": None if self.execution is None else self.execution.value,
            "impact": None if self.impact is None else self.impact.value,
            "unresolved_impact": self.unresolved_impact,
            "evidence": list(self.evidence),
            "stale": list(self.stale),
            "resolution": self.resolution,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an assessment from :meth:`to_dict` output."""
        f = _Fields(data, cls, later={"resolution": None})
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            verdict=f.enum("verdict", EffectVerdict),
            execution=f.optional_enum("execution", ExecutionOutcome),
            impact=f.optional_enum("impact", Impact),
            unresolved_impact=f.raw("unresolved_impact"),
            evidence=f.strings("evidence"),
            stale=f.strings("stale"),
            resolution=f.raw("resolution"),
        )


def _current(effect_id: str, outcomes: tuple[EffectOutcome, ...]) -> EffectOutcome | None:
    """The terminal outcome if any, else the last RUNNING one, else None."""
    last_running = None
    for outcome in outcomes:
        if outcome.effect_id != effect_id:
            continue
        if outcome.terminal:
            return outcome
        last_running = outcome
    return last_running


def _settled_clean(current: EffectOutcome | None) -> bool:
    return (
        current is not None
        and current.execution is ExecutionOutcome.FAILED
        and current.impact is Impact.NONE
    )


def _decide(condition: Postcondition, obs: Observation) -> bool | None:
    """True if ``obs`` satisfies the postcondition, False if it violates it, None if undecided."""
    predicate = condition.predicate
    if predicate is Predicate.EXISTS:
        return obs.exists
    if predicate is Predicate.ABSENT:
        return None if obs.exists is None else not obs.exists
    observed = obs.sha256 if predicate is Predicate.SHA256 else obs.revision
    if obs.exists is False:
        return False
    if observed is None:
        return None
    return observed == condition.expected


def _terminals(outcomes: tuple[EffectOutcome, ...]) -> dict[str, EffectOutcome]:
    """Each effect's terminal outcome (its first, were there more), found in one pass."""
    found: dict[str, EffectOutcome] = {}
    for outcome in outcomes:
        if outcome.terminal:
            found.setdefault(outcome.effect_id, outcome)
    return found


def _in_flight_until(other: EffectClaim, terminals: Mapping[str, EffectOutcome]) -> float:
    """The seq before which ``other``'s effect may still land (``inf``: not settled yet).

    An observation made before it, or before ``other`` is claimed, may miss the effect.
    """
    terminal = terminals.get(other.effect_id)
    return math.inf if terminal is None else max(other.seq, terminal.seq)


def _stale_until(
    claim: EffectClaim,
    target: ResourceRef,
    history: History,
    terminals: Mapping[str, EffectOutcome],
) -> float:
    """The seq before which an observation of ``target`` is stale for ``claim``.

    An observation is stale when another claim whose scope overlaps the target was in
    flight as it was made (claimed after it, or not terminally settled before it) and is
    not settled clean: when its seq is below the latest end of such a claim's flight.
    """
    until = -math.inf
    for other in history.claims:
        if other.effect_id == claim.effect_id:
            continue
        if not any(overlaps(ref, target) for ref in other.impact_scope):
            continue
        if not _settled_clean(terminals.get(other.effect_id)):
            until = max(until, _in_flight_until(other, terminals))
    return until


def _is_stale(obs: Observation, stale_until: float) -> bool:
    return obs.seq < stale_until


def _evidence(
    claim: EffectClaim,
    condition: Postcondition,
    current: EffectOutcome,
    history: History,
    stale: dict[int, str],
) -> tuple[Observation, bool] | None:
    """The fresh evidence for one obligation and whether it satisfies it; notes stale ones."""
    best: tuple[Observation, bool] | None = None
    stale_until = _stale_until(claim, condition.target, history, _terminals(history.outcomes))
    for obs in history.observations:
        if (
            obs.seq <= current.seq
            or obs.coverage is not Coverage.COMPLETE
            or not obs.resource.same_target(condition.target)
        ):
            continue
        if _is_stale(obs, stale_until):
            stale[obs.seq] = obs.observation_id
            continue
        decision = _decide(condition, obs)
        if decision is not None:
            best = (obs, decision)  # observations are in seq order: the last one wins
    return best


def _check_args(claim: object, history: object) -> None:
    if not isinstance(claim, EffectClaim):
        raise InvalidTypeError(f"claim must be an EffectClaim, not {type(claim).__name__}")
    if not isinstance(history, History):
        raise InvalidTypeError(f"history must be a History, not {type(history).__name__}")


def assess(claim: EffectClaim, history: History) -> Assessment:
    """Assess ``claim`` against one run's ``history`` and return its verdict.

    Pure: the same arguments always give the same result. The rules, first
    that applies: no outcome or a RUNNING one is PENDING; FAILED with impact
    NONE is FAILED; an obligation whose fresh evidence violates it makes the
    claim CONTRADICTED; every obligation satisfied by fresh evidence makes it
    VERIFIED; anything else is UNVERIFIED. A person's resolution of the effect
    leaves the verdict and settles its impact.
    """
    _check_args(claim, history)
    current = _current(claim.effect_id, history.outcomes)
    execution = None if current is None else current.execution
    impact = None if current is None else current.impact
    resolution = history.resolution(claim.effect_id)

    def result(
        verdict: EffectVerdict, evidence: tuple[str, ...] = (), stale: tuple[str, ...] = ()
    ) -> Assessment:
        unresolved = (
            resolution is None and verdict in _UNRESOLVED_VERDICTS and impact is not Impact.NONE
        )
        word = None if resolution is None else resolution.word
        return Assessment(
            claim.effect_id, verdict, execution, impact, unresolved, evidence, stale, word
        )

    if current is None or not current.terminal:
        return result(EffectVerdict.PENDING)
    if _settled_clean(current):
        return result(EffectVerdict.FAILED)

    evidence: list[str] = []
    stale: dict[int, str] = {}
    satisfied = 0
    violated = False
    for condition in claim.obligations:
        best = _evidence(claim, condition, current, history, stale)
        if best is not None:
            evidence.append(best[0].observation_id)
            satisfied += best[1]
            violated = violated or not best[1]

    stale_ids = tuple(stale[seq] for seq in sorted(stale))
    if violated:
        verdict = EffectVerdict.CONTRADICTED
    elif claim.obligations and satisfied == len(claim.obligations):
        verdict = EffectVerdict.VERIFIED
    else:
        verdict = EffectVerdict.UNVERIFIED
    return result(verdict, tuple(evidence), stale_ids)


_UNRESOLVED_VERDICTS = frozenset(
    {EffectVerdict.PENDING, EffectVerdict.UNVERIFIED, EffectVerdict.CONTRADICTED}
)


# --------------------------------------------------------------------------- decide
