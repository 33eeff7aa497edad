"""Liveness without pids on PostgreSQL, and appends serialised by the server across processes."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ledger.effect_log import EffectLog
from ledger.storage import Mode
from tests.builders import Child, gap_free, ledger, orphan_run, run_python
from tests.postgresql import driver


def test_recover_dead_recovers_exactly_the_runs_whose_holder_is_gone(
    url: str, spawn: type[Child]
) -> None:
    """A run whose worker was SIGKILLed is recovered; one a live worker holds is not, from any process."""
    dead, alive = orphan_run(url), orphan_run(url)
    killed = spawn("load", url, dead)
    living = spawn("load", url, alive)
    assert killed.answer == living.answer == {"claims": ["e1"]}
    killed.kill()  # its session ends with its socket: the server drops its locks
    done = ledger("recover", "--dead", "--json", "--store", url)
    assert done.returncode == 0, done.stderr
    recovered = {r["run_id"] for r in json.loads(done.stdout) if r["outcomes"]}
    assert dead in recovered
    assert alive not in recovered
    living.finish()
    with EffectLog.load(alive, url) as log:
        assert log.history().outcomes == ()


WRITER = """
import sys
from ledger.effect_log import EffectLog, EffectPersistenceError
from tests.builders import claim_bare
url, run_id, name = sys.argv[1:4]
written = 0
for i in range(10):
    try:
        with EffectLog.load(run_id, url) as log:
            claim_bare(log, f"{name}-{i}")
            written += 1
    except EffectPersistenceError:
        pass  # another writer extended the run after this one loaded it
print(written)
"""


WRITERS = 16


def test_many_writers_on_one_run_keep_its_seqs_gap_free_and_its_chain_linear(url: str) -> None:
    """Sixteen processes (as on as many hosts: own connections) appending to one run at once: every acknowledged claim is there, in one chain."""
    run_id = orphan_run(url)
    with ThreadPoolExecutor(WRITERS) as pool:
        done = list(pool.map(lambda n: run_python(WRITER, url, run_id, f"w{n}"), range(WRITERS)))
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr[-400:] for d in done]
    acknowledged = sum(int(d.stdout) for d in done)
    assert acknowledged > 0
    with EffectLog.load(run_id, url) as log:  # validates every row and the whole chain
        history = log.history()
    assert gap_free(history)
    assert len(history.claims) == 1 + acknowledged
    seqs = driver.POSTGRESQL.query(
        url, "SELECT seq FROM claims WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    assert [s for (s,) in seqs] == list(range(1, 2 + acknowledged))


def test_a_closed_log_leaves_its_run_free_at_once(url: str) -> None:
    """Right after a log is closed, another session can take its run exclusively: no wait for the server to reap a session."""
    taken = []
    for _ in range(40):
        run_id = orphan_run(url)
        other = driver.Elsewhere(url, run_id)
        try:
            taken.append(other.could_hold(Mode.EXCLUSIVE))
        finally:
            other.close()
    assert all(taken), f"{taken.count(False)} of {len(taken)} closed runs were still held"
