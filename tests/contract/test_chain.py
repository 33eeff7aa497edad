"""The hash chain on any backend: every record is chained to the one before, across reloads.

What the chain's hashes are, and that a store refuses or detects a record changed behind
the library's back, is shown on the SQLite backend's rows (``tests/sqlite/test_chain.py``).
"""

from __future__ import annotations

from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog
from tests.backends import Backend
from tests.builders import fs_ref, write_five_records


def _links(backend: Backend, store: Path, run_id: str) -> list[tuple[int, str, str]]:
    """(seq, prev_hash, hash) of every record of the run, in seq order, read outside the library."""
    return backend.query(
        store,
        " UNION ALL ".join(
            f"SELECT seq, prev_hash, hash FROM {t} WHERE run_id = ?"
            for t in ("claims", "outcomes", "observations")
        )
        + " ORDER BY seq",
        (run_id,) * 3,
    )


def test_recovery_and_reload_continue_the_chain(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """Outcomes appended by recovery after a reload are chained to the head the store held."""
    with EffectLog(run_id, store_dir) as log:
        write_five_records(log)
    with EffectLog.load(run_id, store_dir) as log:
        (recovered,) = log.recover_interrupted()
        log.observe(
            observation_id="o1",
            resource=fs_ref("/w/a"),
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s1",
            exists=True,
        )
    links = _links(backend, store_dir, run_id)
    assert recovered.seq == 6
    assert [prev for _, prev, _ in links[1:]] == [h for _, _, h in links[:-1]]
    with EffectLog.load(run_id, store_dir) as again:
        assert len(again.history().records()) == 7
