"""A reliability test that asks for ``backend`` runs once per storage backend.

Unlike the contract suite's (tests/contract/conftest.py), ``backend`` is not used by
every test here: only those that ask for it, or for ``location``, a fresh store
location of that backend, run against each backend in turn (both fixtures are
tests/backends.py's, shared with tests/telemetry).
"""

from __future__ import annotations

from tests.backends import backend, location  # noqa: F401 - fixtures, found by name
