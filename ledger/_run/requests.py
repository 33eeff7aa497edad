"""What a caller asks a log to write, before the log gives it a ``seq`` and a time.

:class:`ClaimRequest` and :class:`OutcomeRequest` are the keywords of
``EffectLog.claim`` and ``EffectLog.outcome``, for the batched ``claim_many`` and
``outcome_many``; :class:`ObservationRequest` is what an observation records of a
resource, which those two write in the same transaction when given ``observed=``.
Pure values: nothing here reads a store or a clock.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict, TypeVar, cast

from ledger._run.recorded import Redact
from ledger.effects import (
    Coverage,
    EffectKind,
    ExecutionOutcome,
    Impact,
    InvalidTypeError,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    ResourceRef,
)

if TYPE_CHECKING:  # the otel extra's, for the annotations only
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = [
    "ClaimRequest",
    "ObservationRequest",
    "OutcomeRequest",
    "RecordingOptions",
    "new_effect_id",
    "new_run_id",
    "only",
]

T = TypeVar("T")


def new_run_id() -> str:
    """Return a new run id: 32 lowercase hex characters from the OS CSPRNG."""
    return secrets.token_hex(16)


def only(kind: type[T], requests: Iterable[object], method: str) -> tuple[T, ...]:
    """``requests`` as a tuple, each a ``kind``; the caller's error naming the first not."""
    batch = tuple(requests)
    for request in batch:
        if not isinstance(request, kind):
            raise InvalidTypeError(
                f"{method} takes {kind.__name__} items, not {type(request).__name__}"
            )
    return cast("tuple[T, ...]", batch)


def new_effect_id() -> str:
    """Return a new effect (or observation) id, unique in any run: 32 lowercase hex characters."""
    return secrets.token_hex(16)


class RecordingOptions(TypedDict, total=False):
    """What :class:`EffectLog`, :meth:`EffectLog.load` and :meth:`EffectLog.resume` record.

    The constructor's keywords: ``record_args``, ``record_result`` (default ``True``),
    ``redact`` (``None``) and ``max_recorded_bytes`` (65,536); and ``tracer_provider``,
    ``meter_provider`` (``None``: the global ones) and ``record_in_spans`` (``False``).
    """

    record_args: bool
    record_result: bool
    redact: Redact | None
    max_recorded_bytes: int
    # And what it emits to OpenTelemetry (docs/telemetry.md).
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    record_in_spans: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimRequest:
    """One claim for :meth:`EffectLog.claim_many`: the keywords of :meth:`EffectLog.claim`."""

    effect_id: str
    action_id: str
    operation: OperationRef
    impact_scope: Iterable[ResourceRef]
    obligations: Iterable[Postcondition] = ()
    kind: EffectKind = EffectKind.WRITE
    retry_of: str | None = None
    step: str = ""
    args: object = None
    # The approval the claim is made under (granted, its effect id the request reserved).
    approval_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OutcomeRequest:
    """One outcome for :meth:`EffectLog.outcome_many`: the keywords of :meth:`EffectLog.outcome`."""

    effect_id: str
    execution: ExecutionOutcome
    impact: Impact
    execution_id: str | None = None
    result: object = None
    result_recorded: bool | None = None


class ObservationRequest(NamedTuple):
    """What an observation records of a resource: the keywords of :meth:`EffectLog.observe`.

    Its ``source_action_id`` is the batch's (see ``observed=`` of
    :meth:`EffectLog.claim_many` and :meth:`EffectLog.outcome_many`).
    """

    observation_id: str
    resource: ResourceRef
    mechanism: ObservationMechanism
    exists: bool | None
    sha256: str | None = None
    revision: str | None = None
    coverage: Coverage = Coverage.COMPLETE
