"""Shared by the file-trust tests of the SQLite store: real stores and commands as other uids.

``__all__`` names what the file-trust modules import from here.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import REPO, missing, require_tool, run_python, subprocess_env
from tests.sqlite.driver import DB, SHM, WAL

TIMEOUT = 60

__all__ = [
    "DB",
    "OTHER",
    "OTHER_GROUP",
    "SHM",
    "WAL",
    "WORKER",
    "as_other",
    "assert_refused",
    "build_store",
    "other_uid",
    "public_dir",
    "setpriv",
]
OTHER = "nobody"  # the other user, and its group below
OTHER_GROUP = "nogroup"

# A worker that claims one effect on ``locator`` and prints its run id; with "crash" it
# then kills itself, leaving the claim in the -wal (and a -shm) as a crash does.
WORKER = """
import hashlib, os, signal, sys
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
store, locator, how = os.fsencode(sys.argv[1]), sys.argv[2], sys.argv[3]
run_id = new_run_id()
log = EffectLog(run_id, os.fsdecode(store))
log.claim(effect_id="write-it", action_id="a1",
          operation=fx.OperationRef("write_file", "test/1", hashlib.sha256(b"{}").hexdigest()),
          impact_scope=(fx.ResourceRef("fs", locator, "target"),))
print(run_id, flush=True)
if how == "crash":
    os.kill(os.getpid(), signal.SIGKILL)
log.close()
"""


def build_store(
    directory: Path | bytes, locator: str = "/sandbox/a.txt", *, crash: bool = False
) -> str:
    """Have a worker process claim one effect in ``directory``; returns the run id."""
    result = run_python(
        WORKER, os.fsdecode(directory), locator, "crash" if crash else "close", timeout=TIMEOUT
    )
    if crash:
        assert result.returncode == -signal.SIGKILL, result.stderr
    else:
        assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def setpriv() -> str:
    """The setpriv program, as root; fails (never skips silently) when it is missing."""
    if os.geteuid() != 0:
        missing("acting as another uid needs root (the suite runs as root in CI)")
    return require_tool("setpriv")


def as_other(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as uid nobody, gid nogroup, with no supplementary groups."""
    env = subprocess_env() | {"HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [setpriv(), f"--reuid={OTHER}", f"--regid={OTHER_GROUP}", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or "/",
        timeout=TIMEOUT,
        check=False,
    )


def other_uid() -> int:
    """The uid of the other user."""
    result = subprocess.run(["id", "-u", OTHER], capture_output=True, text=True, check=True)
    return int(result.stdout)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A fresh root-owned 0755 directory that the other user can reach (pytest's tmp is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ledger-trust-"))
    path.chmod(0o755)
    if not REPO.stat().st_mode & stat.S_IXOTH:
        pytest.fail(f"the other user cannot reach the repository {REPO}")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 1, one `Error:` line holding every word, no traceback; returns the line."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]
