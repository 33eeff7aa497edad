"""OpenTelemetry for the log: a span per effect attempt, the caller's trace context, metrics.

Optional: the ``otel`` extra installs the OpenTelemetry API. Without it, nothing here
imports ``opentelemetry``; with it, a log uses the tracer and meter providers it is given,
or the global ones. A log made while none is configured (the API's proxies) has no
:class:`Telemetry`, as one without the extra: its claims do no work for it.

What a log emits (docs/telemetry.md):

- a span ``execute_tool {operation}`` (kind ``INTERNAL``) per claim, started once the
  claim is durable, as a child of the caller's current span, and ended with the
  effect's terminal outcome; its events are ``ledger.claim``, ``ledger.outcome`` and
  ``ledger.observation`` (an observation written with the outcome of a target of the
  effect, with the verdict it led to); status ``ERROR`` when the outcome is ``failed``;
- the caller's trace context in the claim (``traceparent``, stored and chained), so that
  recovery, in another process, emits for each interrupted claim a span with that
  parent, ended at once (status ``ERROR``), linked to the recovering process's span;
- the counter ``ledger.effects`` (terminal outcomes, by kind and execution) and the
  histogram ``ledger.claim.duration`` (seconds from a claim's making to its being
  durable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ledger.effects import (
    Assessment,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    Observation,
    Record,
    recorded_json,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "SPAN_PREFIX",
    "Telemetry",
    "continued",
    "enter_span",
    "installed",
    "leave_span",
    "span_meta",
]

SPAN_PREFIX = "execute_tool"
INSTRUMENTATION = "ledger"
_ERRORS = (ExecutionOutcome.FAILED, ExecutionOutcome.INTERRUPTED)

_installed: bool | None = None


def installed() -> bool:
    """Whether the OpenTelemetry API can be imported; asked once, importing nothing if not.

    ``find_spec`` of the top-level name does not import it: a process without the extra
    never loads a module of that name.
    """
    global _installed  # noqa: PLW0603 - asked once per process
    if _installed is None:
        try:
            found = importlib.util.find_spec("opentelemetry") is not None
            if found:
                import opentelemetry.trace  # noqa: F401, PLC0415 - the optional extra
        except (ImportError, ValueError):  # a finder that refuses it: not installed, then
            found = False
        _installed = found
    return _installed


def _traceparent(span_context: Any) -> str | None:
    if not span_context.is_valid:
        return None
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{int(span_context.trace_flags):02x}"
    )


def _parent(traceparent: str | None) -> Context:
    """The context whose span is the stored ``traceparent`` (remote); empty for none."""
    from opentelemetry import trace  # noqa: PLC0415 - the optional extra
    from opentelemetry.context import Context  # noqa: PLC0415

    if traceparent is None:
        return Context()
    _, trace_id, span_id, flags = traceparent.split("-")
    remote = trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(remote))


def _ns(timestamp: str) -> int:
    """A record's ``recorded_at`` as nanoseconds since the epoch (a span event's time)."""
    moment = datetime.fromisoformat(timestamp)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class Telemetry:
    """One log's spans and instruments; every method is called with the log's lock held.

    Made only where the API is installed and a provider is configured (:meth:`of`). The
    global providers are looked up at each use: one the application replaces is followed.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        record_in_spans: bool,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._record = record_in_spans
        self._seen_tracers: object = None
        self._tracer: Tracer | None = None
        self._seen_meters: object = None
        self._instruments: tuple[Counter, Histogram] | None = None
        self._spans: dict[str, Span] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(
        cls,
        tracer_provider: object = None,
        meter_provider: object = None,
        record_in_spans: object = False,
    ) -> Telemetry | None:
        """A log's telemetry; ``None`` when the API is not installed (nothing to emit to).

        ``TypeError`` for a provider that is not one, or a ``record_in_spans`` not a bool.
        """
        if not isinstance(record_in_spans, bool):
            raise TypeError(f"record_in_spans must be a bool, not {type(record_in_spans).__name__}")
        if tracer_provider is None and meter_provider is None and not installed():
            return None
        if not installed():
            raise TypeError("tracer_provider and meter_provider need the OpenTelemetry API")
        from opentelemetry import metrics, trace  # noqa: PLC0415 - the optional extra

        if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
            raise TypeError(
                f"tracer_provider must be a TracerProvider, not {type(tracer_provider).__name__}"
            )
        if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
            raise TypeError(
                f"meter_provider must be a MeterProvider, not {type(meter_provider).__name__}"
            )
        found = cls(tracer_provider, meter_provider, record_in_spans)
        if found.tracer() is None and found.instruments() is None:
            # Nothing configured: the log's claims do no telemetry work at all. An SDK set
            # up later is seen by the logs made after it (set it up first, as usual).
            return None
        return found

    # ------------------------------------------------------------------ providers

    def tracer(self) -> Tracer | None:
        """The tracer to use now; ``None`` while no tracer provider is configured."""
        from opentelemetry import trace  # noqa: PLC0415 - loaded already: cheap

        provider = self._tracer_provider or trace.get_tracer_provider()
        if provider is not self._seen_tracers:
            self._seen_tracers = provider
            unset = isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
            self._tracer = None if unset else provider.get_tracer(INSTRUMENTATION)
        return self._tracer

    def instruments(self) -> tuple[Counter, Histogram] | None:
        """The two instruments; ``None`` while no meter provider is configured."""
        from opentelemetry import metrics  # noqa: PLC0415 - loaded already: cheap

        provider = self._meter_provider or metrics.get_meter_provider()
        if provider is not self._seen_meters:
            self._seen_meters = provider
            # The API's global proxy (a private class) until the application sets one.
            unset = isinstance(provider, metrics.NoOpMeterProvider) or (
                type(provider).__name__ == "_ProxyMeterProvider"
            )
            self._instruments = None
            if not unset:
                meter = provider.get_meter(INSTRUMENTATION)
                self._instruments = (
                    meter.create_counter(
                        "ledger.effects",
                        unit="{effect}",
                        description="Effects settled, by kind and execution",
                    ),
                    meter.create_histogram(
                        "ledger.claim.duration",
                        unit="s",
                        description="Time from a claim's making to its being durable",
                    ),
                )
        return self._instruments

    # ------------------------------------------------------------------ the log's hooks

    def traced(self, records: list[Record]) -> list[Record]:
        """``records`` with the caller's trace context in each claim, when it has one."""
        if self.tracer() is None:
            return records
        from opentelemetry import trace  # noqa: PLC0415 - loaded already: cheap

        parent = _traceparent(trace.get_current_span().get_span_context())
        if parent is None:
            return records
        return [
            dataclasses.replace(r, traceparent=parent) if isinstance(r, EffectClaim) else r
            for r in records
        ]

    def claimed(self, run_id: str, claims: Iterable[Record]) -> None:
        """Start the span of each durable claim, and time how long it took to be durable."""
        tracer = self.tracer()
        instruments = self.instruments()
        if tracer is None and instruments is None:
            return
        from opentelemetry import trace  # noqa: PLC0415 - loaded already: cheap

        now = datetime.now(UTC)
        for claim in claims:
            if not isinstance(claim, EffectClaim):
                continue
            if instruments is not None:
                took = (now - datetime.fromisoformat(claim.recorded_at)).total_seconds()
                instruments[1].record(max(took, 0.0), {"ledger.kind": claim.kind.value})
            if tracer is None:
                continue
            span = tracer.start_span(
                f"{SPAN_PREFIX} {claim.operation.name}",
                kind=trace.SpanKind.INTERNAL,
                attributes=self._attributes(run_id, claim),
            )
            # The claim became durable now, as the span starts; its record's time is earlier.
            span.add_event("ledger.claim", {"ledger.seq": claim.seq})
            with self._lock:
                self._spans[claim.effect_id] = span

    def settled(
        self,
        written: Sequence[Record],
        claim_of: Callable[[str], EffectClaim],
        assess: Callable[[str], Assessment],
    ) -> None:
        """End the span of each effect that got its terminal outcome in ``written``.

        A ``RUNNING`` outcome is an event of the span, which goes on. The observations
        written with an outcome, of a resource the effect names, are events of its span,
        with the verdict the effect has once they are written.
        """
        observations = [r for r in written if isinstance(r, Observation)]
        for outcome in written:
            if not isinstance(outcome, EffectOutcome):
                continue
            with self._lock:
                span = (
                    self._spans.pop(outcome.effect_id, None)
                    if outcome.terminal
                    else self._spans.get(outcome.effect_id)
                )
            if span is not None:
                self._end(span, claim_of(outcome.effect_id), outcome, observations, assess)
            if outcome.terminal:
                self._count(claim_of(outcome.effect_id), outcome)

    def recovered(self, run_id: str, settled: Iterable[tuple[EffectClaim, EffectOutcome]]) -> None:
        """A span for each interrupted claim: child of its caller's, linked to this process's.

        Ended at once: the call it stands for ended, unseen, when its process died.
        """
        tracer = self.tracer()
        from opentelemetry import trace  # noqa: PLC0415 - loaded already: cheap

        here = trace.get_current_span().get_span_context()
        links = [trace.Link(here, {"ledger.link": "recovered_by"})] if here.is_valid else []
        for claim, outcome in settled:
            self._count(claim, outcome)
            if tracer is None:
                continue
            attributes = self._attributes(run_id, claim)
            attributes["ledger.recovered"] = True
            span = tracer.start_span(
                f"{SPAN_PREFIX} {claim.operation.name}",
                context=_parent(claim.traceparent),
                kind=trace.SpanKind.INTERNAL,
                attributes=attributes,
                links=links,
            )
            span.add_event(
                "ledger.claim", {"ledger.seq": claim.seq}, timestamp=_ns(claim.recorded_at)
            )
            self._end(span, claim, outcome, (), None)

    def close(self) -> None:
        """Forget the spans of effects left without an outcome: recovery will tell of them."""
        with self._lock:
            self._spans.clear()

    # ------------------------------------------------------------------ what they share

    def span_of(self, effect_id: str) -> Span | None:
        """The open span of ``effect_id``, if any."""
        with self._lock:
            return self._spans.get(effect_id)

    def _attributes(self, run_id: str, claim: EffectClaim) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": claim.operation.name,
            "ledger.run_id": run_id,
            "ledger.effect_id": claim.effect_id,
            "ledger.step": claim.step,
            "ledger.kind": claim.kind.value,
            "ledger.idempotency_key": claim.idempotency_key,
        }
        if claim.retry_of is not None:
            attributes["ledger.retry_of"] = claim.retry_of
        if self._record and claim.args is not None:
            attributes["ledger.args"] = recorded_json(claim.args)
        return attributes

    def _end(
        self,
        span: Span,
        claim: EffectClaim,
        outcome: EffectOutcome,
        observations: Sequence[Observation],
        assess: Callable[[str], Assessment] | None,
    ) -> None:
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415 - loaded already

        event = {
            "ledger.seq": outcome.seq,
            "ledger.execution": outcome.execution.value,
            "ledger.impact": outcome.impact.value,
        }
        span.add_event("ledger.outcome", event)
        if not outcome.terminal:
            return
        span.set_attribute("ledger.execution", outcome.execution.value)
        span.set_attribute("ledger.impact", outcome.impact.value)
        if self._record and outcome.result_recorded:
            span.set_attribute("ledger.result", recorded_json(outcome.result))
        targets = [*claim.impact_scope, *(p.target for p in claim.obligations)]
        seen = [o for o in observations if any(o.resource.same_target(t) for t in targets)]
        if seen and assess is not None:
            verdict = assess(claim.effect_id).verdict.value
            span.set_attribute("ledger.verdict", verdict)
            for observation in seen:
                span.add_event("ledger.observation", _observed(observation, verdict))
        if outcome.execution in _ERRORS:
            span.set_status(Status(StatusCode.ERROR, outcome.execution.value))
        span.end()

    def _count(self, claim: EffectClaim, outcome: EffectOutcome) -> None:
        instruments = self.instruments()
        if instruments is not None:
            instruments[0].add(
                1, {"ledger.kind": claim.kind.value, "ledger.execution": outcome.execution.value}
            )


def _observed(observation: Observation, verdict: str) -> Mapping[str, Any]:
    seen: dict[str, Any] = {
        "ledger.observation_id": observation.observation_id,
        "ledger.seq": observation.seq,
        "ledger.resource": observation.resource.locator,
        "ledger.mechanism": observation.mechanism.value,
        "ledger.verdict": verdict,
    }
    if observation.exists is not None:
        seen["ledger.exists"] = observation.exists
    if observation.sha256 is not None:
        seen["ledger.sha256"] = observation.sha256
    return seen


# --------------------------------------------------------------------------- the call's context


def enter_span(log: object, effect_id: str) -> object | None:
    """Make the span of ``effect_id`` current (the tool's own spans nest in it); a token."""
    telemetry = getattr(log, "_telemetry", None)
    if not isinstance(telemetry, Telemetry):
        return None
    span = telemetry.span_of(effect_id)
    if span is None:
        return None
    from opentelemetry import context, trace  # noqa: PLC0415 - loaded already: cheap

    return context.attach(trace.set_span_in_context(span))


def leave_span(token: object) -> None:
    """Undo :func:`enter_span`."""
    from opentelemetry import context  # noqa: PLC0415 - a token means it is loaded

    context.detach(token)  # type: ignore[arg-type]  # what enter_span returned


def span_meta(log: object, effect_id: str) -> dict[str, str]:
    """The W3C trace context of ``effect_id``'s span, as ``_meta`` entries; ``{}`` for none."""
    telemetry = getattr(log, "_telemetry", None)
    span = telemetry.span_of(effect_id) if isinstance(telemetry, Telemetry) else None
    if span is None:
        return {}
    from opentelemetry import trace  # noqa: PLC0415 - loaded already: cheap
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier


@contextlib.contextmanager
def continued(meta: object) -> Iterator[None]:
    """Within it, the current span is the one ``meta`` (an MCP ``_meta``) names, if any.

    ``traceparent`` (and ``tracestate``) as the W3C Trace Context gives them; anything
    else, or no API installed, changes nothing.
    """
    if not (isinstance(meta, dict) and isinstance(meta.get("traceparent"), str)) or not (
        installed()
    ):
        yield
        return
    from opentelemetry import context  # noqa: PLC0415 - the optional extra
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    carrier = {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
    token = context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        context.detach(token)
