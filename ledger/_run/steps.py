"""Steps: what a call that may have run before does, by itself, when a worker runs again.

A restarted worker runs its code again. Each ``log.effect`` (or decorated tool) call has
a *step*, its identity across restarts: the caller's (a framework's tool-call id), or an
automatic one, the n-th call with an operation and arguments digest
(``write_file#2@3f2a9c...``): the same string each time the same code runs. Entering a
step that has attempts in the run acts on :func:`~ledger.effects.decide` of it:

- ``DONE``: replay. Nothing runs, nothing is written; the recorded result is returned.
- ``RETRY``: a retry is claimed (same idempotency key) and the body runs.
- ``WAIT``: :class:`~ledger.errors.StillRunning`.
- ``ESCALATE``: :class:`~ledger.errors.NeedsResolution`, naming the command that settles it.

The scope guard: a ``WRITE`` or ``IRREVERSIBLE`` call into a scope overlapping an
effect whose decision is ``ESCALATE`` raises ``NeedsResolution`` before anything is
written. Its candidates are the attempts that ended in doubt (an outcome that is neither
a reported success nor a failure without effect, and no resolution): a few, whatever the
run's length. An effect whose *reported success* later evidence contradicts is not one
of them: in the ordinary course that is a later effect of the run rewriting the same
target, and ``decide`` still escalates the effect itself when its own step comes again.

Pure of storage: the log calls :func:`plan` and the guard's helpers under its lock.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from ledger.effects import (
    Decision,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    NextStep,
    ResourceRef,
    overlaps,
)
from ledger.errors import AlreadyDone, NeedsResolution, StillRunning

__all__ = [
    "Begin",
    "Next",
    "StepIndex",
    "auto_step",
    "guarded",
    "needs_resolution",
    "overlapping",
    "plan",
]

_GUARDED = frozenset({EffectKind.WRITE, EffectKind.IRREVERSIBLE})


def auto_step(operation: str, digest: str, occurrence: int) -> str:
    """The automatic step of the ``occurrence``-th call of ``operation`` with ``digest``."""
    return f"{operation}#{occurrence}@{digest[:16]}"


class Begin(NamedTuple):
    """How a step's call begins: with a new claim (``replayed`` false), or as a replay.

    A named tuple: one is made for every call, and a frozen dataclass costs several times
    as much to build.
    """

    claim: EffectClaim  # the new attempt's claim, or the attempt replayed
    attempt: int  # 1 for a first attempt
    replayed: bool = False
    outcome: EffectOutcome | None = None  # the replayed attempt's terminal outcome


@dataclasses.dataclass(frozen=True, slots=True)
class Next:
    """What the log is to do for a step: claim (``retry_of`` set for a retry), or replay."""

    replay: EffectClaim | None = None  # the attempt to replay instead of claiming
    retry_of: str | None = None
    attempt: int = 1
    checked: bool = True  # whether decide said RETRY (a READ run again skips it)


_NEW = Next()  # a new step's: its first attempt is claimed


class StepIndex:
    """A run's first attempts by step, and this log's count of automatic steps."""

    def __init__(self) -> None:
        self._first: dict[str, EffectClaim] = {}
        self._counts: Counter[tuple[str, str]] = Counter()
        self._tries: Counter[str] = Counter()  # attempts by idempotency key
        self.queued: set[str] = set()  # steps whose first attempt is being claimed

    def add_claim(self, claim: EffectClaim) -> None:
        """Remember a claim (in ``seq`` order): a first attempt names its step."""
        if claim.step and claim.retry_of is None:
            self._first.setdefault(claim.step, claim)
        self._tries[claim.idempotency_key] += 1

    def tries(self, key: str) -> int:
        """How many attempts the effect with idempotency key ``key`` has."""
        return self._tries[key]

    def first(self, step: str) -> EffectClaim | None:
        """The step's first attempt in the run, if any."""
        return self._first.get(step)

    def taken(self, step: str) -> bool:
        """Whether the step has a first attempt, durable or being claimed."""
        return step in self._first or step in self.queued

    def next_auto(self, operation: str, digest: str) -> str:
        """The automatic step of this log's next call of ``operation`` with ``digest``."""
        key = (operation, digest)
        self._counts[key] += 1
        return auto_step(operation, digest, self._counts[key])

    def give_back(self, operation: str, digest: str) -> None:
        """Undo :meth:`next_auto` for a call that was not claimed (it waits for approval).

        The call made again is the same call: it must get the same automatic step, in
        this process and in the next.
        """
        self._counts[operation, digest] -= 1


def needs_resolution(
    run_id: str, attempt: EffectClaim, decision: Decision, why: str
) -> NeedsResolution:
    """The error for a call that may not run until a person settles ``attempt``."""
    return NeedsResolution(
        f"{why} effect {attempt.effect_id!r} ({attempt.operation.name}) needs a person: "
        f"{decision.reason} Check the world, then record what you found: ledger resolve "
        f"{run_id} {attempt.effect_id} --applied|--not-applied --by NAME",
        run_id=run_id,
        effect_id=attempt.effect_id,
        decision=decision,
    )


def plan(  # noqa: PLR0917 - the state of one step, all of it consulted
    run_id: str,
    step: str,
    probe: EffectClaim,
    first: EffectClaim | None,
    newest: EffectClaim | None,
    decision: Decision | None,
    outcome: EffectOutcome | None,
    tries: int,
    *,
    tool: bool,
) -> Next:
    """What entering ``step`` does, from its attempts and decision (checked by the caller).

    ``first`` is the step's first attempt (``None``: the step is new), ``newest`` the
    attempt decide follows, ``outcome`` its terminal outcome, ``tries`` how many attempts
    the step has. Raises the error of a call that must not run.
    """
    if first is None or newest is None or decision is None:
        return _NEW
    if first.operation.name != probe.operation.name or (
        probe.retry_of is None and first.operation.args_sha256 != probe.operation.args_sha256
    ):
        raise ValueError(
            f"step {step!r} was first called as {first.operation.name} with other arguments "
            f"(effect {first.effect_id!r}): a step names one call"
        )
    if decision.step is NextStep.DONE:
        recorded = outcome is not None and outcome.result_recorded
        if probe.kind is EffectKind.READ and not recorded:
            # Nothing to replay, and reading again changes nothing.
            return Next(retry_of=first.effect_id, attempt=tries + 1, checked=False)
        if tool and not recorded:
            raise AlreadyDone(
                f"step {step!r} is done (effect {newest.effect_id!r}: {decision.reason}) and no "
                "result of it was recorded, so there is none to return",
                run_id=run_id,
                effect_id=newest.effect_id,
                decision=decision,
            )
        return Next(replay=newest, attempt=tries)
    if decision.step is NextStep.RETRY:
        return Next(retry_of=first.effect_id, attempt=tries + 1)
    if decision.step is NextStep.WAIT:
        raise StillRunning(
            f"step {step!r} may still be running: effect {newest.effect_id!r} has no terminal "
            f"outcome ({decision.reason}) Wait for its outcome; if nothing runs it any more, a "
            f"person who checked the world records what they found: ledger resolve {run_id} "
            f"{newest.effect_id} --applied|--not-applied --by NAME",
            run_id=run_id,
            effect_id=newest.effect_id,
            decision=decision,
        )
    raise needs_resolution(run_id, newest, decision, f"step {step!r}:")


def guarded(kind: EffectKind) -> bool:
    """Whether calls of ``kind`` are held to the scope guard."""
    return kind in _GUARDED


def overlapping(scope: Iterable[ResourceRef], other: EffectClaim) -> bool:
    """Whether a call's scope overlaps ``other``'s impact scope."""
    return any(overlaps(a, b) for a in scope for b in other.impact_scope)
