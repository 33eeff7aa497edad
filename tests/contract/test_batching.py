"""Batches: ``EffectLog.claim_many`` and ``EffectLog.outcome_many``.

A batch is one transaction: every item is checked before anything is written, and then
all of it is durable or none of it is. These tests check that on a real store of each
backend, against real faults: a store that cannot be reached while a batch is written,
and a child process killed with ``SIGKILL`` between and inside batches. What the store
holds is read back with ``EffectLog.load`` and through the backend's test driver, which
also counts the store's transactions. A store directory replaced by a file and a full
disk are the SQLite backend's (``tests/sqlite/test_batching.py``).
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger import storage
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    OutcomeRequest,
    new_run_id,
)
from ledger.errors import LogDegradedError, StoreFileRefusedError, StoreUnavailableError
from tests.backends import Backend, writes_nothing
from tests.builders import (
    CERTAIN,
    CHILD_TIMEOUT,
    FAILED,
    INTERRUPTED,
    NONE,
    POSSIBLE,
    PYTHON,
    REPO,
    RUNNING,
    SUCCESS,
    claim_request,
    claim_requests,
    fs_ref,
    loaded,
    op,
    outcome_request,
    read_lines,
    see,
    subprocess_env,
)

DISK_ERROR = r"(?i)disk|I/O|full|too large"


# --------------------------------------------------------------------------- helpers


def stored_effect_ids(backend: Backend, store: Path) -> set[str]:
    """Every effect id with a claim row in the store, in any run."""
    return {effect_id for (effect_id,) in backend.query(store, "SELECT effect_id FROM claims")}


# --------------------------------------------------------------------------- claim_many


def test_claim_many_takes_consecutive_seqs_in_request_order(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """The claims take consecutive seqs in request order, are in history, and are durable on return."""
    with EffectLog(run_id, store_dir) as log:
        (first,) = log.claim_many(claim_requests("e0"))
        batch = claim_requests("z", "a", "m", "b")  # not sorted: request order is what counts
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
        assert stored_effect_ids(backend, store_dir) == {"e0", "z", "a", "m", "b"}
        assert loaded(run_id, store_dir) == log.history()
        after = log.claim(
            effect_id="next", action_id="a", operation=op(), impact_scope=[fs_ref("/sandbox/n")]
        )
        assert after.seq == 6
        history = log.history()
    assert loaded(run_id, store_dir) == history
    counts = backend.row_counts(store_dir)
    assert (counts["claims"], counts["scope_index"]) == (6, 11)
    entries = [
        backend.query(store_dir, f"SELECT count(*) FROM {view}")[0][0]
        for view in ("impact_scope", "obligations")
    ]
    assert entries == [11, 5]


def test_claim_many_is_one_transaction(backend: Backend, store_dir: Path, run_id: str) -> None:
    """A batch of claims, and the observations made before it, is one commit in the WAL."""
    with EffectLog(new_run_id(), store_dir) as other:  # creates and migrates the store
        other.claim_many(claim_requests("x"))
        with EffectLog(run_id, store_dir) as log:
            see(log, "o1", exists=False)
            see(log, "o2", exists=False)
            before = backend.commits(store_dir)
            claims = log.claim_many(claim_requests(*(f"e{i}" for i in range(20))))
            assert backend.commits(store_dir) == before + 1
            many = log.claim_many(claim_requests("f1", "f2"))
            assert backend.commits(store_dir) == before + 2
            single = log.claim(effect_id="g", action_id="a", operation=op(), impact_scope=())
            assert backend.commits(store_dir) == before + 3
    assert [c.seq for c in claims] == list(range(3, 23))
    assert [c.seq for c in (*many, single)] == [23, 24, 25]


def test_empty_claim_many_writes_nothing(backend: Backend, tmp_path: Path, run_id: str) -> None:
    """An empty batch returns () and creates no file; on a started run it changes nothing."""
    store = backend.location(tmp_path)
    with EffectLog(run_id, store) as log:
        assert log.claim_many([]) == ()
        assert log.claim_many(iter(())) == ()
        assert log.history() == fx.History()
        assert list(tmp_path.iterdir()) == []
        log.claim_many(claim_requests("e1"))
        with writes_nothing(backend, store, log):
            assert log.claim_many(()) == ()
        assert log.claim_many(claim_requests("e2"))[0].seq == 2


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
    batch = claim_requests("b0", "b1", "b2", "b3")
    batch[position] = claim_request(f"b{position}", **change)
    return batch


@pytest.mark.parametrize("position", [0, 2, 3], ids=["first", "middle", "last"])
@pytest.mark.parametrize(("change", "error"), BAD_ITEMS)
def test_a_bad_item_anywhere_writes_nothing(
    change: dict[str, Any],
    error: type[Exception],
    position: int,
    store_dir: Path,
    run_id: str,
    *,
    backend: Backend,
) -> None:
    """A bad item anywhere in a batch raises before anything of the batch is written."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1"))
        with writes_nothing(backend, store_dir, log):
            batch = _bad_batch(position, change)
            with pytest.raises(error, match=next(iter(change))):
                log.claim_many(batch)
        assert stored_effect_ids(backend, store_dir) == {"e1"}
        # No seq was spent, and no id of the refused batch is taken.
        assert [c.seq for c in log.claim_many(claim_requests("b0", "b1"))] == [2, 3]
    assert [c.effect_id for c in loaded(run_id, store_dir).claims] == ["e1", "b0", "b1"]


@pytest.mark.parametrize(("change", "error"), BAD_ITEMS)
def test_a_bad_first_batch_creates_nothing(
    backend: Backend, change: dict[str, Any], error: type[Exception], tmp_path: Path, run_id: str
) -> None:
    """A run's first batch with a bad last item creates no store, and its observations wait."""
    store = backend.location(tmp_path)
    with EffectLog(run_id, store) as log:
        observation = see(log, "o1", exists=False)
        batch = _bad_batch(3, change)
        with pytest.raises(error, match=next(iter(change))):
            log.claim_many(batch)
        assert list(tmp_path.iterdir()) == []
        assert log.history() == fx.History(observations=(observation,))
        assert [c.seq for c in log.claim_many(claim_requests("b0"))] == [2]
    assert loaded(run_id, store).observations == (observation,)


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(
            {"effect_id": "b9", "action_id": "a", "operation": op(), "impact_scope": ()}, id="dict"
        ),
        pytest.param(None, id="none"),
        pytest.param(outcome_request("b0"), id="outcome-request"),
        pytest.param(("b9", "a", op(), ()), id="tuple"),
    ],
)
def test_an_item_that_is_not_a_claim_request_is_a_type_error(
    backend: Backend, item: object, store_dir: Path, run_id: str
) -> None:
    """An item that is not a ClaimRequest is a TypeError, wherever it is, and nothing is written."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1"))
        with writes_nothing(backend, store_dir, log):
            for position in (0, 2):
                batch: list[object] = [*claim_requests("b0", "b1"), *claim_requests("b2")]
                batch.insert(position, item)
                with pytest.raises(TypeError, match="ClaimRequest"):
                    log.claim_many(batch)  # type: ignore[arg-type]
        assert log.claim_many(claim_requests("b0"))[0].seq == 2


def test_duplicate_effect_ids_are_refused_whole(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """An id twice in a batch, or an id claimed before (also after a restart), refuses the batch."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1", "e2"))
        for batch in (
            claim_requests("n1", "n2", "n1"),  # twice in the batch
            claim_requests("n1", "n2", "e2"),  # claimed by an earlier batch
            [claim_request("n1"), claim_request("n2", action_id="other"), claim_request("n2")],
        ):
            with (
                writes_nothing(backend, store_dir, log),
                pytest.raises(ValueError, match="already claimed"),
            ):
                log.claim_many(batch)
    with EffectLog.load(run_id, store_dir) as again:
        with pytest.raises(ValueError, match="e1"):
            again.claim_many(claim_requests("n1", "e1"))
        assert [c.seq for c in again.claim_many(claim_requests("n1", "n2"))] == [3, 4]
    assert stored_effect_ids(backend, store_dir) == {"e1", "e2", "n1", "n2"}


# --------------------------------------------------------------------------- observations


def test_observations_before_the_first_batch_are_written_with_it(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """Observations made before a run's first batch are written in its transaction, at their seqs."""
    with EffectLog(run_id, store_dir) as log:
        o1, o2 = see(log, "o1", exists=False), see(log, "o2", exists=False)
        assert not backend.exists(store_dir)
        claims = log.claim_many(claim_requests("e1", "e2"))
        assert [r.seq for r in (o1, o2, *claims)] == [1, 2, 3, 4]
        assert backend.row_counts(store_dir)["observations"] == 2
        history = log.history()
    assert loaded(run_id, store_dir) == history
    assert loaded(run_id, store_dir).observations == (o1, o2)


def test_observations_wait_for_a_batch_that_succeeds(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """When the first batch cannot be written its observations are not either; the retry writes both."""
    with EffectLog(new_run_id(), store_dir) as other:
        other.claim_many(claim_requests("x"))
    with EffectLog(run_id, store_dir) as log:
        o1 = see(log, "o1", exists=False)
        # SQLite's store is made unreachable by a file where its directory was, which the
        # trust checks refuse; PostgreSQL's by a database that takes no connections.
        with (
            backend.unavailable(store_dir),
            pytest.raises((StoreUnavailableError, StoreFileRefusedError)),
        ):
            log.claim_many(claim_requests("e1", "e2"))
        assert backend.row_counts(store_dir)["observations"] == 0
        claims = log.claim_many(claim_requests("e1", "e2"))
        assert [r.seq for r in (o1, *claims)] == [1, 2, 3]
    assert loaded(run_id, store_dir).observations == (o1,)


# --------------------------------------------------------------------------- outcome_many


@pytest.fixture
def claimed(store_dir: Path, run_id: str) -> Iterator[EffectLog]:
    """A log whose run claimed e1, e2 and e3 (seqs 1-3)."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1", "e2", "e3"))
        yield log


def test_outcome_many_records_in_order_with_consecutive_seqs(
    claimed: EffectLog, store_dir: Path
) -> None:
    """Outcomes take consecutive seqs in request order; RUNNING then terminal in one batch is fine."""
    batch = [
        outcome_request("e2", FAILED, impact=NONE, execution_id="x2"),
        outcome_request("e1", RUNNING, impact=POSSIBLE, execution_id="job-1"),
        outcome_request("e1", SUCCESS),
        outcome_request("e3", RUNNING, impact=NONE),
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
        claimed.outcome_many([outcome_request("e1", FAILED, impact=NONE)])
    (last,) = claimed.outcome_many([outcome_request("e3", INTERRUPTED, impact=POSSIBLE)])
    assert last.seq == 8
    assert claimed.outcome_many([]) == ()
    assert loaded(claimed.run_id, store_dir) == claimed.history()


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(
            [
                outcome_request("e1"),
                outcome_request("e2"),
                outcome_request("e1", FAILED, impact=NONE),
            ],
            id="two-terminal",
        ),
        pytest.param(
            [outcome_request("e1"), outcome_request("e1", RUNNING, impact=NONE)],
            id="running-after-terminal",
        ),
        pytest.param(
            [outcome_request("e1"), outcome_request("e9"), outcome_request("e2")],
            id="unknown-effect",
        ),
        pytest.param(
            [outcome_request("e1"), outcome_request("e2", INTERRUPTED, impact=CERTAIN)],
            id="interrupted-certain",
        ),
        pytest.param(
            [outcome_request("e1"), outcome_request("e2", INTERRUPTED, impact=NONE)],
            id="interrupted-none",
        ),
        pytest.param(
            [outcome_request("e1"), outcome_request("e2", execution_id="")], id="execution_id-empty"
        ),
        pytest.param([outcome_request("e1"), outcome_request("")], id="effect_id-empty"),
        pytest.param(
            [outcome_request("e1"), outcome_request("e3"), outcome_request("settled")],
            id="already-settled",
        ),
    ],
)
def test_a_bad_outcome_anywhere_writes_nothing(
    backend: Backend, batch: list[OutcomeRequest], store_dir: Path, run_id: str
) -> None:
    """A batch of outcomes with one bad item is a ValueError; nothing is written or degraded."""
    with EffectLog(run_id, store_dir) as log:
        log.claim_many(claim_requests("e1", "e2", "e3", "settled"))
        log.outcome_many([outcome_request("settled")])
        with writes_nothing(backend, store_dir, log), pytest.raises(ValueError):
            log.outcome_many(batch)
        assert not log.degraded
        # Every effect is still open, and no seq was spent.
        outcomes = log.outcome_many(
            [outcome_request("e1"), outcome_request("e2"), outcome_request("e3")]
        )
        assert [o.seq for o in outcomes] == [6, 7, 8]
        assert loaded(run_id, store_dir) == log.history()


@pytest.mark.parametrize(
    ("item", "error"),
    [
        pytest.param({"effect_id": "e1"}, "OutcomeRequest", id="dict"),
        pytest.param(claim_request("e1"), "OutcomeRequest", id="claim-request"),
        pytest.param(outcome_request("e1", "reported_success"), "execution", id="execution-str"),
        pytest.param(outcome_request("e1", impact="certain"), "impact", id="impact-str"),
    ],
)
def test_a_wrong_type_in_outcome_many_is_a_type_error(
    backend: Backend, claimed: EffectLog, store_dir: Path, item: object, error: str
) -> None:
    """A wrong type anywhere in a batch of outcomes is a TypeError, and nothing is written."""
    with writes_nothing(backend, store_dir, claimed), pytest.raises(TypeError, match=error):
        claimed.outcome_many([outcome_request("e2"), item])  # type: ignore[list-item]
    assert claimed.outcome_many([outcome_request("e2")])[0].seq == 4


def test_outcome_many_that_cannot_be_persisted_degrades_the_log(
    backend: Backend, claimed: EffectLog, store_dir: Path
) -> None:
    """Outcomes the store refuses degrade the log: kept in memory, no raise, and no claim after."""
    durable = claimed.history()
    with backend.unavailable(store_dir):
        outcomes = claimed.outcome_many(
            [outcome_request("e1", RUNNING, impact=POSSIBLE), outcome_request("e1")]
        )
        assert claimed.degraded
        assert claimed.history().outcomes == outcomes
        assert [o.seq for o in outcomes] == [4, 5]
        assert claimed.assess("e1").execution is SUCCESS  # in memory only
        with pytest.raises(LogDegradedError, match="degraded"):
            claimed.claim_many(claim_requests("e4"))
        with pytest.raises(LogDegradedError, match="degraded"):
            claimed.claim(effect_id="e5", action_id="a", operation=op(), impact_scope=())
    # The store is back, but the log stays degraded: nothing more is written.
    with pytest.raises(LogDegradedError, match="degraded"):
        claimed.claim_many(claim_requests("e4"))
    more = claimed.outcome_many([outcome_request("e2")])  # accepted in memory, not written
    assert claimed.history().outcomes == (*outcomes, *more)
    assert loaded(claimed.run_id, store_dir) == durable
    assert backend.row_counts(store_dir)["outcomes"] == 0
    with EffectLog.load(claimed.run_id, store_dir) as again:
        assert again.assess("e1").verdict is fx.EffectVerdict.PENDING


def test_a_degraded_log_never_tries_the_store_again(
    backend: Backend, claimed: EffectLog, store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Degraded is sticky: once the store is back, not one more transaction is even begun.

    The schema would refuse what a degraded log wrote (its in-memory records left a gap
    in the run's seqs), so what the store holds cannot show whether the log tried:
    the batches it hands the store are counted instead.
    """
    with backend.unavailable(store_dir):
        claimed.outcome_many([outcome_request("e1")])
    assert claimed.degraded
    tried: list[str] = []
    shared = storage.backend(store_dir).acquire(store_dir)  # the store the log writes to
    storage.backend(store_dir).release(shared)
    append = type(shared).append

    def counted(self: storage.Store, batch: storage.Batch) -> storage.Written:
        tried.append(batch.action)
        return append(self, batch)

    monkeypatch.setattr(type(shared), "append", counted)
    claimed.outcome_many([outcome_request("e2")])
    claimed.outcome(effect_id="e3", execution=SUCCESS, impact=fx.Impact.CERTAIN)
    claimed.observe(
        observation_id="o-late",
        resource=fs_ref("/w/a"),
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="s",
    )
    with pytest.raises(LogDegradedError, match="degraded"):
        claimed.claim_many(claim_requests("e9"))
    with pytest.raises(LogDegradedError, match="degraded"):
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
                claim_request("w1", impact_scope=(a,), obligations=(fx.Postcondition(a, exists),)),
                claim_request("w2", impact_scope=(b,), obligations=(fx.Postcondition(b, exists),)),
                claim_request("w3", impact_scope=(a, b), obligations=()),
                claim_request("w4", impact_scope=(b,), obligations=(fx.Postcondition(b, exists),)),
            ]
        )
        log.outcome_many(
            [
                outcome_request("w1"),
                outcome_request("w2", RUNNING, impact=POSSIBLE),
                outcome_request("w2", FAILED, impact=NONE),
                outcome_request("w3", INTERRUPTED, impact=POSSIBLE),
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
