"""Behaviour of ``ledger.effect_log``: the durable log of one run (API.md, points 1-3, 5-7).

Durability under faults, file trust, concurrency and the schema have their own
modules; these tests pin the public behaviour of one :class:`EffectLog` against
real store directories in ``tmp_path``, and check what is on disk with the stock
``sqlite3`` module opened read-only, the way an operator would.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import signal
import sqlite3
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import _inspect
from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, effects_dir, new_run_id
from ledger.errors import (
    LogDegradedError,
    RunHeldError,
    StoreTamperedError,
    StoreUnavailableError,
)
from ledger.resources import FilesystemRoot
from ledger.sqlite.commit import GroupCommit, Job
from tests.builders import file_ref, fs_ref, op, sha

EXISTS = fx.Predicate.EXISTS
RUNNING = fx.ExecutionOutcome.RUNNING
SUCCESS = fx.ExecutionOutcome.REPORTED_SUCCESS
FAILED = fx.ExecutionOutcome.FAILED
INTERRUPTED = fx.ExecutionOutcome.INTERRUPTED
NONE = fx.Impact.NONE
POSSIBLE = fx.Impact.POSSIBLE
CERTAIN = fx.Impact.CERTAIN
COMPLETE = fx.Coverage.COMPLETE
PARTIAL = fx.Coverage.PARTIAL
VERIFIED = fx.EffectVerdict.VERIFIED
UNVERIFIED = fx.EffectVerdict.UNVERIFIED
PENDING = fx.EffectVerdict.PENDING

A = fs_ref("/sandbox/a.txt")
B = fs_ref("/sandbox/b.txt")


# --------------------------------------------------------------------------- helpers


def row_counts(db: Path) -> dict[str, int]:
    """Rows in every table of the store, read with plain sqlite3 in read-only mode."""
    with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def stored_runs(db: Path) -> set[str]:
    """The run ids the store holds, read with plain sqlite3 in read-only mode."""
    with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return {run for (run,) in conn.execute("SELECT run_id FROM runs")}


def tree(path: Path) -> set[Path]:
    """Every file and directory under ``path``."""
    return set(path.rglob("*"))


def claim_write(
    log: EffectLog,
    effect_id: str = "e1",
    ref: fx.ResourceRef = A,
    *,
    action_id: str = "a1",
    obligations: tuple[fx.Postcondition, ...] | None = None,
) -> fx.EffectClaim:
    """Claim a write of ``ref`` that should leave it existing."""
    if obligations is None:
        obligations = (fx.Postcondition(ref, EXISTS),)
    return log.claim(
        effect_id=effect_id,
        action_id=action_id,
        operation=op(args=effect_id.encode()),
        impact_scope=(ref,),
        obligations=obligations,
    )


def settle(
    log: EffectLog,
    effect_id: str = "e1",
    execution: fx.ExecutionOutcome = SUCCESS,
    impact: fx.Impact = CERTAIN,
) -> fx.EffectOutcome:
    """Record an outcome of ``effect_id``."""
    return log.outcome(effect_id=effect_id, execution=execution, impact=impact)


def see(
    log: EffectLog,
    observation_id: str,
    ref: fx.ResourceRef = A,
    *,
    exists: bool | None = True,
    coverage: fx.Coverage = COMPLETE,
) -> fx.Observation:
    """Record a stat of ``ref``."""
    return log.observe(
        observation_id=observation_id,
        resource=ref,
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=coverage,
        source_action_id="look",
        exists=exists,
    )


@pytest.fixture
def other_run(store_dir: Path) -> str:
    """A run with a claim, an outcome and an observation already in ``store_dir``."""
    run = new_run_id()
    with EffectLog(run, store_dir) as log:
        claim_write(log)
        settle(log)
        see(log, "o1")
    return run


# --------------------------------------------------------------------------- 1. runs


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("0123456789ABCDEF0123456789ABCDEF", id="uppercase"),
        pytest.param("a" * 31, id="31-chars"),
        pytest.param("a" * 33, id="33-chars"),
        pytest.param("g" * 32, id="non-hex"),
        pytest.param("0123456789abcdef-123456789abcdef", id="dash"),
        pytest.param("", id="empty"),
        pytest.param("a" * 32 + "\n", id="trailing-newline"),
        pytest.param(" " + "a" * 31, id="leading-space"),
    ],
)
def test_run_id_must_be_32_lowercase_hex(bad: str, store_dir: Path) -> None:
    """A run id that is not 32 lowercase hex characters is a ValueError, for a new or loaded log."""
    with pytest.raises(ValueError, match="run_id"):
        EffectLog(bad, store_dir)
    with pytest.raises(ValueError, match="run_id"):
        EffectLog.load(bad, store_dir)
    assert not store_dir.exists()


@pytest.mark.parametrize("bad", [None, 123, b"0" * 32, ["0" * 32]], ids=repr)
def test_run_id_must_be_a_str(bad: object, store_dir: Path) -> None:
    """A run id that is not a str is refused with TypeError or ValueError."""
    with pytest.raises((TypeError, ValueError)):
        EffectLog(bad, store_dir)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError)):
        EffectLog.load(bad, store_dir)  # type: ignore[arg-type]
    assert not store_dir.exists()


def test_construction_writes_nothing(tmp_path: Path, run_id: str) -> None:
    """Constructing a log creates neither the store directory, its parents nor the default store."""
    store = tmp_path / "deep" / "er" / "store"
    before = tree(tmp_path)
    log = EffectLog(run_id, store)
    default = EffectLog(new_run_id())
    assert tree(tmp_path) == before
    assert not log.path.exists()
    assert not effects_dir().exists()
    assert not default.path.exists()
    log.close()
    default.close()
    assert tree(tmp_path) == before
    assert not effects_dir().exists()


def test_new_log_on_an_existing_run_refuses_its_first_write(store_dir: Path, run_id: str) -> None:
    """A new EffectLog on a run the store holds raises on its first write and writes nothing."""
    with EffectLog(run_id, store_dir) as first:
        claim_write(first)
        settle(first)
    db = store_dir / "ledger.sqlite3"
    before = row_counts(db)

    with EffectLog(run_id, store_dir) as second:
        see(second, "o-early", B)  # kept for the first claim's transaction
        with pytest.raises(EffectPersistenceError):
            claim_write(second, "e2", B)
        assert second.history().claims == ()
        with pytest.raises(EffectPersistenceError):  # and again: still nothing written
            claim_write(second, "e3", B)
        assert second.history().claims == ()
    assert row_counts(db) == before

    with EffectLog.load(run_id, store_dir) as again:  # load is how a run continues
        assert [r.seq for r in again.history().records()] == [1, 2]
        assert claim_write(again, "e2", B).seq == 3
    assert row_counts(db)["claims"] == before["claims"] + 1


def test_runs_in_one_store_are_independent(store_dir: Path) -> None:
    """History, assessment, staleness and recovery of a run ignore another run on the same file."""
    run_a, run_b = new_run_id(), new_run_id()
    with EffectLog(run_a, store_dir) as log_a, EffectLog(run_b, store_dir) as log_b:
        claim_write(log_a, "e1")
        settle(log_a, "e1")
        see(log_a, "o1")
        verified = log_a.assess("e1")
        assert verified.verdict is VERIFIED

        # Run B reuses the ids and claims the same file, leaving its claim in flight.
        claim_write(log_b, "e1")
        see(log_b, "o1", exists=False)
        claim_write(log_a, "e2", B)  # an unsettled claim of run A, on another file

        assert log_a.assess("e1") == verified
        assert log_a.assess("e1").stale == ()
        assert [r.seq for r in log_a.history().records()] == [1, 2, 3, 4]
        assert [r.seq for r in log_b.history().records()] == [1, 2]
        history_a = log_a.history()

        recovered = log_b.recover_interrupted()
        assert [o.effect_id for o in recovered] == ["e1"]

    with EffectLog.load(run_a, store_dir) as again_a:
        assert again_a.history() == history_a
        assert again_a.assess("e1") == verified
        assert [o.effect_id for o in again_a.recover_interrupted()] == ["e2"]
    with EffectLog.load(run_b, store_dir) as again_b:
        assert [c.effect_id for c in again_b.history().claims] == ["e1"]
        assert again_b.recover_interrupted() == ()
        assert again_b.assess("e1").verdict is UNVERIFIED


def test_new_run_id_is_32_lowercase_hex_and_unique() -> None:
    """new_run_id returns 32 lowercase hex characters, different every time."""
    ids = [new_run_id() for _ in range(2000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    EffectLog(ids[0]).close()  # a generated id is always accepted


def test_effects_dir_honours_ledger_dir(
    tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """effects_dir() is $LEDGER_DIR, and a log without a directory writes its store there."""
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path / "mine"))
    assert effects_dir() == tmp_path / "mine"
    with EffectLog(run_id) as log:
        assert log.path == tmp_path / "mine" / "ledger.sqlite3"
        claim_write(log)
    assert stored_runs(tmp_path / "mine" / "ledger.sqlite3") == {run_id}
    with EffectLog.load(run_id) as again:
        assert [c.effect_id for c in again.history().claims] == ["e1"]


def test_effects_dir_defaults_to_the_users_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without $LEDGER_DIR, effects_dir() is an absolute path in the user's home, not created."""
    monkeypatch.delenv("LEDGER_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    default = effects_dir()
    assert default.is_absolute()
    assert tmp_path in default.parents
    assert not default.exists()


# --------------------------------------------------------------------------- 2. claim


def test_claim_returns_what_load_reads_back(store_dir: Path, run_id: str) -> None:
    """The record claim returns is durable when it returns and equals what load reads back."""
    scope = (A, fs_ref("/sandbox/dir", role="parent"), fx.ResourceRef("owned", "svc/n/1", "r", "7"))
    duties = (
        fx.Postcondition(A, fx.Predicate.SHA256, sha(b"hello")),
        fx.Postcondition(fs_ref("/sandbox/old.txt"), fx.Predicate.ABSENT),
        fx.Postcondition(scope[2], fx.Predicate.REVISION, "8"),
    )
    with EffectLog(run_id, store_dir) as log:
        claim = log.claim(
            effect_id="é" * 200,  # longest identifier, not ASCII
            action_id="act 1",
            operation=fx.OperationRef("write_file", "", sha(b'{"path": "a.txt"}')),
            impact_scope=iter(scope),  # any iterable, kept as a tuple
            obligations=list(duties),
        )
        assert claim.seq == 1
        assert claim.impact_scope == scope
        assert claim.obligations == duties
        assert datetime.fromisoformat(claim.recorded_at).utcoffset() == UTC.utcoffset(None)
        assert log.history() == fx.History(claims=(claim,))
        # Committed before claim returned: a plain read-only reader sees it now.
        assert row_counts(log.path)["claims"] == 1
        with EffectLog.load(run_id, store_dir) as reader:
            assert reader.history().claims == (claim,)
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().claims == (claim,)


def test_duplicate_effect_id_is_a_value_error(store_dir: Path, run_id: str) -> None:
    """A second claim of an effect_id in the run is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log, "e1")
        before, history = row_counts(log.path), log.history()
        with pytest.raises(ValueError, match="e1"):
            claim_write(log, "e1", B, action_id="other")
        assert row_counts(log.path) == before
        assert log.history() == history
        assert claim_write(log, "e2").seq == 2  # no seq was spent
    with EffectLog.load(run_id, store_dir) as again:
        with pytest.raises(ValueError, match="e1"):  # also across a restart
            claim_write(again, "e1")
        assert again.history().claims[0].impact_scope == (A,)


GOOD_CLAIM: dict[str, Any] = {
    "effect_id": "e9",
    "action_id": "a9",
    "operation": op(),
    "impact_scope": (A,),
    "obligations": (fx.Postcondition(A, EXISTS),),
}

BAD_CLAIMS = [
    pytest.param({"effect_id": ""}, ValueError, id="effect_id-empty"),
    pytest.param({"effect_id": "x" * 201}, ValueError, id="effect_id-201-chars"),
    pytest.param({"effect_id": "a\x00b"}, ValueError, id="effect_id-nul"),
    pytest.param({"effect_id": "a\nb"}, ValueError, id="effect_id-newline"),
    pytest.param({"effect_id": 7}, TypeError, id="effect_id-int"),
    pytest.param({"effect_id": None}, TypeError, id="effect_id-none"),
    pytest.param({"action_id": ""}, ValueError, id="action_id-empty"),
    pytest.param({"action_id": "y" * 201}, ValueError, id="action_id-201-chars"),
    pytest.param({"action_id": "\x1b[31m"}, ValueError, id="action_id-escape"),
    pytest.param({"action_id": b"a1"}, TypeError, id="action_id-bytes"),
    pytest.param({"operation": "write_file"}, TypeError, id="operation-str"),
    pytest.param({"operation": op().to_dict()}, TypeError, id="operation-dict"),
    pytest.param({"operation": None}, TypeError, id="operation-none"),
    pytest.param({"impact_scope": "/sandbox/a.txt"}, TypeError, id="scope-str"),
    pytest.param({"impact_scope": A}, TypeError, id="scope-bare-ref"),
    pytest.param({"impact_scope": ["/sandbox/a.txt"]}, TypeError, id="scope-of-str"),
    pytest.param({"impact_scope": [A.to_dict()]}, TypeError, id="scope-of-dict"),
    pytest.param({"impact_scope": {A: "x"}}, TypeError, id="scope-mapping"),
    pytest.param({"impact_scope": None}, TypeError, id="scope-none"),
    pytest.param({"obligations": [A]}, TypeError, id="obligations-of-ref"),
    pytest.param({"obligations": "exists"}, TypeError, id="obligations-str"),
    pytest.param(
        {"obligations": fx.Postcondition(A, EXISTS)}, TypeError, id="obligations-bare-postcondition"
    ),
    pytest.param({"obligations": None}, TypeError, id="obligations-none"),
]


@pytest.mark.parametrize(("change", "error"), BAD_CLAIMS)
def test_bad_first_claim_creates_nothing(
    change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """A first claim with a bad argument raises before anything, not even the store, is created."""
    with EffectLog(run_id, store_dir) as log:
        with pytest.raises(error):
            log.claim(**{**GOOD_CLAIM, **change})
        assert log.history() == fx.History()
        assert not store_dir.exists()


@pytest.mark.parametrize(("change", "error"), BAD_CLAIMS)
def test_bad_claim_writes_nothing(
    change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """A claim with a bad argument raises, leaving history, rows and the seq counter untouched."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        before, history = row_counts(log.path), log.history()
        with pytest.raises(error):
            log.claim(**{**GOOD_CLAIM, **change})
        assert log.history() == history
        assert row_counts(log.path) == before
        assert log.claim(**GOOD_CLAIM).seq == 2


# --------------------------------------------------------------------------- 3. outcome


def test_outcome_needs_a_claimed_effect(store_dir: Path, run_id: str) -> None:
    """An outcome for an effect_id the run never claimed is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        with pytest.raises(ValueError, match="e1"):  # before any claim: not even a store
            settle(log, "e1")
        assert not store_dir.exists()
        claim_write(log, "e1")
        before, history = row_counts(log.path), log.history()
        with pytest.raises(ValueError, match="e2"):
            settle(log, "e2")
        assert log.history() == history
        assert row_counts(log.path) == before
        assert not log.degraded


@pytest.mark.parametrize(
    ("execution", "impact"),
    [
        (SUCCESS, CERTAIN),
        (SUCCESS, NONE),
        (FAILED, NONE),
        (FAILED, POSSIBLE),
        (INTERRUPTED, POSSIBLE),
    ],
)
def test_nothing_follows_a_terminal_outcome(
    execution: fx.ExecutionOutcome, impact: fx.Impact, store_dir: Path, run_id: str
) -> None:
    """After a terminal outcome any further outcome is a ValueError, in this process and after load."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        settle(log, "e1", execution, impact)
        before, history = row_counts(log.path), log.history()
        for later_execution, later_impact in [
            (RUNNING, POSSIBLE),
            (SUCCESS, CERTAIN),
            (execution, impact),
        ]:
            with pytest.raises(ValueError, match="e1"):
                settle(log, "e1", later_execution, later_impact)
        assert log.history() == history
        assert row_counts(log.path) == before
    with EffectLog.load(run_id, store_dir) as again:
        with pytest.raises(ValueError, match="e1"):
            settle(again, "e1", FAILED, NONE)
        assert again.history() == history


def test_running_may_be_followed_by_a_terminal_outcome(store_dir: Path, run_id: str) -> None:
    """RUNNING is not terminal: a terminal outcome after it is accepted and decides the verdict."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        running = log.outcome(
            effect_id="e1", execution=RUNNING, impact=POSSIBLE, execution_id="job-7"
        )
        assert log.assess("e1").verdict is PENDING
        done = settle(log, "e1", SUCCESS, CERTAIN)
        assert (running.seq, done.seq) == (2, 3)
        assert log.history().outcomes == (running, done)
        assessment = log.assess("e1")
        assert (assessment.execution, assessment.impact) == (SUCCESS, CERTAIN)
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().outcomes == (running, done)
        assert again.history().outcomes[0].execution_id == "job-7"


@pytest.mark.parametrize("impact", [NONE, CERTAIN])
def test_interrupted_needs_possible_impact(impact: fx.Impact, store_dir: Path, run_id: str) -> None:
    """An INTERRUPTED outcome with impact other than POSSIBLE is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        before, history = row_counts(log.path), log.history()
        with pytest.raises(ValueError, match=r"(?i)interrupted"):
            settle(log, "e1", INTERRUPTED, impact)
        assert log.history() == history
        assert row_counts(log.path) == before
        accepted = settle(log, "e1", INTERRUPTED, POSSIBLE)
        assert (accepted.seq, accepted.replayed) == (2, False)


def test_outcomes_written_by_outcome_are_never_replayed(store_dir: Path, run_id: str) -> None:
    """Every outcome `outcome` accepts has replayed False, in memory and after load."""
    combinations = [
        (execution, impact)
        for execution in fx.ExecutionOutcome
        for impact in fx.Impact
        if execution is not INTERRUPTED or impact is POSSIBLE
    ]
    with EffectLog(run_id, store_dir) as log:
        for i, (execution, impact) in enumerate(combinations):
            claim_write(log, f"e{i}")
            outcome = settle(log, f"e{i}", execution, impact)
            assert (outcome.execution, outcome.impact, outcome.replayed) == (
                execution,
                impact,
                False,
            )
        written = log.history().outcomes
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().outcomes == written
        assert not any(o.replayed for o in again.history().outcomes)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param({"execution": "reported_success"}, TypeError, id="execution-str"),
        pytest.param({"impact": "certain"}, TypeError, id="impact-str"),
        pytest.param({"impact": fx.EffectVerdict.VERIFIED}, TypeError, id="impact-verdict"),
        pytest.param({"execution_id": ""}, ValueError, id="execution_id-empty"),
        pytest.param({"execution_id": 5}, TypeError, id="execution_id-int"),
        pytest.param({"effect_id": ""}, ValueError, id="effect_id-empty"),
    ],
)
def test_bad_outcome_writes_nothing(
    change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """An outcome with a bad argument raises and writes nothing; the effect stays open."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        before, history = row_counts(log.path), log.history()
        with pytest.raises(error):
            log.outcome(**{"effect_id": "e1", "execution": SUCCESS, "impact": CERTAIN, **change})
        assert log.history() == history
        assert row_counts(log.path) == before
        assert settle(log).seq == 2


# --------------------------------------------------------------------------- 5. observe-only


def test_a_run_that_only_observes_creates_nothing(tmp_path: Path, run_id: str) -> None:
    """A run that observes but never claims creates no file or directory, here or in the default store."""
    before = tree(tmp_path)
    with EffectLog(run_id, tmp_path / "store") as log, EffectLog(new_run_id()) as default:
        for i in range(3):
            see(log, f"o{i}", exists=bool(i % 2))
            see(default, f"o{i}")
        assert [o.seq for o in log.history().observations] == [1, 2, 3]
    assert tree(tmp_path) == before
    assert not effects_dir().exists()
    with EffectLog.load(run_id, tmp_path / "store") as again:
        assert again.history() == fx.History()
    assert tree(tmp_path) == before


def test_a_run_that_only_observes_writes_no_row(
    store_dir: Path, run_id: str, other_run: str
) -> None:
    """In a store that exists, a run that only observes adds no row at all."""
    db = store_dir / "ledger.sqlite3"
    before = row_counts(db)
    with EffectLog(run_id, store_dir) as log:
        see(log, "o1")
        see(log, "o2", B)
    assert row_counts(db) == before
    assert stored_runs(db) == {other_run}


def test_observations_before_the_first_claim_are_written_with_it(
    store_dir: Path, run_id: str
) -> None:
    """Observations made before the first claim are written with it and keep their earlier seq."""
    with EffectLog(run_id, store_dir) as log:
        o1 = see(log, "o1", exists=False)
        o2 = see(log, "o2", B, coverage=PARTIAL)
        assert not store_dir.exists()
        claim = claim_write(log)
        assert (o1.seq, o2.seq, claim.seq) == (1, 2, 3)
        counts = row_counts(log.path)
        assert (counts["observations"], counts["claims"]) == (2, 1)
        o3 = see(log, "o3")  # after the first claim, written at once
        assert row_counts(log.path)["observations"] == 3
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.history().observations == (o1, o2, o3)
        assert again.history().claims == (claim,)


def test_observations_before_a_refused_first_claim_are_not_written(
    store_dir: Path, run_id: str, other_run: str
) -> None:
    """When the first claim cannot be written, the observations waiting for it are not written either."""
    db = store_dir / "ledger.sqlite3"
    before = row_counts(db)
    with EffectLog(other_run, store_dir) as log:  # a new log on an existing run: refused
        see(log, "o-new", B)
        with pytest.raises(EffectPersistenceError):
            claim_write(log, "e-new", B)
    assert row_counts(db) == before
    with EffectLog.load(other_run, store_dir) as again:
        assert "o-new" not in {o.observation_id for o in again.history().observations}


# --------------------------------------------------------------------------- 6. load


def test_load_of_a_missing_store_is_empty_and_creates_nothing(tmp_path: Path, run_id: str) -> None:
    """Loading from a store directory that does not exist, or holds no database, creates nothing."""
    before = tree(tmp_path)
    with EffectLog.load(run_id, tmp_path / "no" / "store") as log:
        assert log.history() == fx.History()
        assert log.recover_interrupted() == ()
    with EffectLog.load(run_id) as default:
        assert default.history() == fx.History()
    assert tree(tmp_path) == before
    assert not effects_dir().exists()

    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    with EffectLog.load(run_id, empty) as log:
        assert log.history() == fx.History()
    assert list(empty.iterdir()) == []


def test_load_of_an_unknown_run_is_empty_and_writes_nothing(
    store_dir: Path, run_id: str, other_run: str
) -> None:
    """Loading a run the store does not hold gives an empty history and adds no row."""
    db = store_dir / "ledger.sqlite3"
    before = row_counts(db)
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == fx.History()
        assert log.recover_interrupted() == ()
    assert row_counts(db) == before
    assert stored_runs(db) == {other_run}


def test_load_of_an_empty_run_then_claim_starts_it(store_dir: Path, run_id: str) -> None:
    """A loaded run with no rows is started by its first claim, at seq 1."""
    with EffectLog.load(run_id, store_dir) as log:
        see(log, "o1")
        assert claim_write(log).seq == 2
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history


def test_history_after_load_equals_history_before_close(
    store_dir: Path, run_id: str, sandbox: FilesystemRoot
) -> None:
    """Every field of every record comes back from load exactly as the log held it."""
    a, d = file_ref(sandbox, "a.txt"), file_ref(sandbox, "sub", role="dir")
    note = fx.ResourceRef("owned", "notes/alice/acme/inbox/n%2F1", "record", "r7")
    with EffectLog(run_id, store_dir) as log:
        log.observe(
            observation_id="o0",
            resource=note,
            mechanism=fx.ObservationMechanism.RECORD_READ,
            coverage=COMPLETE,
            source_action_id="read-note",
            exists=True,
            revision="r7",
        )
        log.claim(
            effect_id="e1",
            action_id="write-a",
            operation=op("write_file", b'{"path": "a.txt"}'),
            impact_scope=(a, d),
            obligations=(
                fx.Postcondition(a, fx.Predicate.SHA256, sha(b"data")),
                fx.Postcondition(file_ref(sandbox, "sub/gone"), fx.Predicate.ABSENT),
            ),
        )
        log.claim(
            effect_id="e2",
            action_id="edit-note",
            operation=fx.OperationRef("edit_note", "", sha(b"{}")),
            impact_scope=(note,),
            obligations=(fx.Postcondition(note, fx.Predicate.REVISION, "r8"),),
        )
        log.claim(effect_id="e3", action_id="noop", operation=op("noop"), impact_scope=())
        log.outcome(effect_id="e1", execution=RUNNING, impact=POSSIBLE, execution_id="x-1")
        log.outcome(effect_id="e1", execution=SUCCESS, impact=CERTAIN, execution_id="x-1")
        log.outcome(effect_id="e2", execution=FAILED, impact=NONE)
        for mechanism in fx.ObservationMechanism:
            log.observe(
                observation_id=f"o-{mechanism.value}",
                resource=a,
                mechanism=mechanism,
                coverage=PARTIAL,
                source_action_id="look",
                exists=None,
            )
        log.observe(
            observation_id="o-sha",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=COMPLETE,
            source_action_id="look",
            exists=True,
            sha256=sha(b"data"),
        )
        see(log, "o-gone", file_ref(sandbox, "sub/gone"), exists=False)
        log.recover_interrupted()
        history = log.history()
        assessments = {c.effect_id: log.assess(c.effect_id) for c in history.claims}
        assert [r.seq for r in history.records()] == list(range(1, 15))
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.history().to_dict() == history.to_dict()
        assert {c.effect_id: again.assess(c.effect_id) for c in history.claims} == assessments
    assert assessments["e1"].verdict is VERIFIED
    assert assessments["e2"].verdict is fx.EffectVerdict.FAILED


# A small random run: each step claims, settles or observes, always validly.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.sampled_from([A, B])),
        st.tuples(
            st.just("outcome"),
            st.sampled_from(
                [(RUNNING, POSSIBLE), (SUCCESS, CERTAIN), (FAILED, NONE), (INTERRUPTED, POSSIBLE)]
            ),
        ),
        st.tuples(
            st.just("observe"), st.sampled_from([A, B]), st.sampled_from([True, False, None])
        ),
        st.tuples(st.just("recover")),
    ),
    max_size=12,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # only the env var fixture
)
@given(steps=STEPS)
def test_any_run_reloads_equal(steps: list[tuple[Any, ...]]) -> None:
    """For any valid sequence of records, load gives back the same history and the same verdicts."""
    run_id = new_run_id()
    with tempfile.TemporaryDirectory() as tmp:
        with EffectLog(run_id, tmp) as log:
            claimed: list[str] = []
            for step in steps:
                if step[0] == "claim":
                    claimed.append(claim_write(log, f"e{len(claimed)}", step[1]).effect_id)
                elif step[0] == "outcome" and claimed:
                    open_ids = [
                        e
                        for e in claimed
                        if e not in {o.effect_id for o in log.history().outcomes if o.terminal}
                    ]
                    if open_ids:
                        settle(log, open_ids[0], *step[1])
                elif step[0] == "observe":
                    see(log, f"o{len(log.history().observations)}", step[1], exists=step[2])
                elif step[0] == "recover":
                    log.recover_interrupted()
            history = log.history()
            verdicts = {e: log.assess(e) for e in claimed}
        with EffectLog.load(run_id, tmp) as again:
            durable = again.history()
            if history.claims:
                assert durable == history
                assert {e: again.assess(e) for e in claimed} == verdicts
            else:  # nothing was claimed, so nothing was written
                assert durable == fx.History()


# --------------------------------------------------------------------------- 7. recovery


def test_recover_interrupted_marks_every_claim_without_an_outcome(
    store_dir: Path, run_id: str
) -> None:
    """Recovery appends INTERRUPTED / POSSIBLE / replayed for each claim with no outcome, in seq order."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log, "e1")  # 1: no outcome
        claim_write(log, "e2", B)  # 2
        settle(log, "e2", FAILED, NONE)  # 3
        claim_write(log, "e3")  # 4
        log.outcome(effect_id="e3", execution=RUNNING, impact=POSSIBLE)  # 5: left alone
        claim_write(log, "e4", B)  # 6: no outcome
        see(log, "o1")  # 7
    db = store_dir / "ledger.sqlite3"
    with EffectLog.load(run_id, store_dir) as log:
        before = row_counts(db)
        recovered = log.recover_interrupted()
        assert [(o.effect_id, o.seq) for o in recovered] == [("e1", 8), ("e4", 9)]
        for outcome in recovered:
            assert (outcome.execution, outcome.impact, outcome.replayed) == (
                INTERRUPTED,
                POSSIBLE,
                True,
            )
            assert outcome.execution_id is None
            assert outcome.recorded_at is not None
            assert datetime.fromisoformat(outcome.recorded_at).utcoffset() == UTC.utcoffset(None)
        assert log.history().outcomes[-2:] == recovered
        after = row_counts(db)
        assert after["outcomes"] == before["outcomes"] + 2
        assert {t: n for t, n in after.items() if t != "outcomes"} == {
            t: n for t, n in before.items() if t != "outcomes"
        }
        assert log.assess("e3").verdict is PENDING  # the RUNNING claim is untouched
        assert log.recover_interrupted() == ()
        assert row_counts(db) == after
        with pytest.raises(ValueError, match="e1"):  # recovery settled it
            settle(log, "e1")
        assert settle(log, "e3").seq == 10  # the running effect can still finish
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.recover_interrupted() == ()
    assert row_counts(db) == {**after, "outcomes": after["outcomes"] + 1}


def test_recover_interrupted_in_the_same_process(store_dir: Path, run_id: str) -> None:
    """Recovery also works on the log that made the claims, without a restart."""
    with EffectLog(run_id, store_dir) as log:
        assert log.recover_interrupted() == ()  # nothing claimed: nothing written
        assert not store_dir.exists()
        claim_write(log, "e1")
        (recovered,) = log.recover_interrupted()
        assert (recovered.effect_id, recovered.seq, recovered.replayed) == ("e1", 2, True)
        assert log.recover_interrupted() == ()
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history


def test_worked_example_of_assess(store_dir: Path, run_id: str, sandbox: FilesystemRoot) -> None:
    """assess's worked example (verified, stale, recovered, re-verified) through EffectLog and a restart, with real files."""
    target = sandbox.path / "a.txt"
    a = file_ref(sandbox, "a.txt")

    def read_a(log: EffectLog, observation_id: str) -> fx.Observation:
        data = target.read_bytes() if target.exists() else None
        return log.observe(
            observation_id=observation_id,
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=COMPLETE,
            source_action_id=f"read-{observation_id}",
            exists=data is not None,
            sha256=None if data is None else sha(data),
        )

    with EffectLog(run_id, store_dir) as log:
        e1 = log.claim(
            effect_id="e1",
            action_id="write-a",
            operation=op("write_file", b"hello\n"),
            impact_scope=(a,),
            obligations=(fx.Postcondition(a, EXISTS),),
        )
        target.write_bytes(b"hello\n")  # the tool call
        settle(log, "e1", SUCCESS, POSSIBLE)
        o1 = read_a(log, "o1")
        assert (e1.seq, o1.seq) == (1, 3)
        first = log.assess("e1")
        assert (first.verdict, first.evidence, first.stale) == (VERIFIED, ("o1",), ())

        e2 = log.claim(
            effect_id="e2",
            action_id="append-a",
            operation=op("append_file", b"more\n"),
            impact_scope=(a,),
            obligations=(fx.Postcondition(a, EXISTS),),
        )
        assert e2.seq == 4
        stale = log.assess("e1")
        assert (stale.verdict, stale.evidence, stale.stale) == (UNVERIFIED, (), ("o1",))
        with target.open("ab") as f:  # the worker dies inside the second tool call
            f.write(b"more\n")

    with EffectLog.load(run_id, store_dir) as log:
        (interrupted,) = log.recover_interrupted()
        assert (interrupted.effect_id, interrupted.seq) == ("e2", 5)
        after_crash = log.assess("e2")
        assert after_crash.verdict is UNVERIFIED
        assert after_crash.unresolved_impact
        assert (after_crash.execution, after_crash.impact) == (INTERRUPTED, POSSIBLE)
        still = log.assess("e1")
        assert (still.verdict, still.stale) == (UNVERIFIED, ("o1",))
        assert still.unresolved_impact

        o2 = read_a(log, "o2")
        assert o2.seq == 6
        for effect_id in ("e1", "e2"):
            done = log.assess(effect_id)
            assert (done.verdict, done.evidence, done.unresolved_impact) == (
                VERIFIED,
                ("o2",),
                False,
            )
        history = log.history()

    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.assess("e1").verdict is VERIFIED
        assert again.assess("e2").verdict is VERIFIED
        assert again.recover_interrupted() == ()


# --------------------------------------------------------------------------- assess


def test_log_assess_equals_the_pure_assess(store_dir: Path, run_id: str) -> None:
    """log.assess(e) is fx.assess(claim, log.history()) at every step, and after load."""
    with EffectLog(run_id, store_dir) as log:

        def check() -> None:
            history = log.history()
            for claim in history.claims:
                assert log.assess(claim.effect_id) == fx.assess(claim, history)

        claim_write(log, "e1")
        check()
        settle(log, "e1")
        check()
        see(log, "o1")
        check()
        claim_write(log, "e2")
        check()
        see(log, "o2", exists=False)
        check()
        settle(log, "e2", FAILED, NONE)
        check()
        see(log, "o3")
        check()
    with EffectLog.load(run_id, store_dir) as log:
        check()
        log.recover_interrupted()
        check()


def test_assess_of_an_unknown_effect_is_a_value_error(log: EffectLog) -> None:
    """Assessing an effect_id the run never claimed is a ValueError."""
    with pytest.raises(ValueError, match="e1"):
        log.assess("e1")
    claim_write(log, "e1")
    with pytest.raises(ValueError, match="e2"):
        log.assess("e2")
    assert log.assess("e1").verdict is PENDING


# --------------------------------------------------------------------------- lifecycle


def test_context_manager_closes_the_log(store_dir: Path, run_id: str) -> None:
    """Leaving the with block closes the log, even on an exception; then every write is a ValueError."""
    with EffectLog(run_id, store_dir) as log:
        assert isinstance(log, EffectLog)
        claim_write(log, "e1")
    with pytest.raises(RuntimeError, match="boom"), EffectLog.load(run_id, store_dir) as failing:
        raise RuntimeError("boom")
    for closed in (log, failing):
        with pytest.raises(ValueError, match="closed"):
            claim_write(closed, "e2")
        with pytest.raises(ValueError, match="closed"):
            settle(closed, "e1")
        with pytest.raises(ValueError, match="closed"):
            see(closed, "o9")
        with pytest.raises(ValueError, match="closed"):
            closed.recover_interrupted()
        closed.close()  # closing twice is harmless
    with EffectLog.load(run_id, store_dir) as again:
        assert [r.seq for r in again.history().records()] == [1]


def test_close_without_with(store_dir: Path, run_id: str) -> None:
    """close() ends the log; its rows stay and another log can load them."""
    log = EffectLog(run_id, store_dir)
    claim_write(log)
    log.close()
    with pytest.raises(ValueError, match="closed"):
        settle(log)
    with EffectLog.load(run_id, store_dir) as again:
        assert settle(again).seq == 2


def test_path_and_run_id(
    tmp_path: Path, store_dir: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """log.run_id is the run id and log.path the absolute Path of <directory>/ledger.sqlite3."""
    with EffectLog(run_id, store_dir) as log:
        assert log.run_id == run_id
        assert isinstance(log.path, Path)
        assert log.path == store_dir / "ledger.sqlite3"
        claim_write(log)
        assert log.path.is_file()
    with EffectLog.load(run_id, str(store_dir)) as again:
        assert (again.run_id, again.path) == (run_id, store_dir / "ledger.sqlite3")
    with EffectLog(run_id) as default:
        assert default.path == effects_dir() / "ledger.sqlite3"
    monkeypatch.chdir(tmp_path)
    with EffectLog(run_id, "relative") as relative:
        assert relative.path.is_absolute()
        assert relative.path == tmp_path / "relative" / "ledger.sqlite3"


# --------------------------------------------------------------------------- recovery refusals


def _interrupted_run(store: Path) -> str:
    """A run whose claim e1 never got an outcome, as after a crash."""
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=[fs_ref("/w/a")])
    return run_id


def _rows(store: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{store / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY run_id, seq").fetchall()
    finally:
        conn.close()


def test_recovery_refuses_a_run_another_log_moved_on(store_dir: Path) -> None:
    """A log whose run got records it has not seen writes no recovery over them."""
    run_id = _interrupted_run(store_dir)
    stale = EffectLog.load(run_id, store_dir)
    with EffectLog.load(run_id, store_dir) as other:
        other.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
    outcomes = _rows(store_dir, "outcomes")
    with pytest.raises(RunHeldError) as refused:
        stale.recover_interrupted()
    assert str(refused.value) == (
        f"cannot recover run {run_id}: run {run_id} holds records up to seq 2 where this "
        "log knows 1: another writer touched it; load it again"
    )
    assert _rows(store_dir, "outcomes") == outcomes == []
    assert stale.history().outcomes == ()  # nothing remembered that is not in the store
    assert not stale.degraded
    stale.close()
    with EffectLog.load(run_id, store_dir) as fresh:  # a fresh load recovers both claims
        recovered = fresh.recover_interrupted()
    assert [(o.effect_id, o.seq, o.replayed) for o in recovered] == [
        ("e1", 3, True),
        ("e2", 4, True),
    ]


def test_recovery_of_a_degraded_log_is_refused_and_writes_nothing(store_dir: Path) -> None:
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
        aside = store_dir.with_name("aside")
        store_dir.rename(aside)
        store_dir.write_bytes(b"not a directory\n")
        try:
            log.outcome(effect_id="e2", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        finally:
            store_dir.unlink()
            aside.rename(store_dir)
        assert log.degraded
        with pytest.raises(LogDegradedError) as refused:
            log.recover_interrupted()
        assert str(refused.value) == (
            f"run {run_id} is degraded: recovery would write past a lost record"
        )
    assert _rows(store_dir, "outcomes") == []


# --------------------------------------------------------------------------- recovery and the run's lock
#
# Another process holding a run is stood in for by an open file description of this one:
# Linux's OFD locks (F_OFD_SETLK) conflict with the POSIX record locks the log takes even
# within one process, so these tests hold a run "elsewhere" without a child process,
# whose work a mutation run could not see.

_FLOCK = "hhqqi4x"  # Linux's struct flock: type, whence, start, length, pid


class Elsewhere:
    """A run's byte of the store's ``ledger.lock``, held or probed as another process would."""

    def __init__(self, store: Path, run_id: str) -> None:
        self._fd = os.open(store / "ledger.lock", os.O_RDWR | os.O_CLOEXEC)
        self._offset = int(run_id[:15], 16)  # docs/storage.md, "Liveness"

    def _lock(self, command: int, kind: int) -> int:
        arg = struct.pack(_FLOCK, kind, os.SEEK_SET, self._offset, 1, 0)
        kind_found: int = struct.unpack(_FLOCK, fcntl.fcntl(self._fd, command, arg))[0]
        return kind_found

    def hold(self, kind: int) -> None:
        """Hold the run (``fcntl.F_RDLCK``: loaded; ``F_WRLCK``: being recovered)."""
        self._lock(fcntl.F_OFD_SETLK, kind)

    def release(self) -> None:
        """Let the run go."""
        self._lock(fcntl.F_OFD_SETLK, fcntl.F_UNLCK)

    def could_hold(self, kind: int) -> bool:
        """Whether another process could hold the run in ``kind`` now (nothing taken)."""
        return self._lock(fcntl.F_OFD_GETLK, kind) == fcntl.F_UNLCK

    def close(self) -> None:
        os.close(self._fd)


@pytest.fixture
def elsewhere() -> Iterator[Callable[[Path, str], Elsewhere]]:
    """Make :class:`Elsewhere` holders; closed after the test, once its logs are closed.

    Closing any descriptor of a file drops every POSIX lock this process has on it, the
    logs' included: so not before.
    """
    made: list[Elsewhere] = []

    def make(store: Path, run_id: str) -> Elsewhere:
        made.append(Elsewhere(store, run_id))
        return made[-1]

    yield make
    for holder in made:
        holder.close()


def test_recovery_is_refused_while_another_process_has_the_run_loaded(
    store_dir: Path, elsewhere: Callable[[Path, str], Elsewhere]
) -> None:
    """A run held shared elsewhere is not recovered; once let go, it is, and the exclusive hold is given back."""
    run_id = _interrupted_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(fcntl.F_RDLCK)
    with EffectLog.load(run_id, store_dir) as log:
        with pytest.raises(RunHeldError) as refused:
            log.recover_interrupted()
        assert str(refused.value) == (
            f"cannot recover run {run_id}: another live process has it loaded, and "
            "recovering it would break that process; close it there, or stop it"
        )
        assert log.history().outcomes == ()
        assert not log.degraded
        assert _rows(store_dir, "outcomes") == []
        other.release()
        (recovered,) = log.recover_interrupted()
        assert (recovered.effect_id, recovered.seq) == ("e1", 2)
        # Recovery held the run exclusive only while it wrote: the open log holds it shared.
        assert other.could_hold(fcntl.F_RDLCK)
        assert not other.could_hold(fcntl.F_WRLCK)
    assert other.could_hold(fcntl.F_WRLCK)


def test_forced_recovery_settles_a_run_another_process_has_loaded(
    store_dir: Path, elsewhere: Callable[[Path, str], Elsewhere]
) -> None:
    """``ledger recover --force`` recovers under a holder; without --force it is refused."""
    run_id = _interrupted_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(fcntl.F_RDLCK)
    with pytest.raises(_inspect.RunInUseError):
        _inspect.recover_run(store_dir, run_id)
    recovery = _inspect.recover_run(store_dir, run_id, force=True)
    assert [(o.effect_id, o.seq, o.replayed) for o in recovery.outcomes] == [("e1", 2, True)]
    assert recovery.skipped is None
    assert len(_rows(store_dir, "outcomes")) == 1
    other.release()
    assert other.could_hold(fcntl.F_WRLCK)  # this process holds nothing of the run


def test_a_log_loaded_while_the_run_was_being_recovered_may_not_recover_it(
    store_dir: Path, elsewhere: Callable[[Path, str], Elsewhere]
) -> None:
    """Loaded while the run was held exclusive elsewhere: its recovery is refused even once that ended."""
    run_id = _interrupted_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(fcntl.F_WRLCK)
    with EffectLog.load(run_id, store_dir) as stale:
        other.release()
        with pytest.raises(RunHeldError) as refused:
            stale.recover_interrupted()
        assert str(refused.value) == (
            f"cannot recover run {run_id}: another process was recovering it when this log "
            "loaded it; load the run again"
        )
    assert _rows(store_dir, "outcomes") == []
    with EffectLog.load(run_id, store_dir) as again:
        assert [o.effect_id for o in again.recover_interrupted()] == ["e1"]


def test_recovery_that_cannot_lock_the_run_names_the_run_and_the_cause(store_dir: Path) -> None:
    """The store directory moved away under a loaded log: recovery fails saying why, writing nothing."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        aside = store_dir.with_name("aside")
        store_dir.rename(aside)
        try:
            with pytest.raises(StoreUnavailableError) as refused:
                log.recover_interrupted()
        finally:
            aside.rename(store_dir)
        assert str(refused.value) == (
            f"cannot recover run {run_id}: cannot lock runs of the store {store_dir}: "
            "No such file or directory"
        )
        assert not log.degraded
        assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]


def _plant(db: Path, sql: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(sql)
        conn.commit()


EAT_OUTCOMES = "CREATE TRIGGER eat BEFORE INSERT ON outcomes BEGIN SELECT RAISE(IGNORE); END"


def test_recovery_that_meets_a_tampered_store_degrades_the_log(
    store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A trigger planted after load: recovery raises StoreTamperedError, logs why, and the log writes no more."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        _plant(log.path, EAT_OUTCOMES)
        with caplog.at_level(logging.ERROR), pytest.raises(StoreTamperedError) as refused:
            log.recover_interrupted()
        assert log.degraded
        assert caplog.messages == [
            (
                f"run {run_id} is degraded: recovery could not be persisted ({refused.value}); "
                "it is kept in memory only and nothing more will be written"
            )
        ]
        assert log.history().outcomes == ()
        with pytest.raises(LogDegradedError):
            log.recover_interrupted()
    assert _rows(store_dir, "outcomes") == []


def _writers(store: Path) -> list[tuple[str, int, str]]:
    """Each run's recorded writer: (run_id, pid, since)."""
    with contextlib.closing(
        sqlite3.connect(f"file:{store / 'ledger.sqlite3'}?mode=ro", uri=True)
    ) as conn:
        return conn.execute("SELECT run_id, pid, since FROM run_writers").fetchall()


def test_recovery_records_this_process_as_the_runs_writer_once(store_dir: Path) -> None:
    """Recovery records the writer; the same log's next write does not record it again."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        (recovered,) = log.recover_interrupted()
        later = log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
    assert later.recorded_at > recovered.recorded_at
    assert _writers(store_dir) == [(run_id, os.getpid(), recovered.recorded_at)]


def test_ctrl_c_in_recoverys_transaction_is_raised_and_writes_nothing(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT inside recovery's transaction: KeyboardInterrupt reaches the caller, nothing is written, recovery can run again."""
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("Python runs signal handlers in the main thread only: run the suite there")
    run_id = _interrupted_run(store_dir)
    delivered: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        delivered.append(signum)
        signal.default_int_handler(signum, frame)

    run = GroupCommit._run

    def run_then_ctrl_c(
        group: GroupCommit, connection: sqlite3.Connection, cursor: Any, batch: list[Job]
    ) -> list[Job]:
        committed: list[Job] = run(group, connection, cursor, batch)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # the handler raises here
        return committed

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with EffectLog.load(run_id, store_dir) as log:
            with monkeypatch.context() as patched:
                patched.setattr(GroupCommit, "_run", run_then_ctrl_c)
                with pytest.raises(KeyboardInterrupt):
                    log.recover_interrupted()
            assert delivered == [signal.SIGINT]
            assert log.history().outcomes == ()
            assert not log.degraded
            assert _rows(store_dir, "outcomes") == []
            assert [(o.effect_id, o.seq) for o in log.recover_interrupted()] == [("e1", 2)]
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- recovery and threads
#
# Another connection holding SQLite's write lock keeps the log's transaction waiting (the
# store's busy timeout is a minute), so a write is in flight for as long as a test needs.
# What a thread is doing is read from the log's queues (under the log's lock, its
# decisions are made together with them) and from the thread's innermost frame.

TIMEOUT = 10.0  # the longest any one wait may take before the test fails


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.002)


@contextlib.contextmanager
def _write_locked(db: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the store's write lock (rolled back at the end unless committed)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


class _Call:
    """``fn()`` running in a thread of its own."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._body, args=(fn,), daemon=True)
        self.thread.start()

    def _body(self, fn: Callable[[], Any]) -> None:
        try:
            self._result = fn()
        except BaseException as e:  # handed to result()
            self._error = e

    def waits_for_the_log(self) -> bool:
        """Whether the thread sleeps in ``Condition.wait`` called from the log's own code."""
        frame = sys._current_frames().get(self.thread.ident or 0)
        return (
            frame is not None
            and frame.f_code.co_name == "wait"
            and frame.f_code.co_filename == threading.__file__
            and frame.f_back is not None
            and Path(frame.f_back.f_code.co_filename).name == "effect_log.py"
        )

    def result(self) -> Any:
        """Join the thread (failing on a timeout); its return value, or raise its error."""
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "the thread did not finish (deadlock?)"
        if self._error is not None:
            raise self._error
        return self._result


@pytest.fixture
def in_thread() -> Iterator[Callable[[Callable[[], Any]], _Call]]:
    """Start calls in threads; each is joined after the test, even a failed one."""
    calls: list[_Call] = []

    def start(fn: Callable[[], Any]) -> _Call:
        calls.append(_Call(fn))
        return calls[-1]

    yield start
    stuck = []
    for call in calls:
        call.thread.join(TIMEOUT)
        if call.thread.is_alive():
            stuck.append(call)
    assert not stuck, f"{len(stuck)} thread(s) still running after the test"


def test_recovery_waits_for_a_claim_in_flight_and_settles_it_too(
    store_dir: Path, in_thread: Callable[[Callable[[], Any]], _Call]
) -> None:
    """Recovery called while another thread's claim is being written waits for it, then marks both claims."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        with _write_locked(log.path):
            claiming = in_thread(
                lambda: log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
            )
            _wait_for(lambda: "e2" in log._queued_claims, "the claim is queued")
            log.history()  # returns once the claim's thread let go of the log: it is writing
            recovering = in_thread(log.recover_interrupted)
            _wait_for(recovering.waits_for_the_log, "recovery waits for the claim in flight")
        assert claiming.result().seq == 2
        recovered = recovering.result()
        assert [(o.effect_id, o.seq) for o in recovered] == [("e1", 3), ("e2", 4)]
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history


def test_recovery_waiting_for_a_write_that_degrades_the_log_refuses(
    store_dir: Path, in_thread: Callable[[Callable[[], Any]], _Call]
) -> None:
    """Recovery waits for an outcome in flight that meets a tampered store: the log degrades and recovery refuses."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
        with _write_locked(log.path) as other:
            settling = in_thread(lambda: log.outcome(effect_id="e2", execution=FAILED, impact=NONE))
            _wait_for(lambda: "e2" in log._queued_settles, "the outcome is queued")
            log.history()  # the outcome's thread is writing
            recovering = in_thread(log.recover_interrupted)
            _wait_for(recovering.waits_for_the_log, "recovery waits for the outcome in flight")
            other.execute(EAT_OUTCOMES)
            other.execute("COMMIT")
        assert settling.result().effect_id == "e2"  # kept in memory
        assert log.degraded
        with pytest.raises(LogDegradedError) as refused:
            recovering.result()
        assert str(refused.value) == (
            f"run {run_id} is degraded: an earlier record was not persisted, "
            "so no new effect may start"
        )
    assert _rows(store_dir, "outcomes") == []


def test_a_claim_made_while_recovery_commits_is_numbered_after_it(
    store_dir: Path, in_thread: Callable[[Callable[[], Any]], _Call]
) -> None:
    """A claim made while recovery's transaction waits for the store waits behind it and follows its outcomes."""
    run_id = _interrupted_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        with _write_locked(log.path):
            recovering = in_thread(log.recover_interrupted)
            _wait_for(lambda: "e1" in log._queued_settles, "recovery is settling e1")
            log.history()  # recovery let go of the log: it is committing
            claiming = in_thread(
                lambda: log.claim(effect_id="e3", action_id="a3", operation=op(), impact_scope=[])
            )
            _wait_for(lambda: "e3" in log._queued_claims, "the claim is queued")
        assert [(o.effect_id, o.seq) for o in recovering.result()] == [("e1", 2)]
        assert claiming.result().seq == 3
        assert not log.degraded
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
