"""`ledger status --attention` tells a claim whose writer lives from one whose writer died.

On each backend: a worker process claims and waits; while it lives, its claim is its
own business (nothing is listed, exit 0). SIGKILLed, its run is held by nobody: the
claim is listed as needing recovery (exit 1). The question never takes the run: the
worker, alive, can still record its outcome after being asked about.
"""

from __future__ import annotations

import json
import signal
import subprocess

from ledger.effect_log import new_run_id
from tests.builders import PYTHON, ledger, subprocess_env
from tests.reliability.test_liveness import WORKER


def _attention(location: object) -> tuple[int, list[dict[str, object]]]:
    found = ledger("status", "--attention", "--json", "--store", str(location))
    assert "Traceback" not in found.stderr
    return found.returncode, json.loads(found.stdout)


def test_a_dead_writers_claim_is_listed_and_a_live_ones_is_not(location) -> None:
    run_id = new_run_id()
    with subprocess.Popen(
        [PYTHON, "-c", WORKER, str(location), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    ) as worker:
        try:
            assert worker.stdout is not None
            assert worker.stdin is not None
            assert "pid" in json.loads(worker.stdout.readline())
            assert _attention(location) == (0, [])
            # Asked about, the run was not taken: the worker records its outcome.
            worker.stdin.write("outcome\n")
            worker.stdin.flush()
            assert json.loads(worker.stdout.readline()) == {"degraded": False}
            assert _attention(location) == (0, [])  # e2 claimed, its writer alive
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=60)
            code, rows = _attention(location)
            assert code == 1
            assert [(r["run_id"], r["effect_id"], r["urgency"]) for r in rows] == [
                (run_id, "e2", 4)
            ]
            assert rows[0]["action"] == f"ledger recover {run_id}"
        finally:
            worker.kill()
            worker.wait(timeout=60)
