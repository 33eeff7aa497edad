"""A reliability test that asks for ``backend`` runs once per storage backend.

Unlike the contract suite's (tests/contract/conftest.py), ``backend`` is not used by
every test here: only those that ask for it, or for ``location``, a fresh store
location of that backend, run against each backend in turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends import BACKENDS, Backend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend this run of the test is against."""
    found: Backend = request.param
    return found


@pytest.fixture
def location(backend: Backend, tmp_path: Path) -> Path | str:
    """A fresh store location of the backend, where no store is yet."""
    return backend.location(tmp_path)
