"""What the private PostgreSQL servers of the tests leave behind: nothing that fills the disk.

A test's databases are dropped when it ends, and a test run killed mid-way takes its
servers with it.

For the second, a real pytest, in a process of its own, runs a test that starts a server
and then waits;
once the server is up, that pytest (or the xdist worker that started the server) is
SIGKILLed, so none of its exit handlers run. Every process of the server and its directory
must then go: through the server's watchdog, or, when the watchdog was killed too,
through the reaping the next server start does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.builders import PYTHON, REPO, subprocess_env
from tests.postgresql import server as pg

# Generous: a server starts (initdb, then pg_ctl -w) slowly on a loaded machine. Only
# reaching a deadline fails a test; how soon things happen before it is never asserted.
START_DEADLINE = 600.0
GONE_DEADLINE = 300.0

# The test the killed run runs: start this process's server, say what it is, wait.
HOLDER = textwrap.dedent(
    """
    import json, os, pathlib, time
    from tests.postgresql.server import server

    def test_holds_a_server():
        held = server()
        watchdog = getattr(held, "watchdog", None)
        report = pathlib.Path(os.environ["LEDGER_TEST_REPORT"])
        aside = report.with_suffix(".tmp")
        aside.write_text(json.dumps({
            "root": str(held.root),
            "pytest": os.getpid(),
            "watchdog": None if watchdog is None else watchdog.pid,
        }))
        aside.rename(report)
        time.sleep(3600)
    """
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _server_processes(root: Path) -> list[int]:
    """The postmaster of the server in ``root`` and its children."""
    postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
    assert _alive(postmaster)
    return [postmaster, *_children(postmaster)]


def _wait_for(what: str, done: Callable[[], bool], deadline: float) -> None:
    end = time.monotonic() + deadline
    while not done():
        assert time.monotonic() < end, f"{what}: not after {deadline:.0f} s"
        time.sleep(0.2)


@dataclasses.dataclass
class Held:
    """What the killed run reported of its server, and the server's processes."""

    root: Path
    pytest: int  # the process that started the server (an xdist worker's, with -n 1)
    watchdog: int | None
    processes: list[int]

    def gone(self) -> bool:
        """Every process of the server has exited, its directory and its registry entry are removed.

        The reaper removes the directory first and the entry last: a check of the entry
        alone, made as soon as the directory is gone, would race it.
        """
        entry = pg.REGISTRY / f"{self.root.name}.json"
        return (
            not any(map(_alive, self.processes)) and not self.root.exists() and not entry.exists()
        )


@contextlib.contextmanager
def _killed_run(tmp_path: Path, xdist: bool) -> Iterator[Held]:
    """A pytest holding a server, SIGKILLed once the server is up; yields what it reported.

    With ``xdist`` the process killed is the worker that started the server, and its
    controller lives on (it reports the crash).

    Whatever the test under way leaves behind (a server still running, its directory, a
    lingering xdist worker) is stopped and removed afterwards, so a failure leaves no junk.
    """
    (tmp_path / "test_holder.py").write_text(HOLDER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's options
    report = tmp_path / "report.json"
    output = (tmp_path / "pytest.out").open("w")
    argv = [PYTHON, "-m", "pytest", "-q", "-s", "-c", str(tmp_path / "pytest.ini")]
    argv += ["-p", "no:cacheprovider", "-n", "1"] if xdist else ["-p", "no:xdist"]
    run = subprocess.Popen(
        [*argv, str(tmp_path / "test_holder.py")],
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=subprocess_env() | {"LEDGER_TEST_REPORT": str(report)},
        cwd=REPO,
        start_new_session=True,
    )
    held: Held | None = None
    try:

        def started() -> bool:
            assert run.poll() is None, (tmp_path / "pytest.out").read_text()
            return report.exists()

        _wait_for("the server of the run to start", started, START_DEADLINE)
        said = json.loads(report.read_text())
        root = Path(said["root"])
        held = Held(root, said["pytest"], said["watchdog"], _server_processes(root))
        os.kill(held.pytest, signal.SIGKILL)
        if held.pytest == run.pid:
            run.wait()
        yield held
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        output.close()
        if held is not None:
            for pid in (held.pytest, held.watchdog, *held.processes):
                if pid is not None and _alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            shutil.rmtree(held.root, ignore_errors=True)


@pytest.mark.program
@pytest.mark.parametrize("xdist", [False, True], ids=["pytest", "xdist worker"])
def test_a_killed_run_leaves_no_server_running(tmp_path: Path, xdist: bool) -> None:
    """SIGKILL the pytest that started a server: the server's processes and directory go."""
    with _killed_run(tmp_path, xdist) as held:
        assert held.processes
        _wait_for("the killed run's server to be stopped and removed", held.gone, GONE_DEADLINE)


@pytest.mark.program
def test_a_server_whose_run_and_watchdog_were_killed_is_reaped_by_the_next_start(
    tmp_path: Path,
) -> None:
    """With its watchdog SIGKILLed too, a killed run's server is stopped by the next start."""
    with _killed_run(tmp_path, xdist=False) as held:
        watchdog = held.watchdog
        assert watchdog is not None
        os.kill(watchdog, signal.SIGKILL)
        _wait_for("the watchdog to die", lambda: not _alive(watchdog), GONE_DEADLINE)
        assert not held.gone()  # nothing else stops it
        pg.reap_stale()  # what the next server start does first
        _wait_for("the stale server to be stopped and removed", held.gone, GONE_DEADLINE)


# A session of two tests: the first makes a database, the second lists the server's.
SESSION = textwrap.dedent(
    """
    import json, os, pathlib
    from tests.postgresql.server import server

    REPORT = pathlib.Path(os.environ["LEDGER_TEST_REPORT"])

    def test_makes_a_database():
        REPORT.with_suffix(".made").write_text(server().new_database())

    def test_lists_the_databases():
        with server().connect() as conn:
            names = [row[0] for row in conn.execute("SELECT datname FROM pg_database")]
        REPORT.write_text(json.dumps(names))
    """
)


@pytest.mark.program
def test_a_tests_databases_are_dropped_when_it_ends(tmp_path: Path) -> None:
    """In a real session with the suite's fixtures, the next test finds the last one's database gone.

    About 7 MiB each in the temporary directory, hundreds in a session: kept, they took
    gigabytes that the tests, and everything else on the machine, write to.
    """
    (tmp_path / "test_session.py").write_text(SESSION)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.json"
    argv = [PYTHON, "-m", "pytest", "-q", "-c", str(tmp_path / "pytest.ini")]
    argv += ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tests.conftest"]
    run = subprocess.run(
        [*argv, str(tmp_path / "test_session.py")],
        capture_output=True,
        text=True,
        env=subprocess_env() | {"LEDGER_TEST_REPORT": str(report)},
        cwd=REPO,
        timeout=START_DEADLINE,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    made = report.with_suffix(".made").read_text().split("?")[0].rsplit("/", 1)[1]
    listed = json.loads(report.read_text())
    assert made.startswith("ledger_")
    assert "postgres" in listed
    assert made not in listed
