"""Liveness under real pid namespaces and racing recoverers.

A worker in its own pid namespace (``unshare --pid --fork``, as in a container on the
same host) has pids this process cannot see: it records itself as pid 1. Recovery must
still leave its run alone while it lives, its outcome must then persist, and once it is
SIGKILLed its run must be recovered. Several ``ledger recover --dead`` racing on one
store must each exit 0 and recover every run exactly once.

Profiles: 3 rounds of racing recoverers under plain pytest, 20 with
``LEDGER_RELIABILITY=long``. Figures are printed on one ``reliability:`` line and
appended as JSON to ``$LEDGER_RELIABILITY_REPORT``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import LEDGER, PYTHON, ledger, op, subprocess_env
from tests.reliability.figures import report

LONG = os.environ.get("LEDGER_RELIABILITY") == "long"
ROUNDS = 20 if LONG else 3
RECOVERERS = 4  # racing `ledger recover --dead` processes per round
RUNS = 6  # orphaned runs per round
TIMEOUT = 120


def unshare() -> str:
    """The ``unshare`` command; a test that needs it fails (never skips) without it."""
    found = shutil.which("unshare")
    assert found is not None, "unshare (util-linux) is not installed: this test needs it"
    return found


# A worker that claims, says so, then waits for a word on stdin to record the outcome.
WORKER = textwrap.dedent(
    """
    import json, os, sys
    from ledger import effects as fx
    from ledger.effect_log import EffectLog

    store, run_id = sys.argv[1:3]
    op = fx.OperationRef("write_file", "test/1", "0" * 64)
    log = EffectLog(run_id, store)
    log.claim(effect_id="e1", action_id="a1", operation=op, impact_scope=())
    print(json.dumps({"pid": os.getpid()}), flush=True)
    if sys.stdin.readline() == "outcome\\n":
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
        log.claim(effect_id="e2", action_id="a2", operation=op, impact_scope=())
        print(json.dumps({"degraded": log.degraded}), flush=True)
    sys.stdin.read()
    """
)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def test_a_live_writer_in_its_own_pid_namespace_is_not_recovered(tmp_path: Path) -> None:
    """A worker under `unshare --pid --fork` is left alone while it lives, then recovered once SIGKILLed."""
    store = tmp_path / "store"
    with EffectLog(new_run_id(), store) as log:  # the store exists before the worker
        log.claim(effect_id="e0", action_id="a0", operation=op(), impact_scope=())
        log.outcome(effect_id="e0", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
    run_id = new_run_id()
    errors = (tmp_path / "worker.err").open("w")
    proc = subprocess.Popen(
        [unshare(), "--pid", "--fork", "--kill-child", PYTHON, "-c", WORKER, str(store), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errors,  # read on failure: unshare complains too when its child is SIGKILLed
        text=True,
        env=subprocess_env(),
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line, f"the worker said nothing: {(tmp_path / 'worker.err').read_text()}"
        assert json.loads(line) == {"pid": 1}  # its own namespace: a pid that is not its own
        (worker,) = _children(proc.pid)

        recovered = ledger("recover", "--dead", "--json", "--store", str(store))
        assert recovered.returncode == 0, recovered.stderr
        assert json.loads(recovered.stdout) == [
            {"run_id": run_id, "outcomes": [], "skipped": "a live process has it loaded"}
        ]
        refused = ledger("recover", run_id, "--store", str(store))
        assert refused.returncode == 1
        assert "is loaded by a live process" in refused.stderr

        proc.stdin.write("outcome\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"degraded": False}
        with EffectLog.load(run_id, store) as log:
            assert [(o.effect_id, o.execution) for o in log.history().outcomes] == [
                ("e1", fx.ExecutionOutcome.REPORTED_SUCCESS)
            ]

        os.kill(worker, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)  # unshare returns once the worker is reaped
        after = ledger("recover", "--dead", "--json", "--store", str(store))
        assert after.returncode == 0, after.stderr
        (entry,) = json.loads(after.stdout)
        assert (entry["run_id"], entry["skipped"]) == (run_id, None)
        assert [o["effect_id"] for o in entry["outcomes"]] == ["e2"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        proc.stdin.close()
        proc.stdout.close()
        errors.close()
    report({"test": "liveness_pid_namespace", "worker_pid_in_namespace": 1, "recovered": 1})


def _orphans(store: Path, count: int) -> dict[str, list[str]]:
    """``count`` closed runs, each with claims that never got an outcome."""
    runs = {}
    for _ in range(count):
        run_id = new_run_id()
        with EffectLog(run_id, store) as log:
            effects = [f"e{i}" for i in range(3)]
            for effect_id in effects:
                log.claim(
                    effect_id=effect_id, action_id=f"a-{effect_id}", operation=op(), impact_scope=()
                )
        runs[run_id] = effects
    return runs


def test_racing_recoverers_recover_each_run_exactly_once(tmp_path: Path) -> None:
    """N `ledger recover --dead` at once: all exit 0, each run recovered by one, no INTERRUPTED twice."""
    skipped = recoveries = 0
    for round_ in range(ROUNDS):
        store = tmp_path / f"store-{round_}"
        runs = _orphans(store, RUNS)
        argv = [LEDGER, "recover", "--dead", "--json", "--store", str(store)]
        procs = [
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=subprocess_env(),
            )
            for _ in range(RECOVERERS)
        ]
        by_run: dict[str, list[list[str]]] = {run_id: [] for run_id in runs}
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, err
            assert "Traceback" not in err
            for entry in json.loads(out):
                if entry["skipped"] is not None:
                    assert entry["skipped"] == "another process is recovering it", entry
                    skipped += 1
                elif entry["outcomes"]:
                    by_run[entry["run_id"]].append([o["effect_id"] for o in entry["outcomes"]])
        for run_id, effects in runs.items():
            assert by_run[run_id] == [effects], f"run {run_id} recovered {by_run[run_id]}"
            recoveries += 1
            with EffectLog.load(run_id, store) as log:
                interrupted = [
                    o.effect_id
                    for o in log.history().outcomes
                    if o.execution is fx.ExecutionOutcome.INTERRUPTED
                ]
            assert interrupted == effects
        again = ledger("recover", "--dead", "--json", "--store", str(store))
        assert (again.returncode, json.loads(again.stdout)) == (0, [])
    report(
        {
            "test": "liveness_racing_recoverers",
            "profile": "long" if LONG else "quick",
            "rounds": ROUNDS,
            "recoverers": RECOVERERS,
            "runs_recovered_once": recoveries,
            "left_to_another_recoverer": skipped,
        }
    )


def test_racing_recovers_of_one_run_all_exit_0(tmp_path: Path) -> None:
    """N `ledger recover RUN` at once on one run: all exit 0 and its claims are interrupted once."""
    store = tmp_path / "store"
    ((run_id, effects),) = _orphans(store, 1).items()
    argv = [LEDGER, "recover", run_id, "--json", "--store", str(store)]
    procs = [
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env()
        )
        for _ in range(RECOVERERS)
    ]
    recovered = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        (entry,) = json.loads(out)
        if entry["outcomes"]:
            recovered.append([o["effect_id"] for o in entry["outcomes"]])
    assert recovered == [effects]
    with EffectLog.load(run_id, store) as log:
        assert [o.effect_id for o in log.history().outcomes] == effects
    report({"test": "liveness_racing_recover_run", "recoverers": RECOVERERS, "recovered": 1})
