"""Batches: ``EffectLog.claim_many`` and ``EffectLog.outcome_many``.

A batch is one transaction and one fsync: every item is checked before anything is
written, and then all of it is durable or none of it is. These tests check that on real
store directories, against real faults: a store directory replaced by a file, a full disk
(a real ``RLIMIT_FSIZE`` in a child process, ``SIGXFSZ`` ignored) and a child process
killed with ``SIGKILL`` between and inside batches. What is on disk is read back with
``EffectLog.load``, with the stock ``sqlite3`` module opened read-only, and, for counting
transactions, from the frames of the store's write-ahead log itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import select
import signal
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    EffectPersistenceError,
    OutcomeRequest,
    new_run_id,
)
from ledger.sqlite import store as _store
from tests.builders import PYTHON, REPO, fs_ref, op, sha, subprocess_env

DB = "ledger.sqlite3"
CHILD_TIMEOUT = 60
DISK_ERROR = r"(?i)disk|I/O|full|too large"

RUNNING = fx.ExecutionOutcome.RUNNING
SUCCESS = fx.ExecutionOutcome.REPORTED_SUCCESS
FAILED = fx.ExecutionOutcome.FAILED
INTERRUPTED = fx.ExecutionOutcome.INTERRUPTED
NONE = fx.Impact.NONE
POSSIBLE = fx.Impact.POSSIBLE
CERTAIN = fx.Impact.CERTAIN


# --------------------------------------------------------------------------- helpers


def request(name: str, **change: Any) -> ClaimRequest:
    """A claim (effect id ``name``) of a write of ``/sandbox/<name>.txt`` that should leave it existing."""
    target = fs_ref(f"/sandbox/{name}.txt")
    fields: dict[str, Any] = {
        "effect_id": name,
        "action_id": f"a-{name}",
        "operation": op(args=name.encode()),
        "impact_scope": (target, fs_ref("/sandbox", role="parent")),
        "obligations": (fx.Postcondition(target, fx.Predicate.SHA256, sha(b"x")),),
    }
    return ClaimRequest(**{**fields, **change})


def requests(*effect_ids: str) -> list[ClaimRequest]:
    """One request per effect id, in order."""
    return [request(effect_id) for effect_id in effect_ids]


def done(effect_id: str, execution: fx.ExecutionOutcome = SUCCESS, **change: Any) -> OutcomeRequest:
    """An outcome request; a reported success with certain impact unless told otherwise."""
    fields: dict[str, Any] = {"effect_id": effect_id, "execution": execution, "impact": CERTAIN}
    return OutcomeRequest(**{**fields, **change})


def see(log: EffectLog, observation_id: str) -> fx.Observation:
    """Record that ``/sandbox/a.txt`` was seen missing."""
    return log.observe(
        observation_id=observation_id,
        resource=fs_ref("/sandbox/a.txt"),
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="look",
        exists=False,
    )


def connect_ro(db: Path) -> contextlib.closing[sqlite3.Connection]:
    """A plain read-only sqlite3 connection, outside the library."""
    return contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30))


def row_counts(db: Path) -> dict[str, int]:
    """Rows in every table of the store."""
    with connect_ro(db) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def stored_effect_ids(db: Path) -> set[str]:
    """Every effect id with a claim row in the store, in any run."""
    with connect_ro(db) as conn:
        return {effect_id for (effect_id,) in conn.execute("SELECT effect_id FROM claims")}


def loaded(run_id: str, store: Path) -> fx.History:
    """The run's history as a fresh ``EffectLog.load`` reads it."""
    with EffectLog.load(run_id, store) as log:
        return log.history()


def wal_commits(db: Path) -> int:
    """How many transactions the store's write-ahead log holds since it was last reset.

    SQLite's WAL format: a 32-byte header (page size at bytes 8..12, the salt at
    16..24), then frames of a 24-byte header and one page. A frame belongs to the
    current log only if its salt (header bytes 8..16) is the log's; bytes 4..8 are
    non-zero only in the last frame of a committed transaction.
    """
    data = db.with_name(db.name + "-wal").read_bytes()
    assert int.from_bytes(data[:4], "big") in {0x377F0682, 0x377F0683}, "not a WAL file"
    page_size = int.from_bytes(data[8:12], "big")
    salt = data[16:24]
    commits = 0
    for offset in range(32, len(data) - 24 - page_size + 1, 24 + page_size):
        header = data[offset : offset + 24]
        if header[8:16] != salt:
            break
        commits += int.from_bytes(header[4:8], "big") != 0
    return commits


@contextlib.contextmanager
def store_replaced_by_a_file(store: Path) -> Iterator[None]:
    """Move the store directory aside and put a regular file at its path; then undo it."""
    aside = store.with_name(store.name + ".aside")
    store.rename(aside)
    store.write_bytes(b"not a directory\n")
    try:
        yield
    finally:
        store.unlink()
        aside.rename(store)


# --------------------------------------------------------------------------- claim_many


def test_claim_many_takes_consecutive_seqs_in_request_order(store_dir: Path, run_id: str) -> None:
    """The claims take consecutive seqs in request order, are in history, and are durable on return."""
    with EffectLog(run_id, store_dir) as log:
        (first,) = log.claim_many(requests("e0"))
        batch = requests("z", "a", "m", "b")  # not sorted: request order is what counts
        claims = log.claim_many(iter(batch))  # any iterable
        assert first.seq == 1
        assert [c.seq for c in claims] == [2, 3, 4, 5]
        assert [c.effect_id for c in claims] == ["z", "a", "m", "b"]
        for claim, asked in zip(claims, batch, strict=True):
            assert (claim.action_id, claim.operation) == (asked.action_id, asked.operation)
            assert claim.impact_scope == tuple(asked.impact_scope)
            assert claim.obligations == tuple(asked.obligations)
        assert len({c.recorded_at for c in claims}) == 1  # one transaction, one moment
        assert log.history() == fx.History(claims=(first, *claims))
        # Durable when claim_many returned: another reader sees every one of them now.
        assert stored_effect_ids(log.path) == {"e0", "z", "a", "m", "b"}
        assert loaded(run_id, store_dir) == log.history()
        after = log.claim(
            effect_id="next", action_id="a", operation=op(), impact_scope=[fs_ref("/sandbox/n")]
        )
        assert after.seq == 6
        history = log.history()
    assert loaded(run_id, store_dir) == history
    counts = row_counts(store_dir / DB)
    assert (counts["claims"], counts["impact_scope"], counts["obligations"]) == (6, 11, 5)


def test_claim_many_is_one_transaction(store_dir: Path, run_id: str) -> None:
    """A batch of claims, and the observations made before it, is one commit in the WAL."""
    with EffectLog(new_run_id(), store_dir) as other:  # creates and migrates the store
        other.claim_many(requests("x"))
        with EffectLog(run_id, store_dir) as log:
            see(log, "o1")
            see(log, "o2")
            before = wal_commits(log.path)
            claims = log.claim_many(requests(*(f"e{i}" for i in range(20))))
            assert wal_commits(log.path) == before + 1
            many = log.claim_many(requests("f1", "f2"))
            assert wal_commits(log.path) == before + 2
            single = log.claim(effect_id="g", action_id="a", operation=op(), impact_scope=())
            assert wal_commits(log.path) == before + 3
    assert [c.seq for c in claims] == list(range(3, 23))
    assert [c.seq for c in (*many, single)] == [23, 24, 25]


def test_empty_claim_many_writes_nothing(tmp_path: Path, run_id: str) -> None:
    """An empty batch returns () and creates no file; on a started run it changes nothing."""
    store = tmp_path / "store"
    with EffectLog(run_id, store) as log:
        assert log.claim_many([]) == ()
        assert log.claim_many(iter(())) == ()
        assert log.history() == fx.History()
        assert list(tmp_path.iterdir()) == []
        log.claim_many(requests("e1"))
        counts, history = row_counts(log.path), log.history()
        assert log.claim_many(()) == ()
        assert row_counts(log.path) == counts
        assert log.history() == history
        assert log.claim_many(requests("e2"))[0].seq == 2


BAD_ITEMS = [
    pytest.param({"effect_id": ""}, ValueError, id="effect_id-empty"),
    pytest.param({"effect_id": "x" * 201}, ValueError, id="effect_id-201-chars"),
    pytest.param({"effect_id": "a\nb"}, ValueError, id="effect_id-newline"),
    pytest.param({"effect_id": 7}, TypeError, id="effect_id-int"),
    pytest.param({"action_id": ""}, ValueError, id="action_id-empty"),
    pytest.param({"action_id": None}, TypeError, id="action_id-none"),
    pytest.param({"operation": "write_file"}, TypeError, id="operation-str"),
    pytest.param({"operation": op().to_dict()}, TypeError, id="operation-dict"),
    pytest.param({"impact_scope": "/sandbox/a.txt"}, TypeError, id="scope-str"),
    pytest.param({"impact_scope": [{"kind": "fs"}]}, TypeError, id="scope-of-dict"),
    pytest.param({"obligations": [fs_ref("/sandbox/a.txt")]}, TypeError, id="obligations-of-ref"),
]


def _bad_batch(position: int, change: dict[str, Any]) -> list[ClaimRequest]:
    batch = requests("b0", "b1", "b2", "b3")
    batch[position] = request(f"b{position}", **change)
    return batch


@pytest.mark.parametrize("position", [0, 2, 3], ids=["first", "middle", "last"])
@pytest.mark.parametrize(("change", "error"), BAD_ITEMS)
def test_a_bad_item_anywhere_writes_nothing(
    change: dict[str, Any], error: type[Exception], position: int, store_dir: Path, run_id: str
) -> None:
    """A bad item anywhere in a batch raises before anything of the batch is written."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1"))
        counts, history = row_counts(log.path), log.history()
        batch = _bad_batch(position, change)
        with pytest.raises(error, match=next(iter(change))):
            log.claim_many(batch)
        assert log.history() == history
        assert row_counts(log.path) == counts
        assert stored_effect_ids(log.path) == {"e1"}
        # No seq was spent, and no id of the refused batch is taken.
        assert [c.seq for c in log.claim_many(requests("b0", "b1"))] == [2, 3]
    assert [c.effect_id for c in loaded(run_id, store_dir).claims] == ["e1", "b0", "b1"]


@pytest.mark.parametrize(("change", "error"), BAD_ITEMS)
def test_a_bad_first_batch_creates_nothing(
    change: dict[str, Any], error: type[Exception], tmp_path: Path, run_id: str
) -> None:
    """A run's first batch with a bad last item creates no store, and its observations wait."""
    store = tmp_path / "store"
    with EffectLog(run_id, store) as log:
        observation = see(log, "o1")
        batch = _bad_batch(3, change)
        with pytest.raises(error, match=next(iter(change))):
            log.claim_many(batch)
        assert list(tmp_path.iterdir()) == []
        assert log.history() == fx.History(observations=(observation,))
        assert [c.seq for c in log.claim_many(requests("b0"))] == [2]
    assert loaded(run_id, store).observations == (observation,)


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(
            {"effect_id": "b9", "action_id": "a", "operation": op(), "impact_scope": ()}, id="dict"
        ),
        pytest.param(None, id="none"),
        pytest.param(done("b0"), id="outcome-request"),
        pytest.param(("b9", "a", op(), ()), id="tuple"),
    ],
)
def test_an_item_that_is_not_a_claim_request_is_a_type_error(
    item: object, store_dir: Path, run_id: str
) -> None:
    """An item that is not a ClaimRequest is a TypeError, wherever it is, and nothing is written."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1"))
        counts, history = row_counts(log.path), log.history()
        for position in (0, 2):
            batch: list[object] = [*requests("b0", "b1"), *requests("b2")]
            batch.insert(position, item)
            with pytest.raises(TypeError, match="ClaimRequest"):
                log.claim_many(batch)  # type: ignore[arg-type]
        assert log.history() == history
        assert row_counts(log.path) == counts
        assert log.claim_many(requests("b0"))[0].seq == 2


def test_duplicate_effect_ids_are_refused_whole(store_dir: Path, run_id: str) -> None:
    """An id twice in a batch, or an id claimed before (also after a restart), refuses the batch."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1", "e2"))
        counts, history = row_counts(log.path), log.history()
        for batch in (
            requests("n1", "n2", "n1"),  # twice in the batch
            requests("n1", "n2", "e2"),  # claimed by an earlier batch
            [request("n1"), request("n2", action_id="other"), request("n2")],
        ):
            with pytest.raises(ValueError, match="already claimed"):
                log.claim_many(batch)
            assert log.history() == history
            assert row_counts(log.path) == counts
    with EffectLog.load(run_id, store_dir) as again:
        with pytest.raises(ValueError, match="e1"):
            again.claim_many(requests("n1", "e1"))
        assert [c.seq for c in again.claim_many(requests("n1", "n2"))] == [3, 4]
    assert stored_effect_ids(store_dir / DB) == {"e1", "e2", "n1", "n2"}


def test_claim_many_on_a_store_that_became_a_file_claims_nothing(
    store_dir: Path, run_id: str
) -> None:
    """With the store directory replaced by a file, a batch raises and none of it exists anywhere."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1"))
        history = log.history()
        with store_replaced_by_a_file(store_dir):
            with pytest.raises(EffectPersistenceError, match="not a directory"):
                log.claim_many(requests("b1", "b2", "b3"))
            assert log.history() == history
            assert not log.degraded  # a failed claim raises; it does not degrade
            assert store_dir.read_bytes() == b"not a directory\n"
        assert loaded(run_id, store_dir) == history
        # Nothing of the failed batch was kept: the same ids are free, at the next seqs.
        assert [c.seq for c in log.claim_many(requests("b1", "b2", "b3"))] == [2, 3, 4]
    assert [c.effect_id for c in loaded(run_id, store_dir).claims] == ["e1", "b1", "b2", "b3"]


def test_first_claim_many_into_a_file_creates_nothing(tmp_path: Path, run_id: str) -> None:
    """A run's first batch into a store path that is a file raises, and the file is untouched."""
    store = tmp_path / "store"
    store.write_bytes(b"not a directory\n")
    with EffectLog(run_id, store) as log:
        see(log, "o1")
        with pytest.raises(EffectPersistenceError, match="not a directory"):
            log.claim_many(requests("b1", "b2"))
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
    child = subprocess.run(
        [PYTHON, "-c", FULL_DISK_CHILD, str(store_dir), run_id, str(slack)],
        env=subprocess_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
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
    assert not any(e.startswith("b") for e in stored_effect_ids(store_dir / DB))
    with EffectLog.load(run_id, store_dir) as log:
        retried = log.claim_many(requests("b0", "b1"))
    assert [c.seq for c in retried] == [13, 14]


# --------------------------------------------------------------------------- observations


def test_observations_before_the_first_batch_are_written_with_it(
    store_dir: Path, run_id: str
) -> None:
    """Observations made before a run's first batch are written in its transaction, at their seqs."""
    with EffectLog(run_id, store_dir) as log:
        o1, o2 = see(log, "o1"), see(log, "o2")
        assert not store_dir.exists()
        claims = log.claim_many(requests("e1", "e2"))
        assert [r.seq for r in (o1, o2, *claims)] == [1, 2, 3, 4]
        assert row_counts(log.path)["observations"] == 2
        history = log.history()
    assert loaded(run_id, store_dir) == history
    assert loaded(run_id, store_dir).observations == (o1, o2)


def test_observations_wait_for_a_batch_that_succeeds(store_dir: Path, run_id: str) -> None:
    """When the first batch cannot be written its observations are not either; the retry writes both."""
    with EffectLog(new_run_id(), store_dir) as other:
        other.claim_many(requests("x"))
    with EffectLog(run_id, store_dir) as log:
        o1 = see(log, "o1")
        with store_replaced_by_a_file(store_dir), pytest.raises(EffectPersistenceError):
            log.claim_many(requests("e1", "e2"))
        assert row_counts(store_dir / DB)["observations"] == 0
        claims = log.claim_many(requests("e1", "e2"))
        assert [r.seq for r in (o1, *claims)] == [1, 2, 3]
    assert loaded(run_id, store_dir).observations == (o1,)


# --------------------------------------------------------------------------- outcome_many


@pytest.fixture
def claimed(store_dir: Path, run_id: str) -> Iterator[EffectLog]:
    """A log whose run claimed e1, e2 and e3 (seqs 1-3)."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1", "e2", "e3"))
        yield log


def test_outcome_many_records_in_order_with_consecutive_seqs(
    claimed: EffectLog, store_dir: Path
) -> None:
    """Outcomes take consecutive seqs in request order; RUNNING then terminal in one batch is fine."""
    batch = [
        done("e2", FAILED, impact=NONE, execution_id="x2"),
        done("e1", RUNNING, impact=POSSIBLE, execution_id="job-1"),
        done("e1", SUCCESS),
        done("e3", RUNNING, impact=NONE),
    ]
    outcomes = claimed.outcome_many(iter(batch))
    assert [(o.effect_id, o.seq) for o in outcomes] == [("e2", 4), ("e1", 5), ("e1", 6), ("e3", 7)]
    for outcome, asked in zip(outcomes, batch, strict=True):
        assert (outcome.execution, outcome.impact) == (asked.execution, asked.impact)
        assert outcome.execution_id == asked.execution_id
        assert outcome.replayed is False
    assert not claimed.degraded
    assert claimed.history().outcomes == outcomes
    assert loaded(claimed.run_id, store_dir) == claimed.history()
    # e1 and e2 are settled, e3 is only running.
    with pytest.raises(ValueError, match="e1"):
        claimed.outcome_many([done("e1", FAILED, impact=NONE)])
    (last,) = claimed.outcome_many([done("e3", INTERRUPTED, impact=POSSIBLE)])
    assert last.seq == 8
    assert claimed.outcome_many([]) == ()
    assert loaded(claimed.run_id, store_dir) == claimed.history()


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param([done("e1"), done("e2"), done("e1", FAILED, impact=NONE)], id="two-terminal"),
        pytest.param([done("e1"), done("e1", RUNNING, impact=NONE)], id="running-after-terminal"),
        pytest.param([done("e1"), done("e9"), done("e2")], id="unknown-effect"),
        pytest.param(
            [done("e1"), done("e2", INTERRUPTED, impact=CERTAIN)], id="interrupted-certain"
        ),
        pytest.param([done("e1"), done("e2", INTERRUPTED, impact=NONE)], id="interrupted-none"),
        pytest.param([done("e1"), done("e2", execution_id="")], id="execution_id-empty"),
        pytest.param([done("e1"), done("")], id="effect_id-empty"),
        pytest.param([done("e1"), done("e3"), done("settled")], id="already-settled"),
    ],
)
def test_a_bad_outcome_anywhere_writes_nothing(
    batch: list[OutcomeRequest], store_dir: Path, run_id: str
) -> None:
    """A batch of outcomes with one bad item is a ValueError; nothing is written or degraded."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(requests("e1", "e2", "e3", "settled"))
        log.outcome_many([done("settled")])
        counts, history = row_counts(log.path), log.history()
        with pytest.raises(ValueError):
            log.outcome_many(batch)
        assert log.history() == history
        assert row_counts(log.path) == counts
        assert not log.degraded
        # Every effect is still open, and no seq was spent.
        outcomes = log.outcome_many([done("e1"), done("e2"), done("e3")])
        assert [o.seq for o in outcomes] == [6, 7, 8]
        assert loaded(run_id, store_dir) == log.history()


@pytest.mark.parametrize(
    ("item", "error"),
    [
        pytest.param({"effect_id": "e1"}, "OutcomeRequest", id="dict"),
        pytest.param(request("e1"), "OutcomeRequest", id="claim-request"),
        pytest.param(done("e1", "reported_success"), "execution", id="execution-str"),
        pytest.param(done("e1", impact="certain"), "impact", id="impact-str"),
    ],
)
def test_a_wrong_type_in_outcome_many_is_a_type_error(
    claimed: EffectLog, item: object, error: str
) -> None:
    """A wrong type anywhere in a batch of outcomes is a TypeError, and nothing is written."""
    counts, history = row_counts(claimed.path), claimed.history()
    with pytest.raises(TypeError, match=error):
        claimed.outcome_many([done("e2"), item])  # type: ignore[list-item]
    assert claimed.history() == history
    assert row_counts(claimed.path) == counts
    assert claimed.outcome_many([done("e2")])[0].seq == 4


def test_outcome_many_that_cannot_be_persisted_degrades_the_log(
    claimed: EffectLog, store_dir: Path
) -> None:
    """Outcomes the store refuses degrade the log: kept in memory, no raise, and no claim after."""
    durable = claimed.history()
    with store_replaced_by_a_file(store_dir):
        outcomes = claimed.outcome_many([done("e1", RUNNING, impact=POSSIBLE), done("e1")])
        assert claimed.degraded
        assert claimed.history().outcomes == outcomes
        assert [o.seq for o in outcomes] == [4, 5]
        assert claimed.assess("e1").execution is SUCCESS  # in memory only
        with pytest.raises(EffectPersistenceError, match="degraded"):
            claimed.claim_many(requests("e4"))
        with pytest.raises(EffectPersistenceError, match="degraded"):
            claimed.claim(effect_id="e5", action_id="a", operation=op(), impact_scope=())
    # The store is back, but the log stays degraded: nothing more is written.
    with pytest.raises(EffectPersistenceError, match="degraded"):
        claimed.claim_many(requests("e4"))
    more = claimed.outcome_many([done("e2")])  # accepted in memory, not written
    assert claimed.history().outcomes == (*outcomes, *more)
    assert loaded(claimed.run_id, store_dir) == durable
    assert row_counts(store_dir / DB)["outcomes"] == 0
    with EffectLog.load(claimed.run_id, store_dir) as again:
        assert again.assess("e1").verdict is fx.EffectVerdict.PENDING


def test_a_degraded_log_never_tries_the_store_again(
    claimed: EffectLog, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Degraded is sticky: once the store is back, not one more transaction is even begun.

    The schema would refuse what a degraded log wrote (its in-memory records left a gap
    in the run's seqs), so what the store holds cannot show whether the log tried:
    the transactions it hands the store are counted instead.
    """
    with store_replaced_by_a_file(store_dir):
        claimed.outcome_many([done("e1")])
    assert claimed.degraded
    tried: list[str] = []
    commit = _store.Store.commit

    def counted(self: _store.Store, action: str, *args: Any, **kwargs: Any) -> Any:
        tried.append(action)
        return commit(self, action, *args, **kwargs)

    monkeypatch.setattr(_store.Store, "commit", counted)
    claimed.outcome_many([done("e2")])
    claimed.outcome(effect_id="e3", execution=SUCCESS, impact=fx.Impact.CERTAIN)
    claimed.observe(
        observation_id="o-late",
        resource=fs_ref("/w/a"),
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="s",
    )
    with pytest.raises(EffectPersistenceError, match="degraded"):
        claimed.claim_many(requests("e9"))
    with pytest.raises(EffectPersistenceError, match="degraded"):
        claimed.recover_interrupted()
    assert claimed.degraded
    assert tried == []
    with EffectLog.load(claimed.run_id, store_dir) as again:  # the store itself still works
        again.outcome(effect_id="e2", execution=SUCCESS, impact=fx.Impact.CERTAIN)
    assert len(tried) == 1


# --------------------------------------------------------------------------- assess


def test_assess_after_batches_equals_the_pure_assess(store_dir: Path, run_id: str) -> None:
    """After claim_many and outcome_many, log.assess is fx.assess over log.history(), also reloaded."""
    a, b = fs_ref("/sandbox/a.txt"), fs_ref("/sandbox/b.txt")
    exists = fx.Predicate.EXISTS
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(
            [
                request("w1", impact_scope=(a,), obligations=(fx.Postcondition(a, exists),)),
                request("w2", impact_scope=(b,), obligations=(fx.Postcondition(b, exists),)),
                request("w3", impact_scope=(a, b), obligations=()),
                request("w4", impact_scope=(b,), obligations=(fx.Postcondition(b, exists),)),
            ]
        )
        log.outcome_many(
            [
                done("w1"),
                done("w2", RUNNING, impact=POSSIBLE),
                done("w2", FAILED, impact=NONE),
                done("w3", INTERRUPTED, impact=POSSIBLE),
            ]
        )
        log.observe(
            observation_id="o1",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="check",
            exists=True,
        )
        history = log.history()
        verdicts = {}
        for claim in history.claims:
            assessment = log.assess(claim.effect_id)
            assert assessment == fx.assess(claim, history)
            verdicts[claim.effect_id] = assessment.verdict
    assert verdicts == {
        "w1": fx.EffectVerdict.VERIFIED,
        "w2": fx.EffectVerdict.FAILED,
        "w3": fx.EffectVerdict.UNVERIFIED,
        "w4": fx.EffectVerdict.PENDING,
    }
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        for claim in history.claims:
            assert again.assess(claim.effect_id) == fx.assess(claim, history)


# --------------------------------------------------------------------------- SIGKILL

# A child claims batches of 1 to 6 effects in a loop and prints each batch's effect ids
# once claim_many has returned. An id names its batch and the batch's size.
KILLED_CHILD = textwrap.dedent(
    """
    import json, random, sys
    from ledger import effects as fx
    from ledger.effect_log import ClaimRequest, EffectLog

    store, run_id, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    with EffectLog(run_id, store) as log:
        for k in range(100_000):
            n = rng.randint(1, 6)
            batch = [
                ClaimRequest(effect_id=f"b{k}.{j}of{n}", action_id=f"a{k}", operation=OP,
                             impact_scope=[fx.ResourceRef("fs", f"/sandbox/{k}/{j}", "target")])
                for j in range(n)
            ]
            claims = log.claim_many(batch)
            print(json.dumps([c.effect_id for c in claims]), flush=True)
    """
)

BATCH_ID = re.compile(r"b(\d+)\.(\d+)of(\d+)")


def read_lines(proc: subprocess.Popen[bytes], count: int) -> bytes:
    """Read the child's stdout until it holds ``count`` whole lines; fail if it dies or stalls."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + CHILD_TIMEOUT
    while data.count(b"\n") < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            proc.kill()
            pytest.fail(f"the child stalled after {len(data.splitlines())} lines")
        chunk = os.read(fd, 65536)
        if not chunk:
            _, err = proc.communicate()
            pytest.fail(f"the child exited {proc.returncode}:\n{err.decode()}")
        data += chunk
    return data


def test_sigkill_leaves_whole_batches_only(store_dir: Path) -> None:
    """Killed at random moments, a run holds every printed batch whole and no part of a batch."""
    rng = random.Random(20240917)
    for _ in range(5):
        run_id = new_run_id()
        proc = subprocess.Popen(
            [PYTHON, "-c", KILLED_CHILD, str(store_dir), run_id, str(rng.getrandbits(32))],
            env=subprocess_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        data = read_lines(proc, rng.randint(1, 40))
        time.sleep(rng.uniform(0, 0.02))  # land anywhere in the next batches
        proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=CHILD_TIMEOUT)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        data += rest
        printed = [
            json.loads(line)
            for line in data.decode().splitlines(keepends=True)
            if line.endswith("\n")
        ]

        history = loaded(run_id, store_dir)
        assert [c.seq for c in history.claims] == list(range(1, len(history.claims) + 1))
        stored = [c.effect_id for c in history.claims]
        # Every printed batch is there, whole and in order.
        flat = [effect_id for batch in printed for effect_id in batch]
        assert stored[: len(flat)] == flat
        # Whatever else is there is the one batch in flight, whole: never part of one.
        batches: dict[int, list[int]] = {}
        sizes: dict[int, int] = {}
        for effect_id in stored:
            match = BATCH_ID.fullmatch(effect_id)
            assert match is not None, effect_id
            k, j, n = map(int, match.groups())
            batches.setdefault(k, []).append(j)
            sizes[k] = n
        assert list(batches) == list(range(len(batches)))
        for k, members in batches.items():
            assert members == list(range(sizes[k])), f"batch {k} is partial: {members}"
        assert len(batches) - len(printed) in {0, 1}
