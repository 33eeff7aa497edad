"""Resume (AGENT_API.md, "Resume"): the same code, run again after a crash, acts by itself.

A restart is stood in for in this process: the log is closed and the run taken up again
with :meth:`EffectLog.resume`. A call interrupted inside its body (claimed, no outcome)
is made through the record layer, as ``log.effect`` makes it: the baseline of its files,
then its claim with its step, and no outcome. Real crashes (SIGKILL) are tested
elsewhere. Each test runs once per backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ledger
from ledger import _inspect, _paths
from ledger import effects as fx
from ledger._run.steps import auto_step
from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import (
    AlreadyDone,
    NeedsResolution,
    RunHeldError,
    StepNotRunError,
    StillRunning,
)
from ledger.resources import ExternalResource
from ledger.storage import Mode
from tests.backends import Backend, Holder, writes_nothing
from tests.builders import INTERRUPTED, RUNNING, SUCCESS, sha

READ = fx.EffectKind.READ
IDEMPOTENT = fx.EffectKind.IDEMPOTENT
WRITE = fx.EffectKind.WRITE
IRREVERSIBLE = fx.EffectKind.IRREVERSIBLE
DONE = fx.NextStep.DONE
RETRY = fx.NextStep.RETRY
ESCALATE = fx.NextStep.ESCALATE

OUTBOX = ExternalResource("https://mail.example/outbox")
MESSAGE = ExternalResource("https://mail.example/outbox/42")
ELSEWHERE = ExternalResource("https://calendar.example/events")


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _store_verifies(store_dir: Path | str) -> Iterator[None]:
    """Every store these tests leave passes ``ledger verify``'s checks, chains and all."""
    yield
    if isinstance(store_dir, Path) and not (store_dir / _paths.DB_NAME).exists():
        return  # nothing was ever written
    report = _inspect.verify(store_dir)
    assert report.ok, report


@pytest.fixture
def logs(store_dir: Path | str, run_id: str) -> Iterator[Callable[..., EffectLog]]:
    """Start (or restart) the test's run with ``EffectLog.resume``; all closed at the end."""
    made: list[EffectLog] = []

    def start(**options: Any) -> EffectLog:
        made.append(EffectLog.resume(run_id, store_dir, **options))
        return made[-1]

    yield start
    for log in made:
        log.close()


@pytest.fixture
def elsewhere(backend: Backend) -> Iterator[Callable[[Path | str, str], Holder]]:
    """Holders of a run standing for another process; let go after the test."""
    made: list[Holder] = []

    def make(store: Path | str, run_id: str) -> Holder:
        made.append(backend.elsewhere(store, run_id))
        return made[-1]

    yield make
    for holder in made:
        holder.close()


# The logs restart() opens, closed after each test (_close_restarted): a log left open
# holds its store's watch until the garbage collector finds it, and a process has few.
_RESTARTED: list[EffectLog] = []


@pytest.fixture(autouse=True)
def _close_restarted() -> Iterator[None]:
    yield
    while _RESTARTED:
        _RESTARTED.pop().close()


def restart(log: EffectLog, **options: Any) -> EffectLog:
    """Close ``log`` (the worker is gone) and take its run up again, as a restarted worker does."""
    run_id, store = log.run_id, log.directory
    log.close()
    _RESTARTED.append(EffectLog.resume(run_id, store, **options))
    return _RESTARTED[-1]


def count(log: EffectLog) -> int:
    """How many records the log knows of its run."""
    return len(log.history().records())


def file_target(path: Path) -> fx.ResourceRef:
    return fx.ResourceRef("fs", str(path), "target")


def interrupted(
    log: EffectLog,
    operation: str,
    args: dict[str, Any],
    *,
    step: str,
    kind: fx.EffectKind = WRITE,
    scope: tuple[Any, ...] = (),
    obligations: tuple[fx.Postcondition, ...] = (),
    effect_id: str | None = None,
) -> fx.EffectClaim:
    """A call whose body was entered and never finished: its files' baseline and its claim, no outcome."""
    effect_id = effect_id or f"crashed-{operation}"
    for condition in obligations:
        if condition.target.kind == "fs":
            log.observe_file(condition.target, source_action_id=effect_id)
    refs = tuple(r if isinstance(r, fx.ResourceRef) else r.to_ref("target") for r in scope)
    return log.claim(
        effect_id=effect_id,
        action_id=effect_id,
        operation=fx.OperationRef(operation, "", fx.args_digest(args)),
        impact_scope=refs,
        obligations=obligations,
        kind=kind,
        step=step,
        args=args,
    )


def stored_steps(backend: Backend, store: Path | str, run_id: str) -> list[str]:
    rows = backend.query(store, "SELECT step FROM claims WHERE run_id = ? ORDER BY seq", (run_id,))
    return [step for (step,) in rows]


# --------------------------------------------------------------------------- 1. steps


def test_an_explicit_step_is_stored_reloaded_and_chained(
    backend: Backend, store_dir: Path | str, run_id: str, logs: Callable[..., EffectLog]
) -> None:
    log = logs()
    with log.effect("send", args={"to": "a"}, step="tool-call-1") as call:
        assert call.step == "tool-call-1"
        assert call.attempt == 1
        assert not call.replayed
    assert call.claim.step == "tool-call-1"
    log.close()
    assert stored_steps(backend, store_dir, run_id) == ["tool-call-1"]
    with EffectLog.load(run_id, store_dir) as again:
        assert [c.step for c in again.history().claims] == ["tool-call-1"]
    report = _inspect.verify(store_dir)
    assert report.ok, report


def test_automatic_steps_match_the_nth_call_with_the_same_operation_and_arguments(
    logs: Callable[..., EffectLog],
) -> None:
    """The n-th call of an operation with a digest is the n-th first attempt of them in the run."""
    log = logs()
    ran: list[tuple[str, int]] = []

    def call(log: EffectLog, op: str, n: int) -> Any:
        with log.effect(op, args={"n": n}, kind=WRITE) as c:
            if c.replayed:
                return ("replayed", c.result, c.step)
            ran.append((op, n))
            c.succeeded(result={"op": op, "n": n, "nth": len(ran)})
            return ("ran", c.step)

    first = [call(log, "send", 1), call(log, "send", 1), call(log, "send", 2), call(log, "log", 1)]
    assert ran == [("send", 1), ("send", 1), ("send", 2), ("log", 1)]
    digest1, digest2 = fx.args_digest({"n": 1}), fx.args_digest({"n": 2})
    assert [s for _, s in first] == [
        auto_step("send", digest1, 1),
        auto_step("send", digest1, 2),
        auto_step("send", digest2, 1),
        auto_step("log", digest1, 1),
    ]
    assert [c.step for c in log.history().claims] == [s for _, s in first]
    log = restart(log)
    ran.clear()
    # In another order: what matches is (operation, digest, occurrence), not the position.
    assert call(log, "send", 2) == ("replayed", {"op": "send", "n": 2, "nth": 3}, first[2][1])
    assert call(log, "send", 1) == ("replayed", {"op": "send", "n": 1, "nth": 1}, first[0][1])
    assert call(log, "log", 1) == ("replayed", {"op": "log", "n": 1, "nth": 4}, first[3][1])
    assert call(log, "send", 1) == ("replayed", {"op": "send", "n": 1, "nth": 2}, first[1][1])
    assert ran == []
    before = count(log)
    # A third call with the same arguments, and one with other arguments, are new steps.
    assert call(log, "send", 1) == ("ran", auto_step("send", digest1, 3))
    assert call(log, "send", 3) == ("ran", auto_step("send", fx.args_digest({"n": 3}), 1))
    assert ran == [("send", 1), ("send", 3)]
    assert count(log) > before


def test_automatic_steps_count_per_log_object(logs: Callable[..., EffectLog]) -> None:
    """A new EffectLog object on the run counts from 1 again: its first call is the run's first."""
    log = logs()
    with log.effect("ping", args={}) as call:
        call.succeeded(result="one")
    with log.effect("ping", args={}) as call:
        assert not call.replayed  # the second call in this object: a new step
        assert call.step.startswith("ping#2@")
        call.succeeded(result="two")
    log = restart(log)
    results = []
    for _ in range(2):
        with log.effect("ping", args={}) as call:
            assert call.replayed
            results.append(call.result)
    assert results == ["one", "two"]


def test_a_retry_carries_its_originals_step_and_key_and_attempts_count_from_1(
    logs: Callable[..., EffectLog],
) -> None:
    log = logs()
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        first = call.claim
        assert call.attempt == 1
        call.failed(impact=fx.Impact.NONE)  # certainly did nothing: RETRY
    assert log.decide(first.effect_id).step is RETRY
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        second = call.claim
        assert call.attempt == 2
        assert not call.replayed
        assert call.idempotency_key == first.idempotency_key
        assert second.retry_of == first.effect_id
        assert second.step == "s1"
        call.failed(impact=fx.Impact.NONE)
    log = restart(log)
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        assert call.attempt == 3
        assert call.claim.step == "s1"
        assert call.claim.retry_of is not None
        assert call.idempotency_key == first.idempotency_key
        call.succeeded(result=3)
    log = restart(log)
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        assert call.replayed
        assert call.result == 3
        assert call.attempt == 3
    steps = [c.step for c in log.history().claims]
    assert steps == ["s1", "s1", "s1"]


def test_log_retry_carries_the_step_and_the_recorded_arguments(
    logs: Callable[..., EffectLog],
) -> None:
    """A retry made by hand is the same call as one made by entering the step again."""
    log = logs()
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        first = call.claim
        call.failed(impact=fx.Impact.NONE)
    retry = log.retry(first.effect_id)
    assert (retry.step, retry.args, retry.idempotency_key) == (
        "s1",
        {"n": 1},
        first.idempotency_key,
    )
    log.outcome(
        effect_id=retry.effect_id, execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE
    )
    with log.effect("charge", args={"n": 1}, kind=IDEMPOTENT, step="s1") as call:
        assert call.attempt == 3
        assert call.claim.retry_of == first.effect_id


def test_a_step_names_one_call(logs: Callable[..., EffectLog], backend: Backend) -> None:
    """A step given again with other arguments is a mistake: refused, nothing written."""
    log = logs()
    with log.effect("send", args={"to": "a"}, step="s") as call:
        call.succeeded(result=1)
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(ValueError, match="step"),
        log.effect("send", args={"to": "b"}, step="s"),
    ):
        pytest.fail("the body ran")


# --------------------------------------------------------------------------- 2. decisions


def test_done_replays_the_recorded_result_and_writes_nothing(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    log = logs()
    with log.effect("send", args={"to": "a"}, step="s") as call:
        call.succeeded(result={"id": 7, "tags": ["x"]})
    original = call.claim
    log = restart(log)
    bodies = []
    with (
        writes_nothing(backend, log.directory, log),
        log.effect("send", args={"to": "a"}, step="s") as call,
    ):
        bodies.append(call.replayed)
        assert call.result == {"id": 7, "tags": ["x"]}
        assert call.result_recorded
        assert call.effect_id == original.effect_id
        assert call.idempotency_key == original.idempotency_key
        assert call.attempt == 1
    assert bodies == [True]  # the block is entered; its code sees the replay
    with pytest.raises(ValueError, match="replayed"):
        call.succeeded(result=1)


async def _replay_async(log: EffectLog) -> tuple[bool, Any]:
    async with log.effect("send", args={"to": "a"}, step="s") as call:
        return call.replayed, call.result


def test_done_replays_in_async_code(backend: Backend, logs: Callable[..., EffectLog]) -> None:
    log = logs()
    with log.effect("send", args={"to": "a"}, step="s") as call:
        call.succeeded(result=[1, 2])
    log = restart(log)
    with writes_nothing(backend, log.directory, log):
        assert asyncio.run(_replay_async(log)) == (True, [1, 2])


def test_a_decorated_tool_returns_the_recorded_result_without_calling_the_function(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    calls: list[str] = []

    def send(to: str, body: str = "hi") -> dict[str, Any]:
        """Send."""
        calls.append(to)
        return {"sent": to, "n": len(calls)}

    log = logs()
    tool = log.tool(kind=IRREVERSIBLE)(send)
    assert tool("a") == {"sent": "a", "n": 1}
    assert tool("b") == {"sent": "b", "n": 2}
    claims = log.history().claims
    assert [c.args for c in claims] == [{"to": "a", "body": "hi"}, {"to": "b", "body": "hi"}]
    log = restart(log)
    tool = log.tool(kind=IRREVERSIBLE)(send)
    with writes_nothing(backend, log.directory, log):
        assert tool("b") == {"sent": "b", "n": 2}
        assert tool("a") == {"sent": "a", "n": 1}
    assert calls == ["a", "b"]


def test_a_tool_step_callable_names_the_call(logs: Callable[..., EffectLog]) -> None:
    calls: list[int] = []

    def add(item: int, call_id: str) -> int:
        calls.append(item)
        return item * 10

    log = logs()
    tool = log.tool(kind=WRITE, step=lambda item, call_id: call_id)(add)
    assert tool(1, "c-1") == 10
    assert log.history().claims[0].step == "c-1"
    log = restart(log)
    tool = log.tool(kind=WRITE, step=lambda item, call_id: call_id)(add)
    assert tool(1, "c-2") == 10  # another step: runs
    assert tool(1, "c-1") == 10  # replayed
    assert calls == [1, 1]


@pytest.mark.parametrize("where", ["log", "call"])
def test_a_done_tool_with_no_recorded_result_raises_already_done(
    backend: Backend, logs: Callable[..., EffectLog], where: str
) -> None:
    calls: list[int] = []

    def make(log: EffectLog) -> Callable[[int], int]:
        options = {"record_result": False} if where == "call" else {}

        @log.tool(kind=WRITE, **options)
        def put(x: int) -> int:
            calls.append(x)
            return x + 1

        return put

    options = {"record_result": False} if where == "log" else {}
    log = logs(**options)
    assert make(log)(1) == 2
    assert log.history().outcomes[0].result is None
    assert not log.history().outcomes[0].result_recorded
    log = restart(log, **options)
    with writes_nothing(backend, log.directory, log), pytest.raises(AlreadyDone) as done:
        make(log)(1)
    assert calls == [1]
    assert isinstance(done.value, StepNotRunError)
    assert done.value.effect_id == log.history().claims[0].effect_id
    # In the with form the call replays with no result.
    step = auto_step("put", fx.args_digest({"x": 1}), 1)
    with log.effect("put", args={"x": 1}, kind=WRITE, step=step) as call:
        assert call.replayed
        assert call.result is None
        assert not call.result_recorded


def test_a_done_read_with_no_recorded_result_runs_again(logs: Callable[..., EffectLog]) -> None:
    calls: list[str] = []

    def make(log: EffectLog) -> Callable[[str], str]:
        @log.tool(kind=READ, record_result=False)
        def look(path: str) -> str:
            calls.append(path)
            return "content"

        return look

    log = logs()
    assert make(log)("/a") == "content"
    log = restart(log)
    before = count(log)
    assert make(log)("/a") == "content"
    assert calls == ["/a", "/a"]
    assert count(log) > before
    claims = log.history().claims
    assert claims[1].idempotency_key == claims[0].idempotency_key
    assert claims[1].step == claims[0].step


def test_a_done_read_with_a_recorded_result_replays(logs: Callable[..., EffectLog]) -> None:
    calls: list[str] = []

    def make(log: EffectLog) -> Callable[[str], str]:
        @log.tool(kind=READ)
        def look(path: str) -> str:
            calls.append(path)
            return f"content of {path}"

        return look

    log = logs()
    make(log)("/a")
    log = restart(log)
    assert make(log)("/a") == "content of /a"
    assert calls == ["/a"]


@pytest.mark.parametrize("kind", [READ, IDEMPOTENT])
def test_an_interrupted_repeatable_call_retries_with_the_same_key(
    backend: Backend, logs: Callable[..., EffectLog], kind: fx.EffectKind
) -> None:
    log = logs()
    crashed = interrupted(log, "fetch", {"id": 1}, step="s", kind=kind, scope=(OUTBOX,))
    log = restart(log)
    assert [(o.effect_id, o.execution) for o in log.recovered] == [(crashed.effect_id, INTERRUPTED)]
    assert log.decide(crashed.effect_id).step is RETRY
    before = count(log)
    with log.effect("fetch", args={"id": 1}, kind=kind, step="s", impact_scope=[OUTBOX]) as call:
        assert not call.replayed
        assert call.attempt == 2
        assert call.idempotency_key == crashed.idempotency_key
        assert call.claim.retry_of == crashed.effect_id
        call.succeeded(result="ok")
    assert count(log) > before
    log = restart(log)
    assert log.recovered == ()
    with log.effect("fetch", args={"id": 1}, kind=kind, step="s", impact_scope=[OUTBOX]) as call:
        assert call.replayed
        assert call.result == "ok"


def test_a_call_that_failed_without_effect_retries(logs: Callable[..., EffectLog]) -> None:
    log = logs()
    ran = []

    def refused() -> None:
        ran.append(1)
        raise ConnectionRefusedError

    with (
        pytest.raises(ConnectionRefusedError),
        log.effect("post", args={"n": 1}, step="s", no_impact=ConnectionRefusedError),
    ):
        refused()
    log = restart(log)
    with log.effect("post", args={"n": 1}, step="s") as call:
        assert not call.replayed
        assert call.attempt == 2
        ran.append(2)
    assert ran == [1, 2]


def test_a_running_call_raises_still_running(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    log = logs()
    crashed = interrupted(log, "train", {"n": 1}, step="s", kind=IDEMPOTENT)
    log.outcome(effect_id=crashed.effect_id, execution=RUNNING, impact=fx.Impact.POSSIBLE)
    log = restart(log)
    assert log.recovered == ()  # a RUNNING call is left alone
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(StillRunning) as waiting,
        log.effect("train", args={"n": 1}, kind=IDEMPOTENT, step="s"),
    ):
        pytest.fail("the body ran")
    assert waiting.value.effect_id == crashed.effect_id
    assert crashed.effect_id in str(waiting.value)


def test_an_escalated_call_raises_needs_resolution_naming_the_effect_and_the_command(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    log = logs()
    crashed = interrupted(log, "send_email", {"to": "a"}, step="s", kind=IRREVERSIBLE)
    log = restart(log)
    decision = log.decide(crashed.effect_id)
    assert decision.step is ESCALATE
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(NeedsResolution) as refused,
        log.effect("send_email", args={"to": "a"}, kind=IRREVERSIBLE, step="s"),
    ):
        pytest.fail("the body ran")
    message = str(refused.value)
    assert refused.value.effect_id == crashed.effect_id
    assert crashed.effect_id in message
    assert decision.reason in message
    assert f"ledger resolve {log.run_id} {crashed.effect_id}" in message
    assert "--applied" in message
    assert "--not-applied" in message
    assert "--by" in message


def crashed_send(
    logs: Callable[..., EffectLog], operation: str
) -> tuple[EffectLog, fx.EffectClaim, str, Callable[[str], str], list[str]]:
    """An irreversible ``operation(to="a")`` interrupted, then the run restarted.

    The restarted log, the crashed claim, its automatic step, and a function named
    ``operation`` that sends (and the list of what it sent), to decorate as a tool.
    """
    calls: list[str] = []

    def send(to: str) -> str:
        calls.append(to)
        return "sent"

    send.__name__ = operation
    log = logs()
    step = auto_step(operation, fx.args_digest({"to": "a"}), 1)
    crashed = interrupted(log, operation, {"to": "a"}, step=step, kind=IRREVERSIBLE)
    return restart(log), crashed, step, send, calls


def test_a_decorated_tool_raises_needs_resolution_without_calling_the_function(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    log, crashed, _, send, calls = crashed_send(logs, "send")
    with writes_nothing(backend, log.directory, log), pytest.raises(NeedsResolution) as refused:
        log.tool(kind=IRREVERSIBLE)(send)("a")
    assert refused.value.effect_id == crashed.effect_id
    assert calls == []


def test_after_a_resolution_not_applied_the_step_retries(logs: Callable[..., EffectLog]) -> None:
    log = logs()
    crashed = interrupted(log, "send_email", {"to": "a"}, step="s", kind=IRREVERSIBLE)
    log = restart(log)
    log.resolve(crashed.effect_id, applied=False, by="alice")
    with log.effect("send_email", args={"to": "a"}, kind=IRREVERSIBLE, step="s") as call:
        assert not call.replayed
        assert call.attempt == 2
        assert call.claim.retry_of == crashed.effect_id
        assert call.idempotency_key == crashed.idempotency_key
        call.succeeded(result="sent")
    log = restart(log)
    with log.effect("send_email", args={"to": "a"}, kind=IRREVERSIBLE, step="s") as call:
        assert call.replayed
        assert call.result == "sent"


def test_after_a_resolution_applied_the_step_replays(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    log, crashed, step, send_email, calls = crashed_send(logs, "send_email")
    log.resolve(crashed.effect_id, applied=True, by="alice")
    with writes_nothing(backend, log.directory, log):
        with pytest.raises(AlreadyDone) as done:
            log.tool(kind=IRREVERSIBLE)(send_email)("a")  # no result was recorded
        assert done.value.effect_id == crashed.effect_id
        with log.effect("send_email", args={"to": "a"}, kind=IRREVERSIBLE, step=step) as call:
            assert call.replayed
            assert call.result is None
    assert calls == []


# --------------------------------------------------------------------------- 3. the scope guard


@pytest.mark.parametrize("kind", [WRITE, IRREVERSIBLE])
def test_a_call_into_the_scope_of_an_effect_in_doubt_is_refused(
    backend: Backend, logs: Callable[..., EffectLog], kind: fx.EffectKind
) -> None:
    log = logs()
    crashed = interrupted(
        log, "send_email", {"to": "a"}, step="s", kind=IRREVERSIBLE, scope=(OUTBOX,)
    )
    log = restart(log)
    # The re-run's model wrote other arguments: another step, into the same scope.
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(NeedsResolution) as refused,
        log.effect("send_email", args={"to": "b"}, kind=kind, impact_scope=[MESSAGE]),
    ):
        pytest.fail("the body ran")
    assert refused.value.effect_id == crashed.effect_id
    assert crashed.effect_id in str(refused.value)
    assert "ledger resolve" in str(refused.value)
    # Elsewhere, and reading the doubtful scope, are not refused.
    with log.effect("book", args={}, kind=kind, impact_scope=[ELSEWHERE]) as call:
        assert not call.replayed
    with log.effect("list_outbox", args={}, kind=READ, impact_scope=[OUTBOX]) as call:
        assert not call.replayed
    log.resolve(crashed.effect_id, applied=True, by="bob")
    with log.effect("send_email", args={"to": "b"}, kind=kind, impact_scope=[MESSAGE]) as call:
        assert not call.replayed
        assert call.attempt == 1


def test_the_scope_guard_holds_in_the_same_log_without_a_restart(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    """A WRITE that raised may have landed: another write into its scope waits for a person."""
    log = logs()
    with pytest.raises(TimeoutError), log.effect("post", args={"n": 1}, impact_scope=[OUTBOX]):
        raise TimeoutError
    (doubt,) = log.history().claims
    assert log.decide(doubt.effect_id).step is ESCALATE
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(NeedsResolution) as refused,
        log.effect("post", args={"n": 2}, impact_scope=[MESSAGE]),
    ):
        pytest.fail("the body ran")
    assert refused.value.effect_id == doubt.effect_id
    log.resolve(doubt.effect_id, applied=False, by="carol")
    with log.effect("post", args={"n": 2}, impact_scope=[MESSAGE]) as call:
        assert not call.replayed


# --------------------------------------------------------------------------- 4. EffectLog.resume


def test_resume_creates_a_new_run_and_continues_it(
    store_dir: Path | str, run_id: str, logs: Callable[..., EffectLog]
) -> None:
    log = logs()
    assert log.recovered == ()
    assert log.history().records() == ()
    with log.effect("one", args={}) as call:
        call.succeeded(result=1)
    log = restart(log)
    assert log.recovered == ()
    with log.effect("two", args={}) as call:
        assert not call.replayed
    log.close()
    with EffectLog.load(run_id, store_dir) as again:
        claims = again.history().claims
        assert [c.operation.name for c in claims] == ["one", "two"]
        seqs = [r.seq for r in again.history().records()]
        assert seqs == list(range(1, len(seqs) + 1))


def test_resume_recovers_the_claims_a_dead_writer_left(logs: Callable[..., EffectLog]) -> None:
    log = logs()
    with log.effect("done", args={}) as call:
        pass
    a = interrupted(log, "a", {}, step="sa", kind=IDEMPOTENT)
    b = interrupted(log, "b", {}, step="sb", kind=IRREVERSIBLE)
    log = restart(log)
    assert [(o.effect_id, o.execution, o.impact, o.replayed) for o in log.recovered] == [
        (a.effect_id, INTERRUPTED, fx.Impact.POSSIBLE, True),
        (b.effect_id, INTERRUPTED, fx.Impact.POSSIBLE, True),
    ]
    assert set(log.recovered) <= set(log.history().outcomes)
    assert call.effect_id not in {o.effect_id for o in log.recovered}
    log = restart(log)
    assert log.recovered == ()


def crashed_write(
    logs: Callable[..., EffectLog], tmp_path: Path
) -> tuple[EffectLog, fx.EffectClaim, Path, Callable[[EffectLog], Any]]:
    """A write of ``out.txt`` (postcondition: its digest is that of ``hello``) interrupted.

    The log, the crashed claim, the file, and the call that writes it again (step ``w``),
    to enter once the run is restarted.
    """
    target = tmp_path / "out.txt"
    ref = file_target(target)
    want = fx.Postcondition(ref, fx.Predicate.SHA256, sha(b"hello"))
    log = logs()
    crashed = interrupted(
        log, "write_file", {"path": str(target)}, step="w", scope=(ref,), obligations=(want,)
    )

    def write(log: EffectLog) -> Any:
        return log.effect(
            "write_file",
            args={"path": str(target)},
            step="w",
            impact_scope=[ref],
            obligations=[want],
        )

    return log, crashed, target, write


def test_a_write_interrupted_before_touching_its_file_retries_with_no_person(
    tmp_path: Path, logs: Callable[..., EffectLog]
) -> None:
    log, crashed, target, write = crashed_write(logs, tmp_path)
    log = restart(log)  # the file was never written
    assert log.decide(crashed.effect_id).step is RETRY
    with write(log) as call:
        assert not call.replayed
        assert call.attempt == 2
        assert call.idempotency_key == crashed.idempotency_key
        target.write_bytes(b"hello")
    assert log.assess(call.effect_id).verdict is fx.EffectVerdict.VERIFIED
    assert log.decide(crashed.effect_id).step is DONE


@pytest.mark.parametrize("content", [b"hel", b"other"])
def test_a_write_interrupted_after_changing_its_file_needs_a_person(
    backend: Backend, tmp_path: Path, logs: Callable[..., EffectLog], content: bytes
) -> None:
    log, crashed, target, write = crashed_write(logs, tmp_path)
    target.write_bytes(content)  # torn, or overwritten: not what it was, not what it should be
    log = restart(log)
    assert log.decide(crashed.effect_id).step is ESCALATE
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(NeedsResolution) as refused,
        write(log),
    ):
        pytest.fail("the body ran")
    assert refused.value.effect_id == crashed.effect_id


def test_a_write_interrupted_after_it_landed_replays(
    tmp_path: Path, logs: Callable[..., EffectLog]
) -> None:
    log, crashed, target, write = crashed_write(logs, tmp_path)
    target.write_bytes(b"hello")
    log = restart(log)
    assert log.decide(crashed.effect_id).step is DONE
    with write(log) as call:
        assert call.replayed
        assert call.effect_id == crashed.effect_id


def test_resume_refuses_a_run_another_live_process_holds(
    backend: Backend,
    store_dir: Path | str,
    run_id: str,
    logs: Callable[..., EffectLog],
    elsewhere: Callable[[Path | str, str], Holder],
) -> None:
    log = logs()
    crashed = interrupted(log, "a", {}, step="s", kind=IDEMPOTENT)
    log.close()
    other = elsewhere(store_dir, run_id)
    for mode in (Mode.SHARED, Mode.EXCLUSIVE):
        other.hold(mode)
        counts = backend.row_counts(store_dir)
        with pytest.raises(RunHeldError):
            EffectLog.resume(run_id, store_dir)
        assert backend.row_counts(store_dir) == counts  # nothing recovered under it
        other.release()
    log = logs()
    assert [o.effect_id for o in log.recovered] == [crashed.effect_id]


# --------------------------------------------------------------------------- 5. recording


def test_arguments_are_recorded_through_redact_and_digested_as_given(
    backend: Backend, store_dir: Path | str, run_id: str, logs: Callable[..., EffectLog]
) -> None:
    def redact(args: dict[str, Any]) -> dict[str, Any]:
        return {**args, "password": "***"} if "password" in args else args

    log = logs(redact=redact)
    real = {"user": "u", "password": "hunter2"}
    with log.effect("login", args=real) as call:
        call.succeeded(result={"token": "t", "password": "p"})
    (claim,) = log.history().claims
    assert claim.args == {"user": "u", "password": "***"}
    assert claim.operation.args_sha256 == fx.args_digest(real)
    (outcome,) = log.history().outcomes
    assert outcome.result == {"token": "t", "password": "***"}
    log.close()
    texts = [t for (t,) in backend.query(store_dir, "SELECT args FROM claims")]
    assert len(texts) == 1
    assert "hunter2" not in texts[0]
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().claims[0].args == {"user": "u", "password": "***"}
        assert again.history().outcomes[0].result == {"token": "t", "password": "***"}
    # The step is found by the real arguments' digest.
    log = logs(redact=redact)
    with log.effect("login", args=real) as call:
        assert call.replayed


def test_recording_can_be_turned_off_for_the_log_and_per_call(
    logs: Callable[..., EffectLog],
) -> None:
    log = logs(record_args=False, record_result=False)
    with log.effect("a", args={"x": 1}) as call:
        call.succeeded(result=1)
    with log.effect("b", args={"x": 2}, record_args=True, record_result=True) as call:
        call.succeeded(result=2)
    claims, outcomes = log.history().claims, log.history().outcomes
    assert [c.args for c in claims] == [None, {"x": 2}]
    assert [(o.result, o.result_recorded) for o in outcomes] == [(None, False), (2, True)]
    log = restart(log)
    with log.effect("c", args={"x": 3}, record_args=False) as call:
        call.succeeded(result=3)
    with log.effect("d", args={"x": 4}, record_result=False) as call:
        call.succeeded(result=4)
    claims, outcomes = log.history().claims, log.history().outcomes
    assert [c.args for c in claims[2:]] == [None, {"x": 4}]
    assert [(o.result, o.result_recorded) for o in outcomes[2:]] == [(3, True), (None, False)]


def test_a_tool_records_its_return_value_and_per_call_options(
    logs: Callable[..., EffectLog],
) -> None:
    log = logs()

    @log.tool(kind=WRITE, record_args=False)
    def quiet(secret: str) -> str:
        return "fine"

    @log.tool(kind=WRITE)
    def loud(x: int, y: int = 2) -> dict[str, int]:
        return {"sum": x + y}

    assert quiet("s") == "fine"
    assert loud(1) == {"sum": 3}
    claims, outcomes = log.history().claims, log.history().outcomes
    assert [c.args for c in claims] == [None, {"x": 1, "y": 2}]
    assert [o.result for o in outcomes] == ["fine", {"sum": 3}]


def test_a_null_result_is_recorded_and_replayed(logs: Callable[..., EffectLog]) -> None:
    calls = []
    log = logs()

    def make(log: EffectLog) -> Callable[[], None]:
        @log.tool(kind=WRITE)
        def nothing() -> None:
            calls.append(1)

        return nothing

    assert make(log)() is None
    (outcome,) = log.history().outcomes
    assert outcome.result is None
    assert outcome.result_recorded
    log = restart(log)
    assert make(log)() is None  # replayed: a recorded null, not AlreadyDone
    assert calls == [1]


def test_values_too_large_are_not_recorded_and_never_an_error(
    logs: Callable[..., EffectLog],
) -> None:
    small = {"v": "x"}
    size = len(fx.recorded_json(small).encode())
    log = logs(max_recorded_bytes=size)
    with log.effect("fits", args=small) as call:
        call.succeeded(result=small)
    big = {"v": "xx"}
    with log.effect("too_big", args=big) as call:
        call.succeeded(result=big)
    claims, outcomes = log.history().claims, log.history().outcomes
    assert [c.args for c in claims] == [small, None]
    assert [(o.execution, o.result, o.result_recorded) for o in outcomes] == [
        (SUCCESS, small, True),
        (SUCCESS, None, False),
    ]
    assert claims[1].operation.args_sha256 == fx.args_digest(big)


class Opaque:
    pass


@pytest.mark.parametrize(
    "result",
    [{1, 2}, Opaque(), float("nan"), {"k": b"bytes"}, {1: "int key"}],
    ids=["set", "object", "nan", "bytes", "int-key"],
)
def test_a_result_json_cannot_hold_is_not_recorded_and_the_outcome_is_written(
    logs: Callable[..., EffectLog], result: object
) -> None:
    log = logs()
    with log.effect("a", args={}) as call:
        call.succeeded(result=result)

    @log.tool(kind=WRITE)
    def give() -> object:
        return result

    assert give() is result  # the caller gets the real value
    outcomes = log.history().outcomes
    assert [(o.execution, o.result, o.result_recorded) for o in outcomes] == [
        (SUCCESS, None, False)
    ] * 2


# --------------------------------------------------------------------------- 6. bad input


@pytest.mark.parametrize(
    ("step", "error"),
    [("", ValueError), (1, TypeError), (b"s", TypeError), ("a\x00b", ValueError)],
    ids=["empty", "int", "bytes", "nul"],
)
def test_a_bad_step_is_refused_before_anything_is_written(
    backend: Backend, logs: Callable[..., EffectLog], step: object, error: type[Exception]
) -> None:
    log = logs()
    with log.effect("first", args={}):
        pass  # the store exists
    with (
        writes_nothing(backend, log.directory, log),
        pytest.raises(error),
        log.effect("send", args={}, step=step),
    ):  # type: ignore[arg-type]
        pytest.fail("the body ran")


@pytest.mark.parametrize("step", ["", 1, None], ids=["empty", "int", "none"])
def test_a_tool_whose_step_callable_gives_a_bad_step_is_refused(
    backend: Backend, logs: Callable[..., EffectLog], step: object
) -> None:
    log = logs()
    with log.effect("first", args={}):
        pass
    calls = []

    @log.tool(kind=WRITE, step=lambda x: step)
    def put(x: int) -> None:
        calls.append(x)

    with writes_nothing(backend, log.directory, log), pytest.raises((TypeError, ValueError)):
        put(1)
    assert calls == []


def test_a_redact_that_raises_on_arguments_is_an_error_before_anything_is_written(
    backend: Backend, logs: Callable[..., EffectLog]
) -> None:
    def redact(args: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("oops")

    log = logs()
    with log.effect("first", args={}):
        pass
    with writes_nothing(backend, log.directory, log):
        with (
            pytest.raises(ValueError, match="redact"),
            log.effect("send", args={"a": 1}, redact=redact),
        ):
            pytest.fail("the body ran")
        with (
            pytest.raises(TypeError, match="redact"),
            log.effect("send", args={"a": 1}, redact=lambda a: [a]),
        ):  # type: ignore[arg-type,return-value]
            pytest.fail("the body ran")


@pytest.mark.parametrize("bad", ["raises", "list"])
def test_a_redact_that_fails_on_a_result_leaves_it_not_recorded_and_the_outcome_written(
    logs: Callable[..., EffectLog], bad: str
) -> None:
    def redact(value: dict[str, Any]) -> Any:
        if "secret" not in value:
            return value  # the arguments pass
        if bad == "raises":
            raise RuntimeError("cannot")
        return [value]

    log = logs(redact=redact)
    with log.effect("a", args={"x": 1}) as call:
        call.succeeded(result={"secret": 1})

    @log.tool(kind=WRITE)
    def b(x: int) -> dict[str, int]:
        return {"secret": x}

    assert b(2) == {"secret": 2}
    claims, outcomes = log.history().claims, log.history().outcomes
    assert [c.args for c in claims] == [{"x": 1}, {"x": 2}]
    assert [(o.execution, o.result, o.result_recorded) for o in outcomes] == [
        (SUCCESS, None, False)
    ] * 2


# --------------------------------------------------------------------------- 7. ledger.tool


def test_the_package_top_exports_the_resume_api() -> None:
    assert ledger.EffectLog is EffectLog
    assert ledger.AlreadyDone is AlreadyDone
    assert ledger.StillRunning is StillRunning
    assert ledger.NeedsResolution is NeedsResolution
    assert callable(ledger.tool)
    for error in (AlreadyDone, StillRunning, NeedsResolution):
        assert issubclass(error, StepNotRunError)


def test_ledger_tool_runs_in_the_log_entered_last(
    store_dir: Path | str, run_id: str, logs: Callable[..., EffectLog]
) -> None:
    calls: list[int] = []

    @ledger.tool(kind=WRITE)
    def put(x: int) -> int:
        """Put x."""
        calls.append(x)
        return x * 2

    assert put.__name__ == "put"
    assert put.__doc__ == "Put x."
    with pytest.raises(RuntimeError):
        put(0)
    assert calls == []
    inner_run = new_run_id()
    with EffectLog.resume(run_id, store_dir) as outer:
        assert put(1) == 2
        with EffectLog.resume(inner_run, store_dir) as inner:
            assert put(2) == 4
        assert put(3) == 6
    assert [c.args for c in outer.history().claims] == [{"x": 1}, {"x": 3}]
    assert [c.args for c in inner.history().claims] == [{"x": 2}]
    with pytest.raises(RuntimeError):
        put(4)
    # A restart replays through the same decorated function.
    with EffectLog.resume(run_id, store_dir):
        assert put(1) == 2
        assert put(3) == 6
    assert calls == [1, 2, 3]


def test_ledger_tool_in_a_thread_with_no_log_entered_raises(
    store_dir: Path | str, run_id: str
) -> None:
    calls: list[int] = []

    @ledger.tool(kind=WRITE)
    def put(x: int) -> None:
        calls.append(x)

    errors: list[BaseException] = []

    def worker() -> None:
        try:
            put(1)
        except BaseException as e:
            errors.append(e)

    with EffectLog.resume(run_id, store_dir) as log:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(10)
        assert not thread.is_alive()
        assert log.history().claims == ()
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "log" in str(errors[0])
    assert calls == []


def test_ledger_tool_in_a_thread_uses_the_log_that_thread_entered(
    store_dir: Path | str, run_id: str
) -> None:
    @ledger.tool(kind=IDEMPOTENT)
    def put(x: int) -> int:
        return x

    other_run = new_run_id()
    done = threading.Event()
    seen: list[str] = []

    def worker() -> None:
        with EffectLog.resume(other_run, store_dir) as mine:
            put(2)
            seen.append(mine.history().claims[0].step)
        done.set()

    with EffectLog.resume(run_id, store_dir) as log:
        thread = threading.Thread(target=worker)
        thread.start()
        put(1)
        thread.join(10)
        assert done.is_set()
        assert [c.args for c in log.history().claims] == [{"x": 1}]
    assert len(seen) == 1
    with EffectLog.load(other_run, store_dir) as other:
        assert [c.args for c in other.history().claims] == [{"x": 2}]


def test_ledger_tool_async_in_tasks(store_dir: Path | str, run_id: str) -> None:
    calls: list[int] = []

    @ledger.tool(kind=IDEMPOTENT)
    async def fetch(x: int) -> int:
        calls.append(x)
        await asyncio.sleep(0)
        return x * 10

    async def plan() -> list[int]:
        return list(await asyncio.gather(fetch(1), fetch(2), fetch(3)))

    with EffectLog.resume(run_id, store_dir) as log:
        assert asyncio.run(plan()) == [10, 20, 30]
        assert sorted(c.args["x"] for c in log.history().claims) == [1, 2, 3]
    with EffectLog.resume(run_id, store_dir) as log:
        before = len(log.history().records())
        assert asyncio.run(plan()) == [10, 20, 30]
        assert len(log.history().records()) == before
    assert sorted(calls) == [1, 2, 3]


# --------------------------------------------------------------------------- 8. property
#
# A plan is a list of calls; the first run crashes inside call k (its claim is durable,
# its outcome never written; its effect may or may not have reached the world); the
# restarted worker runs the whole plan again from the top. A worker refused with
# NeedsResolution stops; a person records the truth; the worker is restarted again.


@dataclasses.dataclass(frozen=True)
class Call:
    kind: fx.EffectKind
    value: int
    scope: int  # which external resource the call's scope holds


LANDED = ("no", "yes", "torn")  # whether a crashed call's effect reached the world

PLANS = st.lists(
    st.builds(
        Call,
        st.sampled_from([READ, IDEMPOTENT, WRITE, IRREVERSIBLE]),
        st.integers(0, 1),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=6,
)


def content(i: int, call: Call) -> bytes:
    return f"call {i} value {call.value}".encode()


def operation(call: Call) -> str:
    return f"op_{call.kind.value}"


class Worker:
    """Runs a plan against a world: files, and counts of what landed by idempotency key."""

    def __init__(self, root: Path, plan: list[Call]) -> None:
        self.root = root
        self.plan = plan
        self.ran = [0] * len(plan)  # times each call's body ran, across every run
        self.landed: dict[str, int] = {}  # key -> times an IRREVERSIBLE call reached the world
        self.results: dict[int, Any] = {}

    def file(self, i: int) -> Path:
        return self.root / f"w{i}.txt"

    def shape(self, i: int) -> dict[str, Any]:
        """What log.effect is given for call ``i``."""
        call = self.plan[i]
        scope: list[Any] = [ExternalResource(f"https://api.example/r{call.scope}")]
        obligations: list[fx.Postcondition] = []
        args: dict[str, Any] = {"value": call.value}
        if call.kind is WRITE:
            ref = file_target(self.file(i))
            scope.append(ref)
            obligations.append(fx.Postcondition(ref, fx.Predicate.SHA256, sha(content(i, call))))
            args["i"] = i  # each write has its own file
        return {"args": args, "kind": call.kind, "impact_scope": scope, "obligations": obligations}

    def land(self, i: int, key: str, how: str = "yes") -> None:
        call = self.plan[i]
        if call.kind is WRITE:
            self.file(i).write_bytes(content(i, call) if how == "yes" else b"torn")
        elif call.kind is IRREVERSIBLE:
            self.landed[key] = self.landed.get(key, 0) + 1

    def run(self, log: EffectLog, i: int) -> Any:
        with log.effect(operation(self.plan[i]), **self.shape(i)) as c:
            if c.replayed:
                return c
            self.ran[i] += 1
            self.land(i, c.idempotency_key)
            c.succeeded(result={"i": i, "value": self.plan[i].value})
            return c

    def crash(self, log: EffectLog, k: int, landed: str) -> fx.EffectClaim:
        """Call ``k`` entered its body (baseline and claim) and the process died."""
        given = self.shape(k)
        op = operation(self.plan[k])
        nth = sum(
            1
            for j in range(k + 1)
            if operation(self.plan[j]) == op and self.shape(j)["args"] == given["args"]
        )
        claim = interrupted(
            log,
            op,
            given["args"],
            step=auto_step(op, fx.args_digest(given["args"]), nth),
            kind=self.plan[k].kind,
            scope=tuple(given["impact_scope"]),
            obligations=tuple(given["obligations"]),
            effect_id=f"crash{k}",
        )
        if landed != "no":
            self.land(k, claim.idempotency_key, landed)
        return claim

    def replay_before(self, log: EffectLog, k: int, first: list[Any]) -> None:
        """Calls before ``k`` completed: each replays its recorded result, writing nothing."""
        for i in range(k):
            before = count(log)
            c = self.run(log, i)
            assert c.replayed, (i, self.plan)
            assert c.result == {"i": i, "value": self.plan[i].value}
            assert c.effect_id == first[i].effect_id
            assert count(log) == before


def expected_at_crash(call: Call, landed: str) -> str:
    """What the restarted plan's call k does by itself: run again, replay, or refuse."""
    if call.kind in {READ, IDEMPOTENT} or (call.kind is WRITE and landed == "no"):
        return "retry"
    if call.kind is WRITE and landed == "yes":
        return "replay"  # its file shows it landed: VERIFIED
    return "refuse"  # IRREVERSIBLE, or a torn write


def check_refused(log: EffectLog, worker: Worker, k: int, crashed: fx.EffectClaim) -> None:
    before = count(log)
    with pytest.raises(NeedsResolution) as refused:
        worker.run(log, k)
    assert refused.value.effect_id == crashed.effect_id
    # Another write into its scope, with other arguments, waits for the person too.
    probe = {**worker.shape(k), "args": {"other": True}, "obligations": [], "kind": WRITE}
    with pytest.raises(NeedsResolution) as guarded, log.effect("probe", **probe):
        pytest.fail("the body ran")
    assert guarded.value.effect_id == crashed.effect_id
    assert count(log) == before


def check_crashed_call(
    log: EffectLog, worker: Worker, k: int, crashed: fx.EffectClaim, expect: str
) -> None:
    """Call k, run again: it replays (writing nothing) or runs as a retry with the same key."""
    before = count(log)
    c = worker.run(log, k)
    if expect == "replay":
        assert c.replayed
        assert c.effect_id == crashed.effect_id
        assert c.result is None  # none was recorded
        assert count(log) == before
    else:
        assert not c.replayed
        assert c.attempt == 2
        assert c.idempotency_key == crashed.idempotency_key
        assert c.claim.retry_of == crashed.effect_id


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=PLANS, k=st.integers(0, 6), landed=st.sampled_from(LANDED))
def test_a_restarted_plan_never_repeats_what_may_have_landed(
    backend: Backend, plan: list[Call], k: int, landed: str
) -> None:
    """Crash a plan inside call k, restart, run the whole plan again: every call acts rightly.

    Calls before k replay their recorded results without running; call k runs again
    (same key) only when it cannot have landed or may be repeated, replays when its file
    shows it landed, and otherwise raises NeedsResolution until a person records the
    truth, then acts on it; calls after k run once.
    """
    k = min(k, len(plan))
    if k < len(plan) and plan[k].kind is not WRITE and landed == "torn":
        landed = "yes"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "world").mkdir()
        worker = Worker(root / "world", plan)
        store = backend.location(root)
        run_id = new_run_id()

        log = EffectLog.resume(run_id, store)
        first: list[Any] = [worker.run(log, i) for i in range(k)]
        crashed = worker.crash(log, k, landed) if k < len(plan) else None
        log.close()

        log = EffectLog.resume(run_id, store)
        try:
            assert [o.effect_id for o in log.recovered] == (
                [] if crashed is None else [crashed.effect_id]
            )
            worker.replay_before(log, k, first)
            if crashed is not None:
                expect = expected_at_crash(plan[k], landed)
                if expect == "refuse":
                    check_refused(log, worker, k, crashed)
                    # The person checks the world and records what they found; restart.
                    log.resolve(crashed.effect_id, applied=landed != "no", by="tester")
                    log.close()
                    log = EffectLog.resume(run_id, store)
                    assert log.recovered == ()
                    worker.replay_before(log, k, first)
                    expect = "replay" if landed != "no" else "retry"
                check_crashed_call(log, worker, k, crashed, expect)
            for i in range(k + 1, len(plan)):
                c = worker.run(log, i)
                assert not c.replayed
                assert c.attempt == 1
        finally:
            log.close()

        # What may have landed never ran again; completed calls never ran twice.
        for i, call in enumerate(plan):
            may_have_landed = i == k and landed != "no" and call.kind in {WRITE, IRREVERSIBLE}
            assert worker.ran[i] == (0 if may_have_landed else 1), (i, plan, k, landed)
        assert all(times == 1 for times in worker.landed.values())
        for i, call in enumerate(plan):
            if call.kind is WRITE and not (i == k and landed == "torn"):
                assert worker.file(i).read_bytes() == content(i, call)
