"""Fixtures of the PostgreSQL backend's own tests: a new database per test."""

from __future__ import annotations

import pytest

from tests.postgresql.server import server


@pytest.fixture
def url() -> str:
    """The URL of a new, empty database of the test server."""
    return server().new_database()
