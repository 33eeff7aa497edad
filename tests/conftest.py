"""Shared fixtures: real store directories, sandboxes and small record builders."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from ledger.resources import FilesystemResource, FilesystemRoot

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# `make mutants` runs the property tests once per mutant: the same examples each time
# (derandomized, no example database, 25 where a test sets no number), so a mutant's
# verdict does not depend on luck.
settings.register_profile("mutants", max_examples=25, derandomize=True, database=None)


def sha(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def op(name: str = "write_file", args: bytes = b"{}") -> fx.OperationRef:
    """An operation with the digest of ``args``."""
    return fx.OperationRef(name, "test/1", sha(args))


def fs_ref(locator: str, role: str = "target") -> fx.ResourceRef:
    """An ``fs`` resource reference for an absolute path."""
    return fx.ResourceRef("fs", locator, role)


@pytest.fixture(autouse=True)
def _isolated_default_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No test may touch the user's real default store.
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path_factory.mktemp("default-store") / "ledger"))


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A store directory that does not exist yet."""
    return tmp_path / "store"


@pytest.fixture
def run_id() -> str:
    """A fresh run id."""
    return new_run_id()


@pytest.fixture
def log(store_dir: Path, run_id: str) -> Iterator[EffectLog]:
    """A new log on a fresh store, closed afterwards."""
    with EffectLog(run_id, store_dir) as effect_log:
        yield effect_log


@pytest.fixture
def sandbox(tmp_path: Path) -> FilesystemRoot:
    """A sealed sandbox directory for agent file tools."""
    path = tmp_path / "sandbox"
    path.mkdir()
    return FilesystemRoot.seal(path)


def file_ref(root: FilesystemRoot, name: str, role: str = "target") -> fx.ResourceRef:
    """The reference of ``name`` inside ``root`` (it may be missing)."""
    return fx.resource_ref(FilesystemResource.resolve(root, name, allow_missing=True), role)


def missing(what: str) -> NoReturn:
    """This machine lacks what a test needs: fail saying what, never pass by skipping.

    ``make test`` installs the tools the suite uses, and CI runs it as root; a developer
    without them may set ``LEDGER_ALLOW_SKIP=1`` to skip such tests instead.
    """
    if os.environ.get("LEDGER_ALLOW_SKIP") == "1":
        pytest.skip(what)
    pytest.fail(
        f"{what} (make test installs the tools the suite needs; run it as root for the "
        "tests that act as another user, or set LEDGER_ALLOW_SKIP=1 to skip them)",
        pytrace=False,
    )


def require_tool(name: str) -> str:
    """The path of the program ``name``, or the test fails saying it is missing."""
    path = shutil.which(name)
    if path is None:
        missing(f"the {name} program is not installed")
    return path


@pytest.fixture
def sqlite3_shell() -> str:
    """The stock ``sqlite3`` shell, which the test runs."""
    return require_tool("sqlite3")


@pytest.fixture
def root() -> None:
    """The test acts as another user (chown, setpriv): it needs root."""
    if os.geteuid() != 0:
        missing("this test acts as another user, which needs root")


def subprocess_env() -> dict[str, str]:
    """The environment for child Python processes that import ledger."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
