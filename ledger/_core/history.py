"""One run's records together (:class:`History`) and the rules a durable run obeys.

:func:`check_history` and :func:`check_times` are the one place those rules live: loading,
verifying and importing a run all hold it to them.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime
from typing import Any, Self

from ledger._core.approvals import ApprovalDecision, ApprovalRequest, action_digest
from ledger._core.records import EffectClaim, EffectOutcome, Observation, Record, Resolution
from ledger._core.values import _build, _Fields, _frozen, _tuple_of


def _check_sorted(records: tuple[Record, ...], field: str) -> None:
    for before, after in itertools.pairwise(records):
        if before.seq >= after.seq:
            raise ValueError(f"{field} must be in strictly increasing seq order")


@dataclasses.dataclass(frozen=True, slots=True)
class History:
    """One run's records, each kind in ``seq`` order."""

    claims: tuple[EffectClaim, ...] = ()
    outcomes: tuple[EffectOutcome, ...] = ()
    observations: tuple[Observation, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    approval_requests: tuple[ApprovalRequest, ...] = ()
    approval_decisions: tuple[ApprovalDecision, ...] = ()

    def __post_init__(self) -> None:
        _frozen(self, "claims", _tuple_of(self.claims, EffectClaim, "claims"))
        _frozen(self, "outcomes", _tuple_of(self.outcomes, EffectOutcome, "outcomes"))
        _frozen(self, "observations", _tuple_of(self.observations, Observation, "observations"))
        _frozen(self, "resolutions", _tuple_of(self.resolutions, Resolution, "resolutions"))
        _check_sorted(self.claims, "claims")
        _check_sorted(self.outcomes, "outcomes")
        _check_sorted(self.observations, "observations")
        _check_sorted(self.resolutions, "resolutions")
        if self.approval_requests or self.approval_decisions:
            _frozen(
                self,
                "approval_requests",
                _tuple_of(self.approval_requests, ApprovalRequest, "approval_requests"),
            )
            _frozen(
                self,
                "approval_decisions",
                _tuple_of(self.approval_decisions, ApprovalDecision, "approval_decisions"),
            )
            _check_sorted(self.approval_requests, "approval_requests")
            _check_sorted(self.approval_decisions, "approval_decisions")

    def records(self) -> tuple[Record, ...]:
        """Every record of the run, in ``seq`` order."""
        merged: list[Record] = [
            *self.claims,
            *self.outcomes,
            *self.observations,
            *self.resolutions,
            *self.approval_requests,
            *self.approval_decisions,
        ]
        return tuple(sorted(merged, key=lambda r: r.seq))

    def resolution(self, effect_id: str) -> Resolution | None:
        """The resolution of ``effect_id``, if a person has recorded one."""
        for resolution in self.resolutions:
            if resolution.effect_id == effect_id:
                return resolution
        return None

    def claim(self, effect_id: str) -> EffectClaim | None:
        """The claim of ``effect_id``, if the run has one."""
        for claim in self.claims:
            if claim.effect_id == effect_id:
                return claim
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return the history as JSON types."""
        return {
            "claims": [c.to_dict() for c in self.claims],
            "outcomes": [o.to_dict() for o in self.outcomes],
            "observations": [o.to_dict() for o in self.observations],
            "resolutions": [r.to_dict() for r in self.resolutions],
            "approval_requests": [r.to_dict() for r in self.approval_requests],
            "approval_decisions": [d.to_dict() for d in self.approval_decisions],
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a history from :meth:`to_dict` output."""
        f = _Fields(
            data, cls, later={"resolutions": [], "approval_requests": [], "approval_decisions": []}
        )
        return _build(
            cls,
            claims=f.items("claims", EffectClaim),
            outcomes=f.items("outcomes", EffectOutcome),
            observations=f.items("observations", Observation),
            resolutions=f.items("resolutions", Resolution),
            approval_requests=f.items("approval_requests", ApprovalRequest),
            approval_decisions=f.items("approval_decisions", ApprovalDecision),
        )


def check_history(history: History) -> None:
    """Raise ``ValueError`` unless ``history`` is one a durable run can hold.

    The records' ``seq`` run 1, 2, 3, … without gap or repeat across kinds;
    effect and observation ids are unique; every outcome follows its claim; no
    outcome follows a terminal one; a retry follows the claim it repeats and carries
    its key; a resolution follows its claim, at most one per effect. Every
    ``recorded_at`` is in :func:`utc_now`'s very form, and no outcome is recorded
    before its claim (see :func:`check_times`).

    ``EffectLog.load``, ``ledger verify`` and ``ledger import`` all hold a run to
    these rules, here and nowhere else, so that what one refuses no other accepts.
    """
    records = history.records()
    for expected, record in enumerate(records, start=1):
        if record.seq != expected:
            raise ValueError(
                f"seq {record.seq} of {record.record_type} where {expected} was due: the run's "
                "records must be numbered 1, 2, 3, … without gap or repeat"
            )
    claims: dict[str, EffectClaim] = {}
    for claim in history.claims:
        if claim.effect_id in claims:
            raise ValueError(f"effect {claim.effect_id!r} is claimed again at seq {claim.seq}")
        claims[claim.effect_id] = claim
    seen_obs: set[str] = set()
    for obs in history.observations:
        if obs.observation_id in seen_obs:
            raise ValueError(
                f"observation {obs.observation_id!r} is recorded again at seq {obs.seq}"
            )
        seen_obs.add(obs.observation_id)
    settled: dict[str, EffectOutcome] = {}
    for outcome in history.outcomes:
        claimed = claims.get(outcome.effect_id)
        if claimed is None:
            raise ValueError(
                f"outcome at seq {outcome.seq} names unclaimed effect {outcome.effect_id!r}"
            )
        if outcome.seq < claimed.seq:
            raise ValueError(
                f"outcome at seq {outcome.seq} precedes the claim of {outcome.effect_id!r}"
            )
        if outcome.effect_id in settled:
            raise ValueError(
                f"outcome at seq {outcome.seq} comes after {outcome.effect_id!r} settled"
            )
        if outcome.terminal:
            settled[outcome.effect_id] = outcome
    for claim in history.claims:
        if claim.retry_of is None:
            continue
        retried = claims.get(claim.retry_of)
        if retried is None or retried.seq > claim.seq:
            raise ValueError(
                f"effect {claim.effect_id!r} retries {claim.retry_of!r}, which is not "
                "claimed before it"
            )
        if claim.idempotency_key != retried.idempotency_key:
            raise ValueError(
                f"effect {claim.effect_id!r} retries {claim.retry_of!r} with another "
                "idempotency key"
            )
    resolved: set[str] = set()
    for resolution in history.resolutions:
        claimed = claims.get(resolution.effect_id)
        if claimed is None or claimed.seq > resolution.seq:
            raise ValueError(
                f"resolution at seq {resolution.seq} names {resolution.effect_id!r}, "
                "which is not claimed before it"
            )
        if resolution.effect_id in resolved:
            raise ValueError(f"effect {resolution.effect_id!r} is resolved twice")
        resolved.add(resolution.effect_id)
    if (
        history.approval_requests
        or history.approval_decisions
        or any(c.approval_id is not None for c in history.claims)
    ):
        check_approvals(history)
    check_times(history)


def check_approvals(history: History) -> None:
    """The rules of a run's approvals (see :func:`check_history`).

    Request ids are unique, and each reserves an effect id no other request holds; a
    decision follows its request, at most one per request, before it expired, and not
    written by the process that asked (an MCP client's answer, relayed by the proxy that
    asked, aside); a claim made under an approval follows a grant of it, carries the
    effect id it reserved and the very action digest it was asked for, and is the only
    claim that uses it.
    """
    requests: dict[str, ApprovalRequest] = {}
    reserved: set[str] = set()
    for asking in history.approval_requests:
        if asking.approval_id in requests:
            raise ValueError(f"approval {asking.approval_id!r} is requested again")
        if asking.effect_id in reserved:
            raise ValueError(
                f"approval {asking.approval_id!r} reserves effect {asking.effect_id!r}, "
                "which another request holds"
            )
        requests[asking.approval_id] = asking
        reserved.add(asking.effect_id)
    decisions: dict[str, ApprovalDecision] = {}
    for decision in history.approval_decisions:
        asked = requests.get(decision.approval_id)
        if asked is None or asked.seq > decision.seq:
            raise ValueError(
                f"approval decision at seq {decision.seq} answers {decision.approval_id!r}, "
                "which is not requested before it"
            )
        if decision.approval_id in decisions:
            raise ValueError(
                f"approval {decision.approval_id!r} is decided twice (again at seq "
                f"{decision.seq}): a forged decision"
            )
        if decision.decided_at >= asked.expires_at:
            raise ValueError(
                f"approval {decision.approval_id!r} is decided at seq {decision.seq} (at "
                f"{decision.decided_at}), after it expired at {asked.expires_at}: a forged "
                "decision"
            )
        if (
            decision.host == asked.host
            and decision.pid == asked.pid
            and decision.source.value != "elicitation"
        ):
            raise ValueError(
                f"approval {decision.approval_id!r} is decided at seq {decision.seq} by the "
                f"process that asked for it (pid {decision.pid} on {decision.host}): a forged "
                "decision"
            )
        decisions[decision.approval_id] = decision
    used: set[str] = set()
    for claim in history.claims:
        if claim.approval_id is None:
            continue
        request = requests.get(claim.approval_id)
        answer = decisions.get(claim.approval_id)
        claimed = (
            f"effect {claim.effect_id!r} is claimed at seq {claim.seq} under approval "
            f"{claim.approval_id!r}"
        )
        if request is None or answer is None or answer.seq > claim.seq:
            raise ValueError(f"{claimed}, which is not decided before it")
        if not answer.granted:
            raise ValueError(f"{claimed}, which was denied")
        if claim.approval_id in used:
            raise ValueError(f"{claimed}, which an earlier claim used: an approval is used once")
        if claim.effect_id != request.effect_id:
            raise ValueError(f"{claimed}, which was asked for effect {request.effect_id!r}")
        if action_digest(claim) != request.action_digest:
            raise ValueError(
                f"{claimed}, which was asked for another call (the action digests differ)"
            )
        used.add(claim.approval_id)


def written_by_utc_now(value: str) -> bool:
    """Whether ``value`` is exactly a time :func:`utc_now` could have written.

    Records accept any ISO-8601 time in UTC, but the library only ever writes
    utc_now()'s form: another form ('Z', no microseconds, a space, '-00:00') was not
    written by a ledger, and times kept as text only order correctly when they share
    one form. Rendering the parsed value as utc_now() does must give back the very
    same text.
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return parsed.utcoffset() == UTC.utcoffset(None) and (
        parsed.astimezone(UTC).isoformat(timespec="microseconds") == value
    )


def check_times(history: History) -> None:
    """Raise ``ValueError`` unless every time of ``history`` is one the library writes.

    Each ``recorded_at`` is in :func:`utc_now`'s form, and no outcome is recorded
    before its claim: no worker settles what it has not claimed, and the library
    records an outcome no earlier than its claim even when the clock steps back. A
    record with no ``recorded_at`` (one not yet written) is not judged.
    """
    for record in history.records():
        if record.recorded_at is not None and not written_by_utc_now(record.recorded_at):
            raise ValueError(
                f"{record.record_type} at seq {record.seq}: recorded_at "
                f"{record.recorded_at!r:.80} is not in the form the library writes "
                "(YYYY-MM-DDTHH:MM:SS.ffffff+00:00)"
            )
    claims = {claim.effect_id: claim for claim in history.claims}
    for outcome in history.outcomes:
        claim = claims.get(outcome.effect_id)
        if claim is None or outcome.recorded_at is None:
            continue  # an unclaimed outcome is check_history's to refuse
        # Both are in utc_now()'s form (checked above): as text they order as times.
        if outcome.recorded_at < claim.recorded_at:
            raise ValueError(
                f"outcome at seq {outcome.seq}: recorded_at {outcome.recorded_at} is before "
                f"the recorded_at {claim.recorded_at} of its claim (seq {claim.seq})"
            )


# --------------------------------------------------------------------------- assess
