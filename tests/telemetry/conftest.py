"""What the telemetry tests share: the SDK's in-memory exporters, and stores of each backend.

``otel`` is a tracer provider and a meter provider of the OpenTelemetry SDK (a test-only
dependency), each with its in-memory exporter or reader, handed to the log as
``tracer_provider=`` and ``meter_provider=``: no global provider is set, so tests do not
see each other's spans. ``location`` is a fresh store of each backend, for the tests
that ask for it (as in tests/reliability).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.backends import backend, location  # noqa: F401 - fixtures, found by name


@dataclasses.dataclass
class Otel:
    """An SDK tracer and meter provider, and what they have exported so far."""

    tracer_provider: TracerProvider
    exporter: InMemorySpanExporter
    meter_provider: MeterProvider
    reader: InMemoryMetricReader

    @property
    def providers(self) -> dict[str, Any]:
        """The keywords that give a log these providers."""
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self) -> list[ReadableSpan]:
        """The spans ended so far, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        """The one ended span named ``name``."""
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` collected now."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


@pytest.fixture
def otel() -> Otel:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    found = Otel(tracer_provider, exporter, MeterProvider(metric_readers=[reader]), reader)
    yield found
    tracer_provider.shutdown()
    found.meter_provider.shutdown()
