"""Batches on the SQLite backend: a store directory that became a file, and a full disk.

A full disk is a real ``RLIMIT_FSIZE`` in a child process (``SIGXFSZ`` ignored) that lets
the store's write-ahead log grow by a few frames at most, so that part of a batch may
reach the file before the limit stops it. What batches are on any backend is in
``tests/contract/test_batching.py``.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, EffectPersistenceError
from tests.builders import (
    REPO,
    claim_requests,
    loaded,
    python_stdout,
    see,
)
from tests.sqlite.driver import DB, query, replaced_by_a_file

DISK_ERROR = r"(?i)disk|I/O|full|too large"


def stored_effect_ids(store: Path) -> set[str]:
    """Every effect id with a claim row in the store, in any run."""
    return {effect_id for (effect_id,) in query(store / DB, "SELECT effect_id FROM claims")}


def test_claim_many_on_a_store_that_became_a_file_claims_nothing(
    store_dir: Path, run_id: str
) -> None:
    """With the store directory replaced by a file, a batch raises and none of it exists anywhere."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1"))
        history = log.history()
        with replaced_by_a_file(store_dir):
            with pytest.raises(EffectPersistenceError, match="not a directory"):
                log.claim_many(claim_requests("b1", "b2", "b3"))
            assert log.history() == history
            assert not log.degraded  # a failed claim raises; it does not degrade
            assert store_dir.read_bytes() == b"not a directory\n"
        assert loaded(run_id, store_dir) == history
        # Nothing of the failed batch was kept: the same ids are free, at the next seqs.
        assert [c.seq for c in log.claim_many(claim_requests("b1", "b2", "b3"))] == [2, 3, 4]
    assert [c.effect_id for c in loaded(run_id, store_dir).claims] == ["e1", "b1", "b2", "b3"]


def test_first_claim_many_into_a_file_creates_nothing(tmp_path: Path, run_id: str) -> None:
    """A run's first batch into a store path that is a file raises, and the file is untouched."""
    store = tmp_path / "store"
    store.write_bytes(b"not a directory\n")
    with EffectLog(run_id, store) as log:
        see(log, "o1", exists=False)
        with pytest.raises(EffectPersistenceError, match="not a directory"):
            log.claim_many(claim_requests("b1", "b2"))
        assert log.history().claims == ()
    assert list(tmp_path.iterdir()) == [store]
    assert store.read_bytes() == b"not a directory\n"


# A child claims e0, then lets the WAL grow by at most `slack` bytes (SIGXFSZ ignored,
# as a server would): a batch of large claims cannot fit. With some slack, part of the
# batch's frames reach the WAL before the limit stops it.
FULL_DISK_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import ClaimRequest, EffectLog, EffectPersistenceError

    store, run_id, slack = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def batch(prefix, action):
        # Wide scopes: the batch needs many pages, far more than the slack.
        return [
            ClaimRequest(
                effect_id=f"{prefix}{i}", action_id=action,
                operation=fx.OperationRef("write_file", "test/1", "0" * 64),
                impact_scope=[fx.ResourceRef("fs", f"/sandbox/{prefix}{i}/{j:03}-" + "p" * 150,
                                             "target") for j in range(40)])
            for i in range(12)
        ]

    def sizes():
        return {p.name: p.stat().st_size for p in sorted(store.iterdir())}

    log = EffectLog(run_id, store)
    log.claim_many(batch("e", "first"))
    wal = store / "ledger.sqlite3-wal"
    resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size + slack, resource.RLIM_INFINITY))
    before = sizes()
    result = {}
    try:
        log.claim_many(batch("b", "failed"))
    except EffectPersistenceError as e:
        result["error"] = str(e)
    result["claims"] = [c.effect_id for c in log.history().claims]
    result["degraded"] = log.degraded
    result["sizes_unchanged"] = sizes() == before
    print(json.dumps(result), flush=True)
    os._exit(0)  # no close, no checkpoint: as if the process died here
    """
)


@pytest.mark.parametrize(
    "slack", [0, 3 * 4120, 20 * 4120], ids=["no-byte", "3-frames", "20-frames"]
)
def test_claim_many_on_a_full_disk_claims_none_of_the_batch(
    store_dir: Path, run_id: str, slack: int
) -> None:
    """A batch that meets a full disk raises, and none of it is durable, even with part of it written."""
    result = json.loads(python_stdout(FULL_DISK_CHILD, store_dir, run_id, slack, cwd=REPO))
    assert result["error"].startswith("cannot record 12 claims in run"), result["error"]
    assert re.search(DISK_ERROR, result["error"]), result["error"]
    assert result["claims"] == [f"e{i}" for i in range(12)]
    assert result["degraded"] is False
    if slack == 0:
        assert result["sizes_unchanged"], "not one byte of the failed batch reached a file"
    else:  # part of the batch reached the WAL, with no commit frame after it
        assert not result["sizes_unchanged"], "the limit left no room: this case proves nothing"

    # This process never set a limit: what it reads is what the disk holds.
    history = loaded(run_id, store_dir)
    assert [c.effect_id for c in history.claims] == [f"e{i}" for i in range(12)]
    assert {c.action_id for c in history.claims} == {"first"}
    assert not any(e.startswith("b") for e in stored_effect_ids(store_dir))
    with EffectLog.load(run_id, store_dir) as log:
        retried = log.claim_many(claim_requests("b0", "b1"))
    assert [c.seq for c in retried] == [13, 14]
