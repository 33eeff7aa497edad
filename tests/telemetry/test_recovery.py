"""Recovery's spans: a worker killed in a call, its run resumed by another process.

The killed worker's span never ends (its process is gone), but its claim stored the trace
context of the span that made the call: the recovering process emits the effect's span
as that span's child, ended at once as ``interrupted``, linked to its own current span.
"""

from __future__ import annotations

import json
import signal
import textwrap
from datetime import datetime
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from ledger.effect_log import EffectLog, new_run_id
from tests.builders import CHILD_TIMEOUT, kill_children, op, start_child
from tests.telemetry.conftest import Otel

pytestmark = pytest.mark.program

# A worker with its own SDK tracer: inside a span, it enters a call and says so, with that
# span's ids, then waits in the call until it is killed.
WORKER = textwrap.dedent(
    """
    import json, sys, time
    from opentelemetry.sdk.trace import TracerProvider
    from ledger.effect_log import EffectLog

    store, run_id = sys.argv[1:3]
    provider = TracerProvider()
    with provider.get_tracer("worker").start_as_current_span("agent turn") as turn:
        log = EffectLog(run_id, store, tracer_provider=provider)
        with log.effect("charge_card", args={"amount": 5}, step="pay-1") as call:
            ids = turn.get_span_context()
            print(json.dumps({
                "trace_id": f"{ids.trace_id:032x}",
                "span_id": f"{ids.span_id:016x}",
                "effect_id": call.effect_id,
                "traceparent": call.claim.traceparent,
            }), flush=True)
            time.sleep(600)
    """
)


def _killed_in_a_call(store: Path, run_id: str) -> dict[str, str]:
    child = start_child(WORKER, store, run_id)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, kill_children([child])
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=CHILD_TIMEOUT) == -signal.SIGKILL
    finally:
        kill_children([child])
    said: dict[str, str] = json.loads(line)
    return said


def test_the_recovered_span_is_a_child_of_the_killed_callers_span_linked_to_the_recovery(
    tmp_path: Path, otel: Otel
) -> None:
    store, run_id = tmp_path / "store", new_run_id()
    worker = _killed_in_a_call(store, run_id)
    assert worker["traceparent"].startswith(f"00-{worker['trace_id']}-{worker['span_id']}-")

    tracer = otel.tracer_provider.get_tracer("supervisor")
    with (
        tracer.start_as_current_span("restart") as restart,
        EffectLog.resume(run_id, store, **otel.providers) as log,
    ):
        (outcome,) = log.recovered
        claim = log.history().claim(worker["effect_id"])
    assert outcome.effect_id == worker["effect_id"]

    span = otel.span("execute_tool charge_card")
    assert span.kind is SpanKind.INTERNAL
    assert span.context.trace_id == int(worker["trace_id"], 16)
    assert span.parent is not None
    assert span.parent.span_id == int(worker["span_id"], 16)
    assert span.parent.is_remote
    (link,) = span.links
    assert link.context.span_id == restart.get_span_context().span_id
    assert link.context.trace_id == restart.get_span_context().trace_id
    assert span.status.status_code is StatusCode.ERROR
    attributes = dict(span.attributes or {})
    assert attributes["ledger.execution"] == "interrupted"
    assert attributes["ledger.impact"] == "possible"
    assert attributes["ledger.recovered"] is True
    assert attributes["ledger.step"] == "pay-1"
    assert attributes["ledger.effect_id"] == worker["effect_id"]
    assert [e.name for e in span.events] == ["ledger.claim", "ledger.outcome"]
    assert claim is not None
    claimed_at = datetime.fromisoformat(claim.recorded_at)
    assert span.events[0].timestamp // 1000 == int(claimed_at.timestamp()) * 1_000_000 + (
        claimed_at.microsecond
    )
    # Ended at once, in the recovering process.
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.start_time >= restart.start_time  # type: ignore[attr-defined]
    counted = {
        (p.attributes["ledger.kind"], p.attributes["ledger.execution"]): p.value
        for p in otel.points("ledger.effects")
    }
    assert counted == {("write", "interrupted"): 1}


def test_a_claim_made_outside_any_trace_is_recovered_as_a_root_span(
    tmp_path: Path, otel: Otel
) -> None:
    """No stored parent: the span is a root (not the recovering process's child), still linked."""
    store, run_id = tmp_path / "store", new_run_id()
    with EffectLog(run_id, store) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op("send"), impact_scope=[])
    tracer = otel.tracer_provider.get_tracer("supervisor")
    with (
        tracer.start_as_current_span("restart") as restart,
        EffectLog.load(run_id, store, **otel.providers) as log,
    ):
        assert len(log.recover_interrupted()) == 1
    span = otel.span("execute_tool send")
    assert span.parent is None
    assert span.context.trace_id != restart.get_span_context().trace_id
    assert [link.context.span_id for link in span.links] == [restart.get_span_context().span_id]
    assert span.status.status_code is StatusCode.ERROR
