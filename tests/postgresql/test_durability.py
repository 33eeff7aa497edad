"""What a PostgreSQL store keeps when its server is killed: every claim it acknowledged."""

from __future__ import annotations

import subprocess

from ledger.effect_log import EffectLog, new_run_id
from tests.builders import CHILD_TIMEOUT, PYTHON, subprocess_env
from tests.postgresql.server import Server

BURST = """
import sys
from ledger.effect_log import EffectLog, EffectPersistenceError
from tests.builders import claim_bare
url, run_id = sys.argv[1:3]
log = EffectLog(run_id, url)
try:
    for i in range(100000):
        claim_bare(log, f"e{i}")
        print(f"e{i}", flush=True)  # acknowledged: the claim's COMMIT returned
except EffectPersistenceError as e:
    print("failed", " ".join(str(e).split()), flush=True)
"""


def test_every_claim_acknowledged_before_the_server_is_sigkilled_is_there_after_restart() -> None:
    """SIGKILL the server mid-burst, start it again: each claim the worker was told of is durable.

    A server of the test's own: the session's, holding every other test's databases, would
    take long to recover, and its other tests would meet it starting up.
    """
    own = Server()
    try:
        _burst_and_kill(own)
    finally:
        own.remove()


def _burst_and_kill(own: Server) -> None:
    url, run_id = own.new_database(), new_run_id()
    worker = subprocess.Popen(
        [PYTHON, "-c", BURST, url, run_id],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert worker.stdout is not None
    acknowledged = []
    try:
        while len(acknowledged) < 50:
            line = worker.stdout.readline()
            assert line.startswith("e"), line
            acknowledged.append(line.strip())
        own.kill()
        rest = worker.stdout.read()
        worker.wait(timeout=CHILD_TIMEOUT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=CHILD_TIMEOUT)
        worker.stdout.close()
        own.start()
    *more, last = rest.splitlines()
    assert last.startswith("failed"), rest[-500:]
    acknowledged += more
    with EffectLog.load(run_id, url) as log:
        stored = [c.effect_id for c in log.history().claims]
    # Every acknowledged claim is there, in order; at most the one in flight besides.
    assert stored[: len(acknowledged)] == acknowledged
    assert len(stored) - len(acknowledged) in (0, 1)
