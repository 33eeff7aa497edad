"""The figures every reliability test reports: one ``reliability:`` line, and JSON.

The line goes to stdout (``pytest -s`` shows it); the figures are appended as one JSON
line to the file named by ``LEDGER_RELIABILITY_REPORT`` when it is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def report(figures: dict[str, Any], line: str | None = None) -> None:
    """Print ``line`` (or every figure as ``key=value``) and append the figures as JSON."""
    text = line if line is not None else " ".join(f"{k}={v}" for k, v in figures.items())
    print(f"\nreliability: {text}")
    path = os.environ.get("LEDGER_RELIABILITY_REPORT")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(json.dumps(figures) + "\n")
