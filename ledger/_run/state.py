"""The memory of one run and the reservations of records on their way to the store.

:class:`RunState` is what an :class:`~ledger.effect_log.EffectLog` knows of its run: the
durable records in ``seq`` order, the index that assesses and decides from them, the
steps, and the records queued to be written (reserved, so that two callers cannot claim
one effect, settle it twice, reuse an observation id or retry it twice at once). It
checks and builds every record before anything is written, with the caller's errors
(``ValueError`` / ``TypeError``), and answers what entering a step does.

Pure: values in, values out. No storage, no clock (the caller gives the time), no lock
(the log holds its own while it calls this).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterable, Sequence

from ledger._run import steps
from ledger._run.book import ApprovalBook
from ledger._run.index import RunIndex
from ledger._run.requests import ClaimRequest, ObservationRequest, OutcomeRequest
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    InvalidTypeError,
    NextStep,
    Observation,
    OperationRef,
    Postcondition,
    Record,
    Resolution,
    ResourceRef,
    check_identifier,
    idempotency_key,
)
from ledger.errors import StillRunning

__all__ = ["RunState", "StepPlan", "not_before", "renumber"]

_WAIT_FOR_RETRY = "A retry of it is being claimed."


@dataclasses.dataclass(frozen=True, slots=True)
class StepPlan:
    """What entering a step does: replay an attempt, or claim (``retry_of`` for a retry)."""

    step: str
    plan: steps.Next
    outcome: EffectOutcome | None  # the newest attempt's terminal outcome, if any


class RunState:
    """One run's records, index and steps, and what is reserved for records being written.

    ``next_seq`` is the seq of the next durable record; a record built now gets
    :attr:`next_free` (renumbered with :func:`renumber` if the queue ahead of it changes).
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.index = RunIndex()
        self.steps = steps.StepIndex()
        self.claims: list[EffectClaim] = []
        self.claimed: dict[str, EffectClaim] = {}
        self.settled: set[str] = set()
        self.outcomes: list[EffectOutcome] = []
        self.observations: list[Observation] = []
        self.resolutions: list[Resolution] = []
        self.approvals = ApprovalBook()
        self.observation_ids: set[str] = set()
        self.next_seq = 1
        # Reservations: records queued or being written.
        self.queued = 0
        self.queued_claims: set[str] = set()
        self.queued_settles: set[str] = set()
        self.queued_observations: set[str] = set()
        self.queued_resolutions: set[str] = set()
        # The idempotency keys of claims queued or being written: an effect whose key is
        # among them has a retry on its way, and is not to be retried again meanwhile.
        self.queued_keys: dict[str, int] = {}  # how many claims being written carry each key

    # ------------------------------------------------------------------ memory

    @property
    def next_free(self) -> int:
        """The seq a record built now gets, unless the queue ahead of it changes."""
        return self.next_seq + self.queued

    def remember(self, record: Record) -> None:
        """Add a record to the memory (in ``seq`` order): history, checks and index."""
        if isinstance(record, EffectClaim):
            self.claims.append(record)
            self.claimed[record.effect_id] = record
            self.index.add_claim(record)
            self.steps.add_claim(record)
            if record.approval_id is not None:
                self.approvals.used[record.approval_id] = record.effect_id
        elif isinstance(record, EffectOutcome):
            self.outcomes.append(record)
            if record.terminal:
                self.settled.add(record.effect_id)
            self.index.add_outcome(record)
        elif isinstance(record, Resolution):
            self.resolutions.append(record)
            self.index.add_resolution(record)
        elif isinstance(record, (ApprovalRequest, ApprovalDecision)):
            self.approvals.remember(record)
        else:
            self.observations.append(record)
            self.observation_ids.add(record.observation_id)
            self.index.add_observation(record)

    def adopt(self, history: History) -> None:
        """Take a loaded run's records as the memory."""
        records = history.records()
        for record in records:
            self.remember(record)
        self.next_seq = records[-1].seq + 1 if records else 1

    def history(self) -> History:
        """Every record remembered, in ``seq`` order."""
        return History(
            tuple(self.claims),
            tuple(self.outcomes),
            tuple(self.observations),
            tuple(self.resolutions),
            tuple(self.approvals.requests),
            tuple(self.approvals.decisions),
        )

    def claim_of(self, effect_id: str) -> EffectClaim:
        """The claim of ``effect_id``; ``ValueError`` if the run has none."""
        check_identifier(effect_id, "effect_id")
        claim = self.claimed.get(effect_id)
        if claim is None:
            raise ValueError(f"effect {effect_id!r} has no claim in run {self.run_id}")
        return claim

    def root(self, claim: EffectClaim) -> EffectClaim:
        """The first attempt of the effect ``claim`` is an attempt of."""
        while claim.retry_of is not None and claim.retry_of in self.claimed:
            claim = self.claimed[claim.retry_of]
        return claim

    # ------------------------------------------------------------------ reservations

    def reserve(self, records: Sequence[Record]) -> None:
        """Reserve what ``records`` take (ids, keys, steps) while they are being written."""
        self.queued += len(records)
        for record in records:
            if isinstance(record, EffectClaim):
                self.queued_claims.add(record.effect_id)
                key = record.idempotency_key
                self.queued_keys[key] = self.queued_keys.get(key, 0) + 1
                if record.step and record.retry_of is None:
                    self.steps.queued.add(record.step)
            elif isinstance(record, EffectOutcome):
                if record.terminal:
                    self.queued_settles.add(record.effect_id)
            elif isinstance(record, Resolution):
                self.queued_resolutions.add(record.effect_id)
            elif isinstance(record, (ApprovalRequest, ApprovalDecision)):
                continue  # written alone, under the log's lock
            else:
                self.queued_observations.add(record.observation_id)

    def release(self, records: Sequence[Record]) -> None:
        """Undo :meth:`reserve` once ``records`` are written (remembered) or failed."""
        self.queued -= len(records)
        for record in records:
            if isinstance(record, EffectClaim):
                self.queued_claims.discard(record.effect_id)
                key = record.idempotency_key
                left = self.queued_keys[key] - 1
                if left:
                    self.queued_keys[key] = left
                else:
                    del self.queued_keys[key]
                if record.step and record.retry_of is None:
                    self.steps.queued.discard(record.step)
            elif isinstance(record, EffectOutcome):
                if record.terminal:
                    self.queued_settles.discard(record.effect_id)
            elif isinstance(record, Resolution):
                self.queued_resolutions.discard(record.effect_id)
            elif isinstance(record, (ApprovalRequest, ApprovalDecision)):
                continue
            else:
                self.queued_observations.discard(record.observation_id)

    # ------------------------------------------------------------------ records, checked

    def key_for(self, effect_id: str, retry_of: str | None) -> str:
        """The idempotency key of a claim: its own, or that of the effect it retries."""
        if retry_of is None:
            return idempotency_key(self.run_id, effect_id)
        retried = self.claimed.get(retry_of)
        if retried is None:
            raise ValueError(
                f"effect {retry_of!r} is not claimed in run {self.run_id}: "
                "a retry repeats an effect of its run"
            )
        return retried.idempotency_key

    def claim_records(self, batch: Sequence[ClaimRequest], seq: int, now: str) -> list[EffectClaim]:
        """The claims of ``batch`` from ``seq`` on, each checked; nothing is reserved."""
        records: list[EffectClaim] = []
        batch_ids: set[str] = set()
        batch_steps: set[str] = set()
        for request in batch:
            record = self.claim_record(
                seq + len(records),
                now,
                effect_id=request.effect_id,
                action_id=request.action_id,
                operation=request.operation,
                impact_scope=request.impact_scope,
                obligations=request.obligations,
                kind=request.kind,
                retry_of=request.retry_of,
                step=request.step,
                args=request.args,
                approval_id=request.approval_id,
                batch_ids=batch_ids,
                batch_steps=batch_steps,
            )
            if record.step and record.retry_of is None:
                batch_steps.add(record.step)
            batch_ids.add(record.effect_id)
            records.append(record)
        return records

    def claim_record(
        self,
        seq: int,
        now: str,
        *,
        effect_id: str,
        action_id: str,
        operation: OperationRef,
        impact_scope: Iterable[ResourceRef],
        obligations: Iterable[Postcondition],
        kind: EffectKind,
        retry_of: str | None,
        step: str,
        args: object,
        approval_id: str | None = None,
        batch_ids: Container[str] = (),
        batch_steps: Container[str] = (),
    ) -> EffectClaim:
        """One claim (the keywords of ``EffectLog.claim``) at ``seq``, checked; none reserved.

        ``batch_ids`` and ``batch_steps`` are those the claims before it in its batch take.
        """
        # The record checks every field, with the same errors as claim's keywords.
        record = EffectClaim(
            effect_id=effect_id,
            seq=seq,
            action_id=action_id,
            operation=operation,
            impact_scope=impact_scope,  # type: ignore[arg-type]  # validated, made a tuple
            obligations=obligations,  # type: ignore[arg-type]  # same
            recorded_at=now,
            kind=kind,
            idempotency_key=self.key_for(effect_id, retry_of),
            retry_of=retry_of,
            step=step,
            args=args,
            approval_id=approval_id,
        )
        if effect_id in self.claimed or effect_id in self.queued_claims or effect_id in batch_ids:
            raise ValueError(f"effect {effect_id!r} is already claimed in run {self.run_id}")
        if step and retry_of is None and (self.steps.taken(step) or step in batch_steps):
            raise ValueError(
                f"step {step!r} already has a first attempt in run "
                f"{self.run_id}: a step names one call (retry it instead)"
            )
        return record

    def outcome_records(
        self, batch: Sequence[OutcomeRequest], seq: int, now: str
    ) -> list[EffectOutcome]:
        """The outcomes of ``batch`` from ``seq`` on, each checked; nothing is reserved."""
        records: list[EffectOutcome] = []
        settled: set[str] = set()
        for request in batch:
            record = self.outcome_record(
                seq + len(records),
                now,
                effect_id=request.effect_id,
                execution=request.execution,
                impact=request.impact,
                execution_id=request.execution_id,
                result=request.result,
                result_recorded=request.result_recorded,
                batch_settled=settled,
            )
            if record.terminal:
                settled.add(record.effect_id)
            records.append(record)
        return records

    def outcome_record(
        self,
        seq: int,
        now: str,
        *,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        execution_id: str | None,
        result: object,
        result_recorded: bool | None,
        batch_settled: Container[str] = (),
    ) -> EffectOutcome:
        """One outcome (the keywords of ``EffectLog.outcome``) at ``seq``, checked; none reserved.

        ``batch_settled`` are the effects the outcomes before it in its batch settle.
        """
        check_identifier(effect_id, "effect_id")
        if not isinstance(execution, ExecutionOutcome):
            raise InvalidTypeError(
                f"execution must be an ExecutionOutcome, not {type(execution).__name__}"
            )
        if not isinstance(impact, Impact):
            raise InvalidTypeError(f"impact must be an Impact, not {type(impact).__name__}")
        claim = self.claimed.get(effect_id)
        if claim is None:
            if effect_id in self.queued_claims:
                raise ValueError(
                    f"effect {effect_id!r} is still being claimed in run {self.run_id}: "
                    "record its outcome after claim returns"
                )
            raise ValueError(f"effect {effect_id!r} has no claim in run {self.run_id}")
        if (
            effect_id in self.settled
            or effect_id in self.queued_settles
            or effect_id in batch_settled
        ):
            raise ValueError(f"effect {effect_id!r} already has a terminal outcome")
        return EffectOutcome(
            effect_id=effect_id,
            seq=seq,
            execution=execution,
            impact=impact,
            execution_id=execution_id,
            replayed=False,
            recorded_at=not_before(now, claim),
            result=result,
            result_recorded=result_recorded,
        )

    def observation_records(
        self, seen: Iterable[ObservationRequest], source_action_id: str, seq: int, now: str
    ) -> list[Observation]:
        """The observations of ``seen`` from ``seq`` on, each checked; nothing is reserved."""
        records: list[Observation] = []
        for item in seen:
            if not isinstance(item, ObservationRequest):
                raise InvalidTypeError(
                    f"observed takes ObservationRequest items, not {type(item).__name__}"
                )
            check_identifier(item.observation_id, "observation_id")
            if not isinstance(item.resource, ResourceRef):
                raise InvalidTypeError(
                    "resource must be a ResourceRef (see effects.resource_ref), "
                    f"not {type(item.resource).__name__}"
                )
            if (
                item.observation_id in self.observation_ids
                or item.observation_id in self.queued_observations
            ):
                raise ValueError(
                    f"observation {item.observation_id!r} is already recorded in run {self.run_id}"
                )
            if any(r.observation_id == item.observation_id for r in records):
                raise ValueError(f"observation {item.observation_id!r} is given twice")
            records.append(
                Observation(
                    observation_id=item.observation_id,
                    seq=seq + len(records),
                    resource=item.resource,
                    mechanism=item.mechanism,
                    coverage=item.coverage,
                    source_action_id=source_action_id,
                    exists=item.exists,
                    sha256=item.sha256,
                    revision=item.revision,
                    recorded_at=now,
                )
            )
        return records

    def check_resolvable(self, effect_id: str, *, applied: object, allow_self: object) -> None:
        """Check a resolution's arguments; refuse a second one of ``effect_id``."""
        self.claim_of(effect_id)
        if not isinstance(applied, bool):
            raise InvalidTypeError(f"applied must be a bool, not {type(applied).__name__}")
        if not isinstance(allow_self, bool):
            raise InvalidTypeError(f"allow_self must be a bool, not {type(allow_self).__name__}")
        if self.index.resolution(effect_id) is not None or effect_id in self.queued_resolutions:
            raise ValueError(f"effect {effect_id!r} is already resolved")

    def recovery(self, now: str) -> tuple[EffectOutcome, ...]:
        """The INTERRUPTED / POSSIBLE outcomes of the claims with no outcome, from ``next_seq``."""
        base = self.next_seq - 1
        return tuple(
            EffectOutcome(
                effect_id=claim.effect_id,
                seq=base + i,
                execution=ExecutionOutcome.INTERRUPTED,
                impact=Impact.POSSIBLE,
                replayed=True,
                recorded_at=not_before(now, claim),
            )
            for i, claim in enumerate(self.index.unanswered(), start=1)
        )

    def resume_targets(self) -> list[ResourceRef]:
        """The files the postconditions of an effect that ended otherwise than DONE name.

        An effect whose newest attempt reported success is DONE (or, contradicted, was
        observed already): only those that ended otherwise are decided, so a long run
        resumes at the cost of its failures, not of its length.
        """
        ended_otherwise: dict[str, EffectClaim] = {}
        for outcome in self.outcomes:
            if outcome.terminal and outcome.execution is not ExecutionOutcome.REPORTED_SUCCESS:
                root = self.root(self.claimed[outcome.effect_id])
                ended_otherwise[root.effect_id] = root
        targets: dict[str, ResourceRef] = {}
        for claim in ended_otherwise.values():
            if self.index.decide(claim).step is NextStep.DONE:
                continue
            for condition in self.index.attempts(claim)[-1].obligations:
                if condition.target.kind == "fs":
                    targets.setdefault(condition.target.locator, condition.target)
        return list(targets.values())

    # ------------------------------------------------------------------ decisions

    def check_retry(self, effect_id: str) -> None:
        """Refuse a retry unless the decision is RETRY and no other retry is on its way."""
        claim = self.claim_of(effect_id)
        decision = self.index.decide(claim)
        step, reason = decision.step, decision.reason
        if claim.idempotency_key in self.queued_keys:
            # Decided together with the queue: two threads retrying at once make one retry.
            step, reason = NextStep.WAIT, _WAIT_FOR_RETRY
        if step is not NextStep.RETRY:
            raise ValueError(
                f"effect {effect_id!r} is not to be retried: the decision is "
                f"{step.value.upper()} ({reason})"
            )

    def plan_step(self, probe: EffectClaim, step: str | None, *, tool: bool) -> StepPlan:
        """What entering ``step`` (None: the automatic one) does with ``probe``'s call.

        Raises what a call that must not run raises (:mod:`ledger._run.steps`), and
        ``NeedsResolution`` for a write into the scope of an effect in doubt.
        """
        if step is None:
            step = self.steps.next_auto(probe.operation.name, probe.operation.args_sha256)
        first = self.steps.first(step)
        decision = outcome = newest = None
        if first is not None:
            newest = self.index.attempts(first)[-1]
            decision = self.index.decide(first)
            outcome = self.index.terminal(newest.effect_id)
            if first.idempotency_key in self.queued_keys:
                decision = dataclasses.replace(decision, step=NextStep.WAIT, reason=_WAIT_FOR_RETRY)
        elif step in self.steps.queued:
            raise StillRunning(
                f"step {step!r} is being claimed by another call of this log",
                run_id=self.run_id,
                effect_id=probe.effect_id,
                decision=None,
            )
        tries = 0 if first is None else self.steps.tries(first.idempotency_key)
        plan = steps.plan(
            self.run_id, step, probe, first, newest, decision, outcome, tries, tool=tool
        )
        if plan.replay is None and steps.guarded(probe.kind):
            self.guard(probe, first)
        return StepPlan(step, plan, outcome)

    def guard(self, probe: EffectClaim, own: EffectClaim | None) -> None:
        """Refuse a write into the scope of an effect whose decision is ESCALATE."""
        for candidate in self.index.doubtful():
            root = self.root(candidate)
            if own is not None and root.effect_id == own.effect_id:
                continue  # its own step: decided by plan_step
            if not steps.overlapping(probe.impact_scope, candidate):
                continue
            decision = self.index.decide(root)
            if decision.step is NextStep.ESCALATE:
                newest = self.index.attempts(root)[-1]
                raise steps.needs_resolution(
                    self.run_id,
                    newest,
                    decision,
                    f"{probe.operation.name} would touch the scope of effect "
                    f"{newest.effect_id!r}, which is in doubt:",
                )


def renumber(record: Record, seq: int) -> Record:
    """``record`` with ``seq``: records are built with the seq they get unless the queue moves."""
    return record if record.seq == seq else dataclasses.replace(record, seq=seq)


def not_before(now: str, claim: EffectClaim) -> str:
    """The time to record an outcome of ``claim`` at: ``now``, or the claim's own if later.

    A wall clock stepped back (NTP, a VM restored), or another host's behind this one,
    would date the outcome before its claim, which no durable run may hold
    (:func:`~ledger.effects.check_times`): the outcome then carries its claim's time.
    Both are in utc_now()'s form, so as text they order as times.
    """
    return max(now, claim.recorded_at)
