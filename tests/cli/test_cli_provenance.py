"""Who wrote what, through the real ``ledger`` command: the run's worker and a resolution's writer.

The ledger command writes to a worker's run as itself: ``ledger resolve`` and ``ledger
recover`` leave the worker (its host, pid and name) as the run's writer, and a resolution
records the process that wrote it (OS user, host, program, pid) and its origin: ``person``
for ``ledger resolve``, ``worker`` for a log's own ``resolve``, ``reconciler`` for one that
said ``allow_self=True``. Each test runs once per storage backend.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog, new_run_id
from tests.backends import BACKENDS, Backend
from tests.builders import CHILD_TIMEOUT, PYTHON, claim_small, ledger, ledger_json, subprocess_env
from tests.builders import settle as outcome


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A fresh store location of each backend in turn."""
    backend: Backend = request.param
    return backend.location(tmp_path)


def _run_of(store: Path | str, run_id: str) -> dict[str, Any]:
    (row,) = [
        r for r in ledger_json("runs", "--store", str(store), "--json") if r["run_id"] == run_id
    ]
    return row  # type: ignore[no-any-return]


def _worker(store: Path | str, run_id: str, *, settle: bool) -> None:
    """The run's worker: named ``agent-7``, in this process; two claims, settled or not."""
    with EffectLog(run_id, store, writer_name="agent-7") as log:
        for effect_id in ("e1", "e2"):
            claim_small(log, effect_id)
            if settle:
                outcome(log, effect_id)


def test_resolve_leaves_the_worker_as_the_runs_writer(store: Path | str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=True)
    before = _run_of(store, run_id)
    assert (before["writer_name"], before["pid"]) == ("agent-7", os.getpid())
    resolved = ledger("resolve", run_id, "e1", "--applied", "--by", "alice", "--store", str(store))
    assert resolved.returncode == 0, resolved.stderr
    after = _run_of(store, run_id)
    assert (after["writer_name"], after["pid"], after["host"]) == (
        "agent-7",
        os.getpid(),
        socket.gethostname(),
    )
    shown = ledger_json("show", run_id, "--store", str(store), "--json")
    assert shown["writer"] == {"host": socket.gethostname(), "pid": os.getpid(), "name": "agent-7"}


@pytest.mark.parametrize("how", ["run", "dead"])
def test_recover_leaves_the_worker_as_the_runs_writer(store: Path | str, how: str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=False)
    argv = ["recover", run_id] if how == "run" else ["recover", "--dead"]
    recovered = ledger(*argv, "--store", str(store), "--json")
    assert recovered.returncode == 0, recovered.stderr
    assert "interrupted" in recovered.stdout  # it wrote: two outcomes
    after = _run_of(store, run_id)
    assert (after["writer_name"], after["pid"]) == ("agent-7", os.getpid())


def _resolution(store: Path | str, run_id: str, effect_id: str) -> dict[str, Any]:
    shown = ledger_json("show", run_id, "--store", str(store), "--json")
    (found,) = [
        r["record"]
        for r in shown["records"]
        if r["type"] == "resolution" and r["record"]["effect_id"] == effect_id
    ]
    return found  # type: ignore[no-any-return]


def _line(store: Path | str, run_id: str, effect_id: str) -> str:
    shown = ledger("show", run_id, "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    # A long record's text goes on under its column, on lines of its own.
    lines = shown.stdout.replace("\n    ", " ").split("\n")
    (line,) = [line for line in lines if " resolved applied by " in line and effect_id in line]
    return " ".join(line.split())


def test_ledger_resolve_records_a_person_and_the_command(store: Path | str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=True)
    resolved = ledger(
        "resolve", run_id, "e1", "--applied", "--by", "alice", "--note", "seen",
        "--store", str(store), "--json",
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    written = json.loads(resolved.stdout)
    user = pwd.getpwuid(os.geteuid()).pw_name
    assert {k: written[k] for k in ("origin", "os_user", "host", "program")} == {
        "origin": "person",
        "os_user": user,
        "host": socket.gethostname(),
        "program": "ledger resolve",
    }
    assert written["pid"] not in (None, os.getpid())  # the command's own process
    assert _resolution(store, run_id, "e1") == written
    line = _line(store, run_id, "e1")
    assert f"resolved applied by alice: seen; written by ledger resolve, user {user} on" in line
    assert "not a person" not in line


AGENT = """
import json, os, sys
from ledger import effects as fx
from ledger.effect_log import EffectLog

run_id, store, allow = sys.argv[1], sys.argv[2], sys.argv[3] == "reconciler"
with EffectLog.load(run_id, store, writer_name="agent-7") as log:
    log.resolve("e1", applied=True, by="alice (on-call)", allow_self=allow)
print(os.getpid())
"""


@pytest.mark.parametrize("origin", ["worker", "reconciler"])
def test_a_programs_own_resolution_says_so(store: Path | str, tmp_path: Path, origin: str) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=True)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    result = subprocess.run(
        [PYTHON, str(script), run_id, str(store), origin],
        capture_output=True, text=True, env=subprocess_env(), timeout=CHILD_TIMEOUT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout)
    written = _resolution(store, run_id, "e1")
    assert {k: written[k] for k in ("by", "origin", "program", "pid")} == {
        "by": "alice (on-call)",
        "origin": origin,
        "program": "agent.py",
        "pid": pid,
    }
    kind = "the worker itself" if origin == "worker" else "a reconciler"
    assert _line(store, run_id, "e1").endswith(
        f"resolved applied by alice (on-call); written by {kind}, not a person (agent.py, pid {pid})"
    )


def test_export_and_import_carry_who_wrote_a_resolution(store: Path | str, tmp_path: Path) -> None:
    run_id = new_run_id()
    _worker(store, run_id, settle=True)
    resolved = ledger("resolve", run_id, "e1", "--applied", "--by", "alice", "--store", str(store))
    assert resolved.returncode == 0, resolved.stderr
    written = _resolution(store, run_id, "e1")
    assert (written["origin"], written["program"]) == ("person", "ledger resolve")
    exported = tmp_path / f"{run_id}.jsonl"
    done = ledger("export", run_id, "-o", str(exported), "--store", str(store))
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in exported.read_text().splitlines() if '"resolution"' in x]
    assert line["record"] == written
    other = tmp_path / "other"
    done = ledger("import", str(exported), "--store", str(other))
    assert done.returncode == 0, done.stderr
    assert _resolution(other, run_id, "e1") == written
    assert ledger("verify", "--store", str(other)).returncode == 0
