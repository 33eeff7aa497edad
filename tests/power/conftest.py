"""The power-cut tier needs a FUSE mount: root, ``/dev/fuse``, ``fusermount3`` and mfusepy.

It fails, never skips, without them (``make test`` installs ``fuse3``; mfusepy is in the
dev extra). Before the tier runs, mounts of the layer left by a run that was killed midway
(their server is gone) are lazily unmounted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

from tests.power.layer import clean_stale


@pytest.fixture(autouse=True, scope="session")
def fuse_available() -> None:
    """Fail the tier at once when FUSE cannot be mounted here; clean stale mounts."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (mounting a FUSE file system with the kernel's own locks)")
    if not os.path.exists("/dev/fuse"):
        missing.append("/dev/fuse")
    if shutil.which("fusermount3") is None:
        missing.append("fusermount3 (Debian package fuse3; make test installs it)")
    if importlib.util.find_spec("mfusepy") is None:
        missing.append("the mfusepy package (pip install -c constraints.txt -e '.[dev]')")
    if missing:
        pytest.fail("the power-cut tier needs " + ", ".join(missing), pytrace=False)
    clean_stale()
