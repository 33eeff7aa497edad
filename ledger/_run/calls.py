"""One tool call, one effect: what ``log.effect``, ``log.tool`` and ``log.observe_file`` do.

Agent code wraps a tool call in ``with log.effect(...) as call:`` (or ``async with``).
For one call the log gets, in ``seq`` order:

1. an observation of each file a postcondition names, made *before* the claim: the
   baseline that :func:`ledger.effects.decide` compares with (a ``WRITE`` whose files are
   seen exactly as they were before it may be retried);
2. the claim, durable before the body runs;
3. the outcome, unless the body gave one: ``REPORTED_SUCCESS`` when the body returns,
   ``FAILED`` when it raises (the exception goes on unchanged);
4. an observation of each of those files again: the evidence ``assess`` reads, so a
   write that landed ends ``VERIFIED`` without more code.

A file that cannot be observed (the observation raises ``OSError``) is logged and left
out: the verdict then stays ``UNVERIFIED``, which is the truth.

In asyncio code every step that waits for the disk runs in the event loop's default
executor, so other tasks run meanwhile. A step in a worker thread cannot be stopped, so
a cancellation never cuts one short: the task waits for the step to end, records what
the effect's fate needs, and only then lets the ``CancelledError`` go on.

- Cancelled while claiming: if the claim landed, the body never ran, so the effect is
  settled ``FAILED`` with impact ``NONE``; otherwise nothing was claimed.
- Cancelled in the body: ``FAILED`` with impact ``POSSIBLE`` (``NONE`` if
  ``CancelledError`` is in ``no_impact``), and the ``CancelledError`` is re-raised.
- Cancelled while the outcome is written: the outcome and the observations land, then
  the ``CancelledError`` is raised.

In synchronous code, Ctrl-C is held back by the log until a write's fate is known (see
``Writes.submit`` in ledger._run.writes); a ``KeyboardInterrupt`` raised as a claim lands
settles the claim ``FAILED`` with impact ``NONE`` like a cancellation, and one in the body records
``FAILED`` / ``POSSIBLE`` like any exception.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias, TypeVar, cast

from ledger import _telemetry
from ledger._run.files import Observer, look_at
from ledger._run.recorded import Recording
from ledger._run.requests import ObservationRequest, OutcomeRequest, new_effect_id
from ledger.effects import (
    ApprovalPolicy,
    Assessment,
    EffectClaim,
    EffectKind,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    InvalidTypeError,
    OperationRef,
    Postcondition,
    ResourceRef,
    canonical_args,
    check_identifier,
    check_step,
    resource_ref,
)

if TYPE_CHECKING:
    from ledger._run.steps import Begin

__all__ = [
    "AsyncEffectCall",
    "EffectCall",
    "EffectScope",
    "Log",
    "Referable",
    "Settle",
    "current_call",
    "exception_types",
]

log = logging.getLogger("ledger")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Referable(Protocol):
    """A resource object that gives its own reference (``FilesystemResource`` and the others)."""

    def to_ref(self, role: str) -> ResourceRef:
        """Return the resource's :class:`ResourceRef` with ``role``."""
        ...


ExceptionTypes: TypeAlias = type[BaseException] | tuple[type[BaseException], ...]


class Settle(NamedTuple):
    """An outcome ``log.effect`` records at the end of a call, with the result it recorded."""

    execution: ExecutionOutcome
    impact: Impact
    result: object = None
    recorded: bool = False


class Log(Observer, Protocol):
    """What this module needs of an :class:`~ledger.effect_log.EffectLog`: public doors only."""

    @property
    def recording(self) -> Recording: ...

    def begin_step(
        self,
        probe: EffectClaim,
        *,
        step: str | None,
        args: object = ...,
        observed: Sequence[ObservationRequest] = ...,
        tool: bool = ...,
        approval: ApprovalPolicy | None = ...,
    ) -> Begin: ...

    def outcome(
        self,
        *,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        execution_id: str | None = ...,
        result: object = ...,
        result_recorded: bool | None = ...,
    ) -> EffectOutcome: ...

    def outcome_many(
        self,
        requests: Iterable[OutcomeRequest],
        *,
        observed: Sequence[ObservationRequest] = ...,
        source_action_id: str = ...,
    ) -> tuple[EffectOutcome, ...]: ...

    def history(self) -> History: ...

    def assess(self, effect_id: str) -> Assessment: ...

    def outcome_of(self, effect_id: str) -> EffectOutcome | None: ...


# --------------------------------------------------------------------------- one effect


def _scope_refs(value: object) -> tuple[ResourceRef, ...]:
    if type(value) is list or type(value) is tuple:  # the usual: no abstract class to ask
        refs = tuple(value)
        if all(type(ref) is ResourceRef for ref in refs):
            return refs
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidTypeError(
            "impact_scope must be a sequence of ResourceRef or resources (FilesystemResource, "
            f"OwnedResource, ExternalResource), not {type(value).__name__}"
        )
    return tuple(
        item if isinstance(item, ResourceRef) else resource_ref(item, "target") for item in value
    )


def exception_types(value: object) -> tuple[type[BaseException], ...]:
    types = value if isinstance(value, tuple) else (value,)
    for item in types:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidTypeError(
                "no_impact must be an exception type or a tuple of them, "
                f"not one holding {item!r:.60}"
            )
    return cast("tuple[type[BaseException], ...]", types)


_UNSET: Any = object()  # no result given
# A probe is never written: the claim gets the log's time when it is made.
_PROBE_TIME = "2000-01-01T00:00:00.000000+00:00"


@dataclasses.dataclass(slots=True)
class _Plan:
    """One effect's checked arguments, and the steps that record it (each blocking)."""

    log: Log
    probe: EffectClaim  # the claim as it will be, checked; seq, time and args are the log's
    args: object  # the arguments as the claim records them
    targets: tuple[ResourceRef, ...]  # the files its postconditions name, once each
    no_impact: tuple[type[BaseException], ...]
    step: str | None  # None: the automatic one
    tool: bool  # a decorated function: a replay with no recorded result raises
    recording: Recording
    approval: ApprovalPolicy | None = None  # a person's yes needed first
    claimed: str = ""  # the id it was claimed under (a retry's may not be the probe's)

    @property
    def effect_id(self) -> str:
        return self.claimed or self.probe.effect_id

    def begin(self) -> Begin:
        """Observe the targets (the baseline), then claim, or replay: durable when it returns."""
        probe = self.probe
        try:
            begun = self.log.begin_step(
                probe,
                step=self.step,
                args=self.args,
                observed=self.look("before"),
                tool=self.tool,
                approval=self.approval,
            )
        except BaseException as e:
            # A caller's mistake or the store's trouble: the claim exists nowhere. A signal
            # handler's exception (Ctrl-C) is held back until the log knows whether the
            # claim landed: if it did, the body never runs.
            if not isinstance(e, Exception) and self.log.history().claim(probe.effect_id):
                self.abandon()
            raise
        if not begun.replayed:
            self.claimed = begun.claim.effect_id
        return begun

    def abandon(self) -> None:
        """Settle a claim whose body never ran: FAILED, impact NONE (never raises)."""
        try:
            self.log.outcome(
                effect_id=self.effect_id, execution=ExecutionOutcome.FAILED, impact=Impact.NONE
            )
        except Exception:
            log.exception(
                "effect %r: its body never ran, but that could not be recorded", self.effect_id
            )

    def finish(self, call: _Call, error: BaseException | None) -> None:
        """Record the outcome (unless the body gave one) and observe the targets again.

        A replayed call records nothing. When the body raised ``error``, a failure here is
        logged rather than raised, so the body's exception goes on unchanged.
        """
        if call.replayed:
            return
        try:
            settle: Settle | None = None
            if not call.outcome_given and not self._settled():
                if error is None:
                    impact = Impact.NONE if self.probe.kind is EffectKind.READ else Impact.CERTAIN
                    result, recorded = None, False
                    if call.returned is not _UNSET:
                        result, recorded = self.stored_result(call.returned)
                    settle = Settle(ExecutionOutcome.REPORTED_SUCCESS, impact, result, recorded)
                else:
                    impact = Impact.NONE if isinstance(error, self.no_impact) else Impact.POSSIBLE
                    settle = Settle(ExecutionOutcome.FAILED, impact)
            # The outcome and the targets seen after the call share one transaction.
            requests: tuple[OutcomeRequest, ...] = ()
            if settle is not None:
                requests = (
                    OutcomeRequest(
                        effect_id=self.effect_id,
                        execution=settle.execution,
                        impact=settle.impact,
                        result=settle.result,
                        result_recorded=settle.recorded,
                    ),
                )
            seen = self.look("after")
            if requests or seen:
                self.log.outcome_many(
                    requests, observed=seen, source_action_id=self.probe.action_id
                )
        except Exception:
            if error is None:
                raise
            log.exception(
                "effect %r: its outcome could not be recorded after its body raised %s",
                self.effect_id,
                type(error).__name__,
            )

    def stored_result(self, value: object) -> tuple[object, bool]:
        return self.recording.stored_result(value, f"the result of effect {self.effect_id!r}")

    def _settled(self) -> bool:
        """Whether the body recorded a terminal outcome itself, through the log."""
        return self.log.outcome_of(self.effect_id) is not None

    def look(self, when: str) -> list[ObservationRequest]:
        """Read the targets (files): what the observations ``when`` the call will record."""
        return look_at(self.targets, f"effect {self.effect_id!r}", f"{when} its call")

    def outcome(
        self, execution: ExecutionOutcome, impact: Impact, result: object = _UNSET
    ) -> EffectOutcome:
        stored, recorded = (None, False) if result is _UNSET else self.stored_result(result)
        return self.log.outcome(
            effect_id=self.effect_id,
            execution=execution,
            impact=impact,
            result=stored,
            result_recorded=recorded,
        )


class _Call:
    """What the body of ``log.effect`` gets: the effect's identity and its claim."""

    __slots__ = (
        "_given",
        "_plan",
        "_result_recorded",
        "attempt",
        "claim",
        "replayed",
        "result",
        "returned",
    )

    def __init__(self, plan: _Plan, begun: Begin) -> None:
        self._plan = plan
        self._given = False
        self.claim = begun.claim
        """The durable claim: this attempt's, or the attempt replayed."""
        self.replayed = begun.replayed
        """Whether the call's step was done already: the body must not run its call again."""
        self.attempt = begun.attempt
        """Which attempt of the step this is (or was, replayed): 1 for the first."""
        replayed = begun.outcome if begun.replayed else None
        self.result: Any = None if replayed is None else replayed.result
        """The recorded result of a replayed call (``None`` when none was recorded)."""
        self._result_recorded = replayed is not None and replayed.result_recorded is True
        self.returned: Any = _UNSET  # what a decorated function returned, recorded at exit

    @property
    def effect_id(self) -> str:
        """The effect's id."""
        return self.claim.effect_id

    @property
    def idempotency_key(self) -> str:
        """The key to hand to the system the call reaches (an ``Idempotency-Key`` header)."""
        return self.claim.idempotency_key

    @property
    def kind(self) -> EffectKind:
        """The effect's kind."""
        return self.claim.kind

    @property
    def step(self) -> str:
        """The call's step: its identity across restarts."""
        return self.claim.step

    @property
    def result_recorded(self) -> bool:
        """Whether a replayed call has a recorded result (``None`` may be one)."""
        return self._result_recorded

    @property
    def outcome_given(self) -> bool:
        """Whether the body gave the outcome, through :meth:`succeeded` or :meth:`failed`."""
        return self._given

    def _take(self, impact: object, default: Impact | None = None) -> Impact:
        if self.replayed:
            raise ValueError(
                f"effect {self.effect_id!r} is replayed: its outcome is recorded already"
            )
        if impact is None and default is not None:
            impact = default
        if not isinstance(impact, Impact):
            raise InvalidTypeError(f"impact must be an Impact, not {type(impact).__name__}")
        if self._given:
            raise ValueError(f"effect {self.effect_id!r} already has its outcome from this call")
        self._given = True
        return impact

    def _success_impact(self, impact: Impact | None) -> Impact:
        default = Impact.NONE if self.kind is EffectKind.READ else Impact.CERTAIN
        return self._take(impact, default)

    def __repr__(self) -> str:
        replayed = " replayed" if self.replayed else ""
        return (
            f"<{type(self).__name__} effect_id={self.effect_id!r} kind={self.kind.value}{replayed}>"
        )


class EffectCall(_Call):
    """The body's handle on its effect, in ``with log.effect(...) as call``."""

    __slots__ = ()

    def succeeded(self, *, impact: Impact | None = None, result: Any = _UNSET) -> EffectOutcome:
        """Record ``REPORTED_SUCCESS`` now (impact default: ``CERTAIN``, ``NONE`` for a READ).

        ``result`` is what the call returned, recorded as the log records results. The
        block then records no outcome of its own, even if the body raises later.
        """
        impact = self._success_impact(impact)
        return self._plan.outcome(ExecutionOutcome.REPORTED_SUCCESS, impact, result)

    def failed(self, *, impact: Impact = Impact.POSSIBLE) -> EffectOutcome:
        """Record ``FAILED`` now; impact ``NONE`` says the call certainly did nothing."""
        impact = self._take(impact)
        return self._plan.outcome(ExecutionOutcome.FAILED, impact)


class AsyncEffectCall(_Call):
    """The body's handle on its effect, in ``async with log.effect(...) as call``.

    :meth:`succeeded` and :meth:`failed` start writing the outcome off the event loop
    at once and return a future of it: ``await`` it to wait until it is durable, or
    let the block's exit wait for it.
    """

    __slots__ = ("_pending",)

    def __init__(self, plan: _Plan, begun: Begin) -> None:
        super().__init__(plan, begun)
        self._pending: asyncio.Future[EffectOutcome] | None = None

    def succeeded(
        self, *, impact: Impact | None = None, result: Any = _UNSET
    ) -> asyncio.Future[EffectOutcome]:
        """Record ``REPORTED_SUCCESS`` (impact default: ``CERTAIN``, ``NONE`` for a READ)."""
        impact = self._success_impact(impact)
        return self._start(ExecutionOutcome.REPORTED_SUCCESS, impact, result)

    def failed(self, *, impact: Impact = Impact.POSSIBLE) -> asyncio.Future[EffectOutcome]:
        """Record ``FAILED``; impact ``NONE`` says the call certainly did nothing."""
        impact = self._take(impact)
        return self._start(ExecutionOutcome.FAILED, impact)

    @property
    def pending_outcome(self) -> asyncio.Future[EffectOutcome] | None:
        """The outcome the body gave, being written or written; ``None`` if it gave none."""
        return self._pending

    def _start(
        self, execution: ExecutionOutcome, impact: Impact, result: Any = _UNSET
    ) -> asyncio.Future[EffectOutcome]:
        self._pending = _off_loop(functools.partial(self._plan.outcome, execution, impact, result))
        return self._pending


def _off_loop(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Start ``fn`` in the running loop's default executor, in this task's context."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(None, contextvars.copy_context().run, fn)


async def _wait(future: asyncio.Future[Any]) -> asyncio.CancelledError | None:
    """Wait until ``future`` is done, even if this task is cancelled meanwhile.

    Returns the (first) cancellation met, for the caller to raise once it has recorded
    what the step's result needs. ``future`` itself is never cancelled: it is a thread.
    """
    cancelled = None
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    return cancelled


# The call whose block is running in this context (thread or task), for code that runs
# inside it without being handed it: a function decorated with @log.tool.
_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "ledger_current_call", default=None
)


def current_call() -> EffectCall | AsyncEffectCall | None:
    """The effect whose ``log.effect`` block (or ``@log.tool`` call) is running here, if any.

    A tool function reads its idempotency key from it:
    ``current_call().idempotency_key``. Per thread and per asyncio task; the innermost
    block when they nest; ``None`` outside every block.
    """
    call = _CURRENT.get()
    assert call is None or isinstance(call, EffectCall | AsyncEffectCall)  # noqa: S101
    return call


class EffectScope:
    """What :meth:`~ledger.effect_log.EffectLog.effect` returns: one effect, entered once.

    ``with`` gives an :class:`EffectCall`, ``async with`` an :class:`AsyncEffectCall`.
    Every argument was checked when it was made: nothing is written for a bad one.
    """

    __slots__ = ("_call", "_entered", "_plan", "_span", "_token")

    def __init__(
        self,
        log_: Log,
        operation: str,
        *,
        args: object = None,
        kind: EffectKind = EffectKind.WRITE,
        impact_scope: Iterable[ResourceRef | Referable] = (),
        obligations: Iterable[Postcondition] = (),
        effect_id: str | None = None,
        action_id: str | None = None,
        backend: str = "",
        no_impact: ExceptionTypes = (),
        step: str | None = None,
        recording: Recording | None = None,
        tool: bool = False,
        approval: ApprovalPolicy | None = None,
    ) -> None:
        if not isinstance(kind, EffectKind):
            raise InvalidTypeError(f"kind must be an EffectKind, not {type(kind).__name__}")
        if step is not None:
            check_step(step)
            if not step:
                raise ValueError("step must be a non-empty string (or None for the automatic one)")
        if approval is not None and not isinstance(approval, ApprovalPolicy):
            raise InvalidTypeError(
                f"approval must be an ApprovalPolicy, not {type(approval).__name__}"
            )
        recording = Recording() if recording is None else recording
        args = {} if args is None else args
        canonical = canonical_args(args)  # checked once: digested, and recorded
        digest = hashlib.sha256(canonical).hexdigest()
        effect_id = new_effect_id() if effect_id is None else effect_id
        check_identifier(effect_id, "effect_id")
        # The record checks every other field as the claim will, before anything is written;
        # the arguments, checked above, are held apart.
        probe = EffectClaim(
            effect_id=effect_id,
            seq=1,
            action_id=effect_id if action_id is None else action_id,
            operation=OperationRef(operation, backend, digest),
            impact_scope=_scope_refs(impact_scope),
            obligations=obligations,  # type: ignore[arg-type]  # checked and made a tuple
            recorded_at=_PROBE_TIME,
            kind=kind,
        )
        targets: dict[str, ResourceRef] = {}
        for condition in probe.obligations:
            if condition.target.kind == "fs":
                targets.setdefault(condition.target.locator, condition.target)
        self._plan = _Plan(
            log_,
            probe,
            recording.stored_args(args, canonical, f"the arguments of {operation}"),
            tuple(targets.values()),
            exception_types(no_impact),
            step,
            tool,
            recording,
            approval,
        )
        self._entered = False
        self._call: _Call | None = None
        self._token: contextvars.Token[_Call | None] | None = None
        self._span: object | None = None  # the effect's span made current in the body

    @property
    def effect_id(self) -> str:
        """The id the effect is claimed under."""
        return self._plan.effect_id

    def _enter(self) -> None:
        if self._entered:
            raise RuntimeError(
                "a log.effect(...) is entered once: make a new one for each tool call"
            )
        self._entered = True

    def __enter__(self) -> EffectCall:
        self._enter()
        call = EffectCall(self._plan, self._plan.begin())
        self._arrive(call)
        return call

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._call is not None  # noqa: S101 - entered, or there is no exit
        self._leave()
        self._plan.finish(self._call, exc)

    def _arrive(self, call: _Call) -> None:
        """Make ``call`` the current one, and its span the current span, for the body."""
        self._call = call
        self._token = _CURRENT.set(call)
        self._span = _telemetry.enter_span(self._plan.log, call.effect_id)

    def _leave(self) -> None:
        if self._span is not None:
            _telemetry.leave_span(self._span)
            self._span = None
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    async def __aenter__(self) -> AsyncEffectCall:
        self._enter()
        begun = _off_loop(self._plan.begin)
        cancelled = await _wait(begun)
        if cancelled is None:
            call = AsyncEffectCall(self._plan, begun.result())
            self._arrive(call)
            return call
        error = begun.exception()
        if error is not None:
            raise cancelled from error  # nothing was claimed
        if not begun.result().replayed:
            await _wait(_off_loop(self._plan.abandon))  # claimed, and the body will never run
        raise cancelled

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        call = self._call
        assert isinstance(call, AsyncEffectCall)  # noqa: S101 - entered with async with
        self._leave()
        cancelled = None
        given_error = None
        pending = call.pending_outcome
        if pending is not None:
            cancelled = await _wait(pending)
            given_error = pending.exception()
        finished = _off_loop(functools.partial(self._plan.finish, call, exc))
        cancelled = await _wait(finished) or cancelled
        error = given_error or finished.exception()
        if exc is not None:
            if given_error is not None:
                log.error(
                    "effect %r: the outcome its body gave could not be recorded: %s",
                    self.effect_id,
                    given_error,
                )
            return  # the body's exception goes on unchanged
        if cancelled is not None:
            if error is not None:
                log.error("effect %r: %s", self.effect_id, error)
            raise cancelled from error
        if error is not None:
            raise error
