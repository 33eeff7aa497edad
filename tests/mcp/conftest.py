"""An MCP test that asks for ``location`` runs once per storage backend.

Only the tests that ask for it (or for ``backend``) do: both fixtures are
tests/backends.py's, shared with tests/reliability and tests/telemetry.
"""

from __future__ import annotations

from tests.backends import backend, location  # noqa: F401 - fixtures, found by name
