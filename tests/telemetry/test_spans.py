"""Every effect attempt is a span: its name, kind, attributes, events, status and parent.

The log is given the SDK's providers with in-memory exporters (conftest.py); the store
is real. What docs/telemetry.md promises of a span is checked here field by field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import ledger, op
from tests.telemetry.conftest import Otel


def _traceparent(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _written_file(tmp_path: Path, text: str) -> tuple[Path, fx.Postcondition]:
    path = tmp_path / "out.txt"
    digest = hashlib.sha256(text.encode()).hexdigest()
    target = fx.ResourceRef("fs", str(path), "target")
    return path, fx.Postcondition(target, fx.Predicate.SHA256, digest)


def test_an_effect_is_a_child_span_of_the_caller_with_the_named_attributes_and_events(
    tmp_path: Path, otel: Otel
) -> None:
    """``execute_tool {op}``, INTERNAL, under the caller's span; the tool's spans under it."""
    tracer = otel.tracer_provider.get_tracer("agent")
    path, written = _written_file(tmp_path, "hello")
    run_id = new_run_id()
    with (
        tracer.start_as_current_span("agent turn") as turn,
        EffectLog(run_id, tmp_path / "store", **otel.providers) as log,
        log.effect(
            "write_note", args={"text": "hello"}, obligations=[written], step="call-1"
        ) as call,
    ):
        with tracer.start_as_current_span("tool http"):
            path.write_text("hello")
        claim = call.claim

    span = otel.span("execute_tool write_note")
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id
    assert span.context.trace_id == turn.get_span_context().trace_id
    assert otel.span("tool http").parent.span_id == span.context.span_id
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "write_note",
        "ledger.run_id": run_id,
        "ledger.effect_id": claim.effect_id,
        "ledger.step": "call-1",
        "ledger.kind": "write",
        "ledger.idempotency_key": claim.idempotency_key,
        "ledger.execution": "reported_success",
        "ledger.impact": "certain",
        "ledger.verdict": "verified",
    }
    assert span.status.status_code is StatusCode.UNSET
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert [name for name, _ in events] == ["ledger.claim", "ledger.outcome", "ledger.observation"]
    assert events[0][1] == {"ledger.seq": claim.seq}
    assert events[1][1] == {
        "ledger.seq": claim.seq + 1,
        "ledger.execution": "reported_success",
        "ledger.impact": "certain",
    }
    seen = events[2][1]
    assert seen["ledger.resource"] == str(path)
    assert seen["ledger.exists"] is True
    assert seen["ledger.verdict"] == "verified"
    # The arguments and the result are recorded in the store, not in the span.
    assert "ledger.args" not in (span.attributes or {})


def test_a_failed_effect_ends_with_status_error(tmp_path: Path, otel: Otel) -> None:
    with (
        EffectLog(new_run_id(), tmp_path / "store", **otel.providers) as log,
        pytest.raises(RuntimeError),
        log.effect("send_email", args={"to": "x"}),
    ):
        raise RuntimeError("smtp down")
    span = otel.span("execute_tool send_email")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["ledger.execution"] == "failed"
    assert span.attributes["ledger.impact"] == "possible"


def test_a_span_starts_with_the_durable_claim_and_ends_with_the_terminal_outcome(
    tmp_path: Path, otel: Otel
) -> None:
    """Through the records API: RUNNING is an event of a span still open; a retry names its first."""
    with EffectLog(new_run_id(), tmp_path / "store", **otel.providers) as log:
        ref = fx.ResourceRef("external", "https://mail.example/outbox", "target")
        log.claim(effect_id="e1", action_id="a1", operation=op("send"), impact_scope=[ref])
        assert otel.spans() == []  # started, not ended
        log.outcome(
            effect_id="e1", execution=fx.ExecutionOutcome.RUNNING, impact=fx.Impact.POSSIBLE
        )
        assert otel.spans() == []
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        (first,) = otel.spans()
        retry = log.retry("e1", new_effect_id="e2")
        log.outcome(
            effect_id="e2", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
        )
    assert [e.name for e in first.events] == ["ledger.claim", "ledger.outcome", "ledger.outcome"]
    assert [dict(e.attributes or {})["ledger.execution"] for e in first.events[1:]] == [
        "running",
        "failed",
    ]
    assert "ledger.retry_of" not in (first.attributes or {})
    second = otel.spans()[1]
    assert second.attributes is not None
    assert second.attributes["ledger.retry_of"] == "e1"
    assert second.attributes["ledger.idempotency_key"] == retry.idempotency_key
    assert second.status.status_code is StatusCode.UNSET


def test_record_in_spans_puts_the_recorded_arguments_and_result_in_the_span(
    tmp_path: Path, otel: Otel
) -> None:
    store = tmp_path / "store"
    with (
        EffectLog(new_run_id(), store, record_in_spans=True, **otel.providers) as log,
        log.effect("lookup", args={"q": "tea"}, kind=fx.EffectKind.READ) as call,
    ):
        call.succeeded(result={"hits": 3})
    attributes = otel.span("execute_tool lookup").attributes or {}
    assert json.loads(str(attributes["ledger.args"])) == {"q": "tea"}
    assert json.loads(str(attributes["ledger.result"])) == {"hits": 3}
    with pytest.raises(TypeError, match="record_in_spans must be a bool"):
        EffectLog(new_run_id(), tmp_path / "store", record_in_spans="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be a TracerProvider"):
        EffectLog(new_run_id(), tmp_path / "store", tracer_provider=object())  # type: ignore[arg-type]


def test_the_claim_stores_the_callers_trace_context_chained_on_every_backend(
    tmp_path: Path, otel: Otel, backend: Backend, location: Path | str
) -> None:
    """Stored, loaded, verified, exported and imported with the claim, on each backend."""
    tracer = otel.tracer_provider.get_tracer("agent")
    run_id = new_run_id()
    with (
        tracer.start_as_current_span("agent turn") as turn,
        EffectLog(run_id, location, **otel.providers) as log,
    ):
        with log.effect("send", args={}):
            pass
        log.claim(effect_id="bare", action_id="a", operation=op("send"), impact_scope=[])
    with EffectLog.load(run_id, location) as again:
        claims = again.history().claims
    assert [c.traceparent for c in claims] == [_traceparent(turn)] * 2
    stored = backend.query(location, "SELECT traceparent FROM claims WHERE run_id = ?", [run_id])
    assert stored == [(_traceparent(turn),)] * 2

    verified = ledger("verify", "--store", str(location))
    assert verified.returncode == 0, verified.stderr
    exported = ledger("export", run_id, "--store", str(location))
    assert exported.returncode == 0, exported.stderr
    first = json.loads(exported.stdout.splitlines()[0])
    assert first["record"]["traceparent"] == _traceparent(turn)
    copy = tmp_path / f"{run_id}.jsonl"
    copy.write_text(exported.stdout)
    other = backend.location(tmp_path / "other")
    imported = ledger("import", str(copy), "--store", str(other))
    assert imported.returncode == 0, imported.stderr
    verified = ledger("verify", "--store", str(other))
    assert verified.returncode == 0, verified.stderr
    with EffectLog.load(run_id, other) as copied:
        assert [c.traceparent for c in copied.history().claims] == [_traceparent(turn)] * 2


def test_a_stored_trace_context_that_is_not_one_is_refused_by_the_import(tmp_path: Path) -> None:
    """An export whose claim names something else than a W3C traceparent: one line, exit 1."""
    run_id = new_run_id()
    with EffectLog(run_id, tmp_path / "store") as log:
        log.claim(effect_id="e1", action_id="a", operation=op("send"), impact_scope=[])
    exported = ledger("export", run_id, "--store", str(tmp_path / "store"))
    line = json.loads(exported.stdout.splitlines()[0])
    line["record"]["traceparent"] = "00-" + "0" * 32 + "-" + "1" * 16 + "-01"  # an invalid id
    copy = tmp_path / f"{run_id}.jsonl"
    copy.write_text(json.dumps(line) + "\n")
    refused = ledger("import", str(copy), "--store", str(tmp_path / "copy"))
    assert refused.returncode == 1
    assert "traceparent must be a W3C traceparent" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_no_trace_context_is_stored_without_a_span_around_the_call(
    tmp_path: Path, otel: Otel
) -> None:
    with (
        EffectLog(new_run_id(), tmp_path / "store", **otel.providers) as log,
        log.effect("send", args={}) as call,
    ):
        pass
    assert call.claim.traceparent is None
    span = otel.span("execute_tool send")
    assert span.parent is None  # a root span: the caller had no trace


def test_with_no_provider_configured_nothing_is_emitted_or_stored(tmp_path: Path) -> None:
    """The API installed but no SDK set up: the global proxy, and a claim as without the extra."""
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a global tracer provider was set in this process")
    tracer = TracerProvider().get_tracer("agent")  # a span, but not the log's provider
    with (
        tracer.start_as_current_span("agent turn"),
        EffectLog(new_run_id(), tmp_path / "store") as log,
        log.effect("send", args={}) as call,
    ):
        pass
    assert call.claim.traceparent is None


def test_the_two_metrics(tmp_path: Path, otel: Otel) -> None:
    """``ledger.effects`` by kind and execution, ``ledger.claim.duration`` in seconds."""
    with EffectLog(new_run_id(), tmp_path / "store", **otel.providers) as log:
        for _ in range(2):
            with log.effect("send", args={}):
                pass
        with pytest.raises(ValueError, match="nope"), log.effect("send", args={"n": 1}):
            raise ValueError("nope")
        with log.effect("look", args={}, kind=fx.EffectKind.READ):
            pass
    counted = {
        (p.attributes["ledger.kind"], p.attributes["ledger.execution"]): p.value
        for p in otel.points("ledger.effects")
    }
    assert counted == {
        ("write", "reported_success"): 2,
        ("write", "failed"): 1,
        ("read", "reported_success"): 1,
    }
    durations = {p.attributes["ledger.kind"]: p for p in otel.points("ledger.claim.duration")}
    assert durations["write"].count == 3
    assert durations["read"].count == 1
    assert durations["write"].sum >= 0
