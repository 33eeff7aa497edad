"""``log.tool`` and ``ledger.tool``: a decorator making each call of a function one effect.

``ledger.tool`` finds its log at each call: the one entered last with ``with`` in the
calling thread or task (:func:`enter_log`, which ``EffectLog.__enter__`` calls).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast, overload

from ledger._run.calls import EffectScope, ExceptionTypes, Log, Referable, exception_types
from ledger._run.recorded import Recording, Redact
from ledger.effects import (
    ApprovalPolicy,
    EffectKind,
    InvalidTypeError,
    OperationRef,
    Postcondition,
    ResourceRef,
    check_identifier,
)

__all__ = ["Tool", "enter_log", "entered_log", "leave_log", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


def _per_call(value: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterable[Any]:
    if value is None:
        return ()
    if callable(value):
        return cast("Iterable[Any]", value(*args, **kwargs))
    return cast("Iterable[Any]", value)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


# The logs entered with ``with log:`` in this context (thread or task), innermost last:
# ledger.tool runs its calls as effects of the last one.
_ENTERED: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "ledger_entered_logs", default=()
)


def enter_log(log_: object) -> contextvars.Token[tuple[Any, ...]]:
    """Make ``log_`` the log ``ledger.tool`` uses in this context, until :func:`leave_log`."""
    return _ENTERED.set((*_ENTERED.get(), log_))


def leave_log(token: contextvars.Token[tuple[Any, ...]]) -> None:
    """Undo :func:`enter_log` (in another context, where the token is foreign: drop the log)."""
    with contextlib.suppress(ValueError):  # exited in another thread or task: nothing to undo
        _ENTERED.reset(token)


def entered_log() -> Log:
    """The log entered last with ``with`` in this context; ``RuntimeError`` if none is."""
    logs = _ENTERED.get()
    if not logs:
        raise RuntimeError(
            "a ledger.tool function was called with no log entered in this thread or task: "
            "run it inside `with EffectLog.resume(run_id) as log:` (or use @log.tool)"
        )
    return cast("Log", logs[-1])


def _step_of(value: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    if value is None:
        return None
    step = value(*args, **kwargs) if callable(value) else value
    if not isinstance(step, str) or not step:
        raise InvalidTypeError(
            f"a tool's step must be a non-empty str, not {type(step).__name__} {step!r:.40}"
        )
    return step


class Tool:
    """A decorator making each call of a function one effect: ``log.tool`` and ``ledger.tool``.

    Bound to a log (``log.tool``), or to the log entered last with ``with`` in the calling
    thread or task, found at each call (``ledger.tool``).
    """

    __slots__ = ("_log",)

    def __init__(self, log_: Log | None) -> None:
        self._log = log_

    @overload
    def __call__(self, fn: F, /) -> F: ...

    @overload
    def __call__(
        self,
        fn: None = None,
        /,
        *,
        kind: EffectKind = ...,
        operation: str | None = ...,
        impact_scope: Iterable[ResourceRef | Referable]
        | Callable[..., Iterable[ResourceRef | Referable]]
        | None = ...,
        obligations: Iterable[Postcondition] | Callable[..., Iterable[Postcondition]] | None = ...,
        backend: str = ...,
        no_impact: ExceptionTypes = ...,
        step: Callable[..., str] | None = ...,
        record_args: bool | None = ...,
        record_result: bool | None = ...,
        redact: Redact | None = ...,
        approval: ApprovalPolicy | None = ...,
    ) -> Callable[[F], F]: ...

    def __call__(
        self,
        fn: F | None = None,
        /,
        *,
        kind: EffectKind = EffectKind.WRITE,
        operation: str | None = None,
        impact_scope: Iterable[ResourceRef | Referable]
        | Callable[..., Iterable[ResourceRef | Referable]]
        | None = None,
        obligations: Iterable[Postcondition] | Callable[..., Iterable[Postcondition]] | None = None,
        backend: str = "",
        no_impact: ExceptionTypes = (),
        step: Callable[..., str] | None = None,
        record_args: bool | None = None,
        record_result: bool | None = None,
        redact: Redact | None = None,
        approval: ApprovalPolicy | None = None,
    ) -> F | Callable[[F], F]:
        """Decorate ``fn`` (bare ``@log.tool``), or return a decorator with these options."""
        if not isinstance(kind, EffectKind):
            raise InvalidTypeError(f"kind must be an EffectKind, not {type(kind).__name__}")
        if operation is not None:
            check_identifier(operation, "operation")
        OperationRef("tool", backend, "0" * 64)  # checks backend now, not at the first call
        no_impact_types = exception_types(no_impact)
        if step is not None and not callable(step):
            raise InvalidTypeError(
                f"step must be a callable taking the tool's arguments, not {type(step).__name__}"
            )
        Recording().given(record_args, record_result, redact)  # checks them now
        if approval is not None and not isinstance(approval, ApprovalPolicy):
            raise InvalidTypeError(
                f"approval must be an ApprovalPolicy, not {type(approval).__name__}"
            )
        bound_log = self._log

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise InvalidTypeError(f"log.tool decorates a function, not {type(fn).__name__}")
            if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
                raise InvalidTypeError(
                    "log.tool cannot wrap a generator: its work happens after the call "
                    "returns; wrap each step in log.effect instead"
                )
            name = operation if operation is not None else getattr(fn, "__name__", None)
            if name is None:
                raise InvalidTypeError(f"{fn!r:.60} has no __name__: give log.tool an operation")
            check_identifier(name, "operation")
            signature = inspect.signature(fn)

            def scope(args: tuple[Any, ...], kwargs: dict[str, Any]) -> EffectScope:
                log_ = entered_log() if bound_log is None else bound_log
                bound = signature.bind(*args, **kwargs)  # a wrong call fails as it would
                bound.apply_defaults()
                recording = cast("Any", log_).recording.given(record_args, record_result, redact)
                return EffectScope(
                    log_,
                    name,
                    args=dict(bound.arguments),
                    kind=kind,
                    impact_scope=_per_call(impact_scope, args, kwargs),
                    obligations=_per_call(obligations, args, kwargs),
                    backend=backend,
                    no_impact=no_impact_types,
                    step=_step_of(step, args, kwargs),
                    recording=recording,
                    tool=True,
                    approval=approval,
                )

            if _is_async(fn):

                @functools.wraps(fn)
                async def async_tool(*args: Any, **kwargs: Any) -> Any:
                    async with scope(args, kwargs) as call:
                        if call.replayed:
                            return call.result
                        call.returned = await fn(*args, **kwargs)
                        return call.returned

                return cast("F", async_tool)

            @functools.wraps(fn)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                with scope(args, kwargs) as call:
                    if call.replayed:
                        return call.result
                    call.returned = fn(*args, **kwargs)
                    return call.returned

            return cast("F", sync_tool)

        if fn is None:
            return decorate
        return decorate(fn)


tool = Tool(None)
"""``ledger.tool``: ``log.tool``'s decorator, for functions defined before any log exists."""
