"""``ledger mcp-proxy`` run with the OpenTelemetry SDK as the process's global tracer provider.

    python traced_proxy.py SPANS_FILE mcp-proxy --store STORE -- SERVER...

As an application configures the SDK before it runs the ledger (``opentelemetry-instrument``
does the same through the environment): spans go to the SDK's in-memory exporter, and
when the proxy exits they are written to SPANS_FILE, one JSON object per line (the SDK's
own ``to_json``), for the test to read.
"""

from __future__ import annotations

import atexit
import json
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS = Path(sys.argv[1])
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


@atexit.register
def _write_spans() -> None:
    spans = [json.loads(span.to_json(indent=None)) for span in exporter.get_finished_spans()]
    SPANS.write_text("".join(json.dumps(span) + "\n" for span in spans))


from ledger.cli import main  # noqa: E402 - after the SDK, as an instrumented program

sys.argv = ["ledger", *sys.argv[2:]]
main()
