"""Every contract test runs once per storage backend (``tests/backends.py``).

``backend`` is parametrised over ``BACKENDS`` and used by every test here; ``store_dir``
is a fresh store location of that backend, so a test that takes its store from
``store_dir`` (or from ``backend.location``) runs against each backend in turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends import BACKENDS, Backend


@pytest.fixture(params=BACKENDS, autouse=True)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend this run of the test is against."""
    found: Backend = request.param
    return found


@pytest.fixture
def store_dir(backend: Backend, tmp_path: Path) -> Path:
    """A fresh store location of the backend, where no store is yet."""
    return backend.location(tmp_path)
