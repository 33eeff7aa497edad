"""Builders and helpers shared by the test modules: records, paths, tools, child processes.

Fixtures live in the ``conftest.py`` files; everything a test module imports by name
lives here, once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from ledger import effects as fx
from ledger.resources import FilesystemResource, FilesystemRoot

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def sha(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def op(name: str = "write_file", args: bytes = b"{}") -> fx.OperationRef:
    """An operation with the digest of ``args``."""
    return fx.OperationRef(name, "test/1", sha(args))


def fs_ref(locator: str, role: str = "target") -> fx.ResourceRef:
    """An ``fs`` resource reference for an absolute path."""
    return fx.ResourceRef("fs", locator, role)


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


def subprocess_env() -> dict[str, str]:
    """The environment for child Python processes that import ledger."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
