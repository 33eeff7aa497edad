"""What agent code calls on a log: one tool call as one effect, and a file's observation.

:class:`ToolCalls` is the part of :class:`~ledger.effect_log.EffectLog` that
``log.effect``, ``log.tool`` and ``log.observe_file`` are, and the door they enter a step
by (:meth:`ToolCalls.begin_step`): the log's own records are written by the log
(claims with their baseline observations, outcomes with the observations after them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ledger._run.calls import EffectScope, ExceptionTypes, Log, Referable
from ledger._run.files import FileTarget, observe_file
from ledger._run.recorded import Redact
from ledger._run.requests import ClaimRequest, ObservationRequest, new_effect_id
from ledger._run.steps import Begin
from ledger._run.tool import Tool
from ledger.effects import (
    ApprovalPolicy,
    EffectClaim,
    EffectKind,
    Observation,
    Postcondition,
    ResourceRef,
)

if TYPE_CHECKING:
    import threading

    from ledger._run.recorded import Recording
    from ledger._run.state import RunState

__all__ = ["ToolCalls"]


class ToolCalls:
    """``effect``, ``tool``, ``observe_file`` and ``begin_step`` of :class:`EffectLog`."""

    @property
    def _log(self) -> Log:
        return cast("Log", self)  # an EffectLog: these are its methods

    if TYPE_CHECKING:  # the log's, which these methods use
        _cond: threading.Condition
        _state: RunState
        _recording: Recording

        def _check_open(self) -> None: ...

        def gate(
            self, probe: EffectClaim, policy: ApprovalPolicy, *, step: str, args: object
        ) -> Any: ...

        def give_back_step(self, probe: EffectClaim) -> None: ...

        def claim_passed(
            self,
            passed: Any,
            claim: Callable[[], EffectClaim],
            probe: EffectClaim,
            policy: ApprovalPolicy,
            *,
            step: str,
            args: object,
            automatic: bool,
        ) -> EffectClaim: ...

        def _claim_all(
            self,
            batch: tuple[ClaimRequest, ...],
            action: str,
            *,
            retrying: str | None = None,
            observed: Sequence[ObservationRequest] = (),
        ) -> tuple[EffectClaim, ...]: ...

    def begin_step(
        self,
        probe: EffectClaim,
        *,
        step: str | None,
        args: object = None,
        observed: Sequence[ObservationRequest] = (),
        tool: bool = False,
        approval: ApprovalPolicy | None = None,
    ) -> Begin:
        """Enter a call's step: replay it, or claim it (first attempt or retry) after ``observed``.

        The door :meth:`effect` and :attr:`tool` go through (see :meth:`effect` for what
        entering a step does): ``probe`` is the call's claim as checked, ``step`` None the
        automatic one, ``args`` the arguments the claim records (checked; ``None``: the
        probe's own), ``observed`` the baseline written in the claim's transaction;
        ``tool`` true makes a replay without a recorded result raise
        :class:`~ledger.errors.AlreadyDone`. Decided under the log's lock, so two threads
        entering one step make one attempt. Raises what a call that must not run raises,
        before anything is written. With ``approval``, a first attempt passes the gate
        first (see :meth:`effect`).
        """
        approval_id, passed = None, None
        with self._cond:
            self._check_open()
            planned = self._state.plan_step(probe, step, tool=tool)
            plan = planned.plan
            if plan.replay is not None:
                return Begin(plan.replay, plan.attempt, replayed=True, outcome=planned.outcome)
            effect_id = probe.effect_id
            if plan.retry_of is not None and effect_id in self._state.claimed:
                # The code gives its call an effect id: the step's first attempt has it.
                effect_id = new_effect_id()
            if approval is not None and plan.retry_of is None:
                try:
                    passed = self.gate(
                        probe,
                        approval,
                        step=planned.step,
                        args=probe.args if args is None else args,
                    )
                except BaseException:
                    if step is None:  # not claimed: its automatic step is the next call's
                        self.give_back_step(probe)
                    raise
                approval_id, effect_id = passed.approval_id, passed.effect_id
        # Claimed with the lock released, as every claim is (the queue takes it once):
        # _claim_all checks again that a retry is still due and a first attempt's step free.
        request = ClaimRequest(
            effect_id=effect_id,
            action_id=probe.action_id if probe.action_id != probe.effect_id else effect_id,
            operation=probe.operation,
            impact_scope=probe.impact_scope,
            obligations=probe.obligations,
            kind=probe.kind,
            retry_of=plan.retry_of,
            step=planned.step,
            args=probe.args if args is None else args,
            approval_id=approval_id,
        )

        def claim() -> EffectClaim:
            return self._claim_all(
                (request,),
                f"claim {effect_id!r}",
                retrying=plan.retry_of if plan.checked else None,
                observed=observed,
            )[0]

        if passed is None or approval is None:
            return Begin(claim(), plan.attempt)
        claimed = self.claim_passed(
            passed,
            claim,
            probe,
            approval,
            step=planned.step,
            args=request.args,
            automatic=step is None,
        )
        return Begin(claimed, plan.attempt)

    def effect(
        self,
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
        record_args: bool | None = None,
        record_result: bool | None = None,
        redact: Redact | None = None,
        approval: ApprovalPolicy | None = None,
    ) -> EffectScope:
        """One tool call as one effect: ``with log.effect("op", args=...) as call:``.

        Entering (``with`` or ``async with``) first observes every file a postcondition
        names (the baseline :func:`~ledger.effects.decide` compares with), then claims
        the effect, durably, before the body runs. A normal exit records
        ``REPORTED_SUCCESS`` with impact ``CERTAIN`` (``NONE`` for a ``READ``); an
        exception records ``FAILED`` with impact ``POSSIBLE`` (``NONE`` for a type in
        ``no_impact``) and goes on unchanged; an outcome the body gave through
        ``call.succeeded()`` or ``call.failed()`` is kept. Then those files are observed
        again, so a write that landed is ``VERIFIED``.

        ``step`` names the call across restarts (a framework's tool-call id); without one,
        the n-th call of this log with an operation and arguments digest is the n-th such
        call of the run. Entering a step that has attempts acts on its decision and writes
        nothing unless the body is to run: ``DONE`` replays (``call.replayed`` is true and
        ``call.result`` the recorded result: the body checks ``call.replayed``), ``RETRY``
        claims a retry with the same idempotency key, ``WAIT`` raises
        :class:`~ledger.errors.StillRunning`, ``ESCALATE``
        :class:`~ledger.errors.NeedsResolution`. A ``WRITE`` or ``IRREVERSIBLE`` call into
        the scope of an effect in doubt raises ``NeedsResolution`` too.

        ``args`` (``None``: ``{}``) is digested with :func:`~ledger.effects.args_digest`
        and recorded (``record_args``, through ``redact``); ``impact_scope`` takes
        references or resources (``FilesystemResource``, ``OwnedResource``,
        ``ExternalResource``); ``effect_id`` defaults to a fresh unique id, ``action_id``
        to the effect id. Every argument is checked here: nothing is written for a bad
        one (``ValueError`` / ``TypeError``). In asyncio code the writes run off the event
        loop; see docs/api.md for cancellation.

        ``approval`` (an :class:`~ledger.effects.ApprovalPolicy`) gates the call behind a
        person's yes to this exact call (its :func:`~ledger.effects.action_digest`):
        without a grant, entering writes a request (once) and raises
        :class:`~ledger.errors.ApprovalPending`; once granted, the claim is made under the
        grant, which no other call can use; denied, it raises
        :class:`~ledger.errors.ApprovalDenied`; expired unanswered, it asks again. A step
        already attempted acts on its decision as above, and its retry needs no new
        approval. See docs/concepts.md, "Approvals".
        """
        return EffectScope(
            self._log,
            operation,
            args=args,
            kind=kind,
            impact_scope=impact_scope,
            obligations=obligations,
            effect_id=effect_id,
            action_id=action_id,
            backend=backend,
            no_impact=no_impact,
            step=step,
            recording=self._recording.given(record_args, record_result, redact),
            approval=approval,
        )

    @property
    def tool(self) -> Tool:
        """A decorator making each call of a function (sync or async) one :meth:`effect`.

        ``@log.tool`` or ``@log.tool(kind=..., operation=None, impact_scope=None,
        obligations=None, backend="", no_impact=(), step=None, record_args=None,
        record_result=None, redact=None)``: the call's bound arguments (defaults applied)
        are the effect's ``args``, the function's ``__name__`` its operation unless one is
        given, its return value the recorded result; ``impact_scope``, ``obligations`` and
        ``step`` may be callables taking the function's arguments. A call whose step is
        done returns the recorded result, or raises :class:`~ledger.errors.AlreadyDone`
        when none was recorded (a ``READ`` runs again). The wrapper keeps the function's
        name, docstring and signature.
        """
        return Tool(self._log)

    def observe_file(
        self,
        resource: FileTarget,
        *,
        source_action_id: str,
        observation_id: str | None = None,
    ) -> Observation:
        """Read a file and record what it holds: its SHA-256, or that it is absent.

        ``resource`` is a ``FilesystemResource`` or an ``fs`` :class:`ResourceRef`. A
        regular file is read whole (``FILESYSTEM_READ``, ``COMPLETE``); symlinks are
        followed, and a dangling one is absent. A directory, a FIFO, a socket, a device
        or a file this process may not read is recorded as existing without a digest
        (``FILESYSTEM_STAT``). ``OSError`` when not even its existence can be told.
        ``observation_id`` defaults to a fresh unique id.
        """
        return observe_file(
            self._log, resource, source_action_id=source_action_id, observation_id=observation_id
        )
