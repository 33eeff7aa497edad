"""Behaviour of ``ledger.effect_log``: the durable log of one run (API.md, points 1-3, 5-7).

Durability under faults, file trust, concurrency and the schema have their own
modules; these tests pin the public behaviour of one :class:`EffectLog` against a
real store of each backend, and check what the store holds through the backend's test
driver, outside the library, the way an operator would. What only the SQLite backend
shows (its file, its triggers, its group commit) is in ``tests/sqlite/test_effect_log.py``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import _inspect, _jsonl
from ledger import effects as fx
from ledger.effect_log import EffectLog, effects_dir, new_run_id
from ledger.errors import (
    LogDegradedError,
    RunExistsError,
    RunHeldError,
)
from ledger.resources import FilesystemRoot
from ledger.storage import Mode
from tests.backends import Backend, Holder, writes_nothing
from tests.builders import (
    CERTAIN,
    COMPLETE,
    EXISTS,
    FAILED,
    INTERRUPTED,
    NONE,
    PARTIAL,
    PENDING,
    POSSIBLE,
    RUNNING,
    SUCCESS,
    UNVERIFIED,
    VERIFIED,
    Call,
    Child,
    claim_bare,
    claim_write,
    file_ref,
    fs_ref,
    op,
    orphan_run,
    see,
    settle,
    sha,
    wait_for,
)

A = fs_ref("/sandbox/a.txt")
B = fs_ref("/sandbox/b.txt")


# --------------------------------------------------------------------------- helpers


def tree(path: Path) -> set[Path]:
    """Every file and directory under ``path``."""
    return set(path.rglob("*"))


def stored_runs(backend: Backend, store: Path) -> set[str]:
    """The run ids the store holds, read outside the library."""
    return {run for (run,) in backend.query(store, "SELECT run_id FROM runs")}


def outcome_rows(backend: Backend, store: Path) -> list[tuple[Any, ...]]:
    """Every outcome row the store holds, read outside the library."""
    return backend.query(store, "SELECT * FROM outcomes ORDER BY run_id, seq")


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
def test_run_id_must_be_32_lowercase_hex(backend: Backend, bad: str, store_dir: Path) -> None:
    """A run id that is not 32 lowercase hex characters is a ValueError, for a new or loaded log."""
    with pytest.raises(ValueError, match="run_id"):
        EffectLog(bad, store_dir)
    with pytest.raises(ValueError, match="run_id"):
        EffectLog.load(bad, store_dir)
    assert not backend.exists(store_dir)


@pytest.mark.parametrize("bad", [None, 123, b"0" * 32, ["0" * 32]], ids=repr)
def test_run_id_must_be_a_str(backend: Backend, bad: object, store_dir: Path) -> None:
    """A run id that is not a str is refused with TypeError or ValueError."""
    with pytest.raises((TypeError, ValueError)):
        EffectLog(bad, store_dir)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError)):
        EffectLog.load(bad, store_dir)  # type: ignore[arg-type]
    assert not backend.exists(store_dir)


def test_construction_writes_nothing(backend: Backend, tmp_path: Path, run_id: str) -> None:
    """Constructing a log creates neither the store directory, its parents nor the default store."""
    store = backend.location(tmp_path / "deep" / "er")
    before = tree(tmp_path)
    log = EffectLog(run_id, store)
    default = EffectLog(new_run_id())
    assert tree(tmp_path) == before
    assert not backend.exists(store)
    assert not effects_dir().exists()
    assert not Path(default.directory).exists()
    log.close()
    default.close()
    assert tree(tmp_path) == before
    assert not effects_dir().exists()


def test_new_log_on_an_existing_run_refuses_its_first_write(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """A new EffectLog on a run the store holds raises on its first write and writes nothing."""
    with EffectLog(run_id, store_dir) as first:
        claim_write(first)
        settle(first)
    before = backend.row_counts(store_dir)

    with EffectLog(run_id, store_dir) as second:
        see(second, "o-early", B)  # kept for the first claim's transaction
        with pytest.raises(RunExistsError):
            claim_write(second, "e2", B)
        assert second.history().claims == ()
        with pytest.raises(RunExistsError):  # and again: still nothing written
            claim_write(second, "e3", B)
        assert second.history().claims == ()
    assert backend.row_counts(store_dir) == before

    with EffectLog.load(run_id, store_dir) as again:  # load is how a run continues
        assert [r.seq for r in again.history().records()] == [1, 2]
        assert claim_write(again, "e2", B).seq == 3
    assert backend.row_counts(store_dir)["claims"] == before["claims"] + 1


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
    backend: Backend, tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """effects_dir() is $LEDGER_DIR, and a log without a directory writes its store there.

    A PostgreSQL store is the default when $LEDGER_URL names it, whatever $LEDGER_DIR says.
    """
    monkeypatch.setenv("LEDGER_DIR", str(tmp_path / "mine"))
    assert effects_dir() == tmp_path / "mine"
    store: Path | str = tmp_path / "mine"
    if isinstance(location := backend.location(tmp_path), str):
        store = location
        monkeypatch.setenv("LEDGER_URL", store)
    with EffectLog(run_id) as log:
        assert log.store == str(store)
        claim_write(log)
    assert stored_runs(backend, store) == {run_id}
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


def test_claim_returns_what_load_reads_back(backend: Backend, store_dir: Path, run_id: str) -> None:
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
        assert backend.row_counts(store_dir)["claims"] == 1
        with EffectLog.load(run_id, store_dir) as reader:
            assert reader.history().claims == (claim,)
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().claims == (claim,)


def test_duplicate_effect_id_is_a_value_error(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """A second claim of an effect_id in the run is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log, "e1")
        with writes_nothing(backend, store_dir, log), pytest.raises(ValueError, match="e1"):
            claim_write(log, "e1", B, action_id="other")
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
    backend: Backend, change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """A first claim with a bad argument raises before anything, not even the store, is created."""
    with EffectLog(run_id, store_dir) as log:
        with pytest.raises(error):
            log.claim(**{**GOOD_CLAIM, **change})
        assert log.history() == fx.History()
        assert not backend.exists(store_dir)


@pytest.mark.parametrize(("change", "error"), BAD_CLAIMS)
def test_bad_claim_writes_nothing(
    backend: Backend, change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """A claim with a bad argument raises, leaving history, rows and the seq counter untouched."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        with writes_nothing(backend, store_dir, log), pytest.raises(error):
            log.claim(**{**GOOD_CLAIM, **change})
        assert log.claim(**GOOD_CLAIM).seq == 2


# --------------------------------------------------------------------------- 3. outcome


def test_outcome_needs_a_claimed_effect(backend: Backend, store_dir: Path, run_id: str) -> None:
    """An outcome for an effect_id the run never claimed is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        with pytest.raises(ValueError, match="e1"):  # before any claim: not even a store
            settle(log, "e1")
        assert not backend.exists(store_dir)
        claim_write(log, "e1")
        with writes_nothing(backend, store_dir, log), pytest.raises(ValueError, match="e2"):
            settle(log, "e2")
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
    backend: Backend,
    execution: fx.ExecutionOutcome,
    impact: fx.Impact,
    store_dir: Path,
    run_id: str,
) -> None:
    """After a terminal outcome any further outcome is a ValueError, in this process and after load."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        settle(log, "e1", execution, impact)
        with writes_nothing(backend, store_dir, log) as history:
            for later_execution, later_impact in [
                (RUNNING, POSSIBLE),
                (SUCCESS, CERTAIN),
                (execution, impact),
            ]:
                with pytest.raises(ValueError, match="e1"):
                    settle(log, "e1", later_execution, later_impact)
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
def test_interrupted_needs_possible_impact(
    backend: Backend, impact: fx.Impact, store_dir: Path, run_id: str
) -> None:
    """An INTERRUPTED outcome with impact other than POSSIBLE is a ValueError and writes nothing."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        with (
            writes_nothing(backend, store_dir, log),
            pytest.raises(ValueError, match=r"(?i)interrupted"),
        ):
            settle(log, "e1", INTERRUPTED, impact)
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
    backend: Backend, change: dict[str, Any], error: type[Exception], store_dir: Path, run_id: str
) -> None:
    """An outcome with a bad argument raises and writes nothing; the effect stays open."""
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        with writes_nothing(backend, store_dir, log), pytest.raises(error):
            log.outcome(**{"effect_id": "e1", "execution": SUCCESS, "impact": CERTAIN, **change})
        assert settle(log).seq == 2


# --------------------------------------------------------------------------- 5. observe-only


def test_a_run_that_only_observes_creates_nothing(
    backend: Backend, tmp_path: Path, run_id: str
) -> None:
    """A run that observes but never claims creates no file or directory, here or in the default store."""
    before = tree(tmp_path)
    with EffectLog(run_id, backend.location(tmp_path)) as log, EffectLog(new_run_id()) as default:
        for i in range(3):
            see(log, f"o{i}", exists=bool(i % 2))
            see(default, f"o{i}")
        assert [o.seq for o in log.history().observations] == [1, 2, 3]
    assert tree(tmp_path) == before
    assert not effects_dir().exists()
    with EffectLog.load(run_id, backend.location(tmp_path)) as again:
        assert again.history() == fx.History()
    assert tree(tmp_path) == before


def test_a_run_that_only_observes_writes_no_row(
    backend: Backend, store_dir: Path, run_id: str, other_run: str
) -> None:
    """In a store that exists, a run that only observes adds no row at all."""
    before = backend.row_counts(store_dir)
    with EffectLog(run_id, store_dir) as log:
        see(log, "o1")
        see(log, "o2", B)
    assert backend.row_counts(store_dir) == before
    assert stored_runs(backend, store_dir) == {other_run}


def test_observations_before_the_first_claim_are_written_with_it(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """Observations made before the first claim are written with it and keep their earlier seq."""
    with EffectLog(run_id, store_dir) as log:
        o1 = see(log, "o1", exists=False)
        o2 = see(log, "o2", B, coverage=PARTIAL)
        assert not backend.exists(store_dir)
        claim = claim_write(log)
        assert (o1.seq, o2.seq, claim.seq) == (1, 2, 3)
        counts = backend.row_counts(store_dir)
        assert (counts["observations"], counts["claims"]) == (2, 1)
        o3 = see(log, "o3")  # after the first claim, written at once
        assert backend.row_counts(store_dir)["observations"] == 3
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.history().observations == (o1, o2, o3)
        assert again.history().claims == (claim,)


def test_observations_before_a_refused_first_claim_are_not_written(
    backend: Backend, store_dir: Path, run_id: str, other_run: str
) -> None:
    """When the first claim cannot be written, the observations waiting for it are not written either."""
    before = backend.row_counts(store_dir)
    with EffectLog(other_run, store_dir) as log:  # a new log on an existing run: refused
        see(log, "o-new", B)
        with pytest.raises(RunExistsError):
            claim_write(log, "e-new", B)
    assert backend.row_counts(store_dir) == before
    with EffectLog.load(other_run, store_dir) as again:
        assert "o-new" not in {o.observation_id for o in again.history().observations}


# --------------------------------------------------------------------------- 6. load


def test_load_of_a_missing_store_is_empty_and_creates_nothing(
    backend: Backend, tmp_path: Path, run_id: str
) -> None:
    """Loading from a store directory that does not exist, or holds no database, creates nothing."""
    before = tree(tmp_path)
    with EffectLog.load(run_id, backend.location(tmp_path / "no")) as log:
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
    backend: Backend, store_dir: Path, run_id: str, other_run: str
) -> None:
    """Loading a run the store does not hold gives an empty history and adds no row."""
    before = backend.row_counts(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == fx.History()
        assert log.recover_interrupted() == ()
    assert backend.row_counts(store_dir) == before
    assert stored_runs(backend, store_dir) == {other_run}


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
def test_any_run_reloads_equal(backend: Backend, steps: list[tuple[Any, ...]]) -> None:
    """For any valid sequence of records, load gives back the same history and the same verdicts."""
    run_id = new_run_id()
    with tempfile.TemporaryDirectory() as tmp:
        store = backend.location(Path(tmp))
        with EffectLog(run_id, store) as log:
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
        with EffectLog.load(run_id, store) as again:
            durable = again.history()
            if history.claims:
                assert durable == history
                assert {e: again.assess(e) for e in claimed} == verdicts
            else:  # nothing was claimed, so nothing was written
                assert durable == fx.History()


# --------------------------------------------------------------------------- 7. recovery


def test_recover_interrupted_marks_every_claim_without_an_outcome(
    backend: Backend, store_dir: Path, run_id: str
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
    with EffectLog.load(run_id, store_dir) as log:
        before = backend.row_counts(store_dir)
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
        after = backend.row_counts(store_dir)
        assert after["outcomes"] == before["outcomes"] + 2
        assert {t: n for t, n in after.items() if t != "outcomes"} == {
            t: n for t, n in before.items() if t != "outcomes"
        }
        assert log.assess("e3").verdict is PENDING  # the RUNNING claim is untouched
        assert log.recover_interrupted() == ()
        assert backend.row_counts(store_dir) == after
        with pytest.raises(ValueError, match="e1"):  # recovery settled it
            settle(log, "e1")
        assert settle(log, "e3").seq == 10  # the running effect can still finish
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history
        assert again.recover_interrupted() == ()
    assert backend.row_counts(store_dir) == {**after, "outcomes": after["outcomes"] + 1}


def test_recover_interrupted_in_the_same_process(
    backend: Backend, store_dir: Path, run_id: str
) -> None:
    """Recovery also works on the log that made the claims, without a restart."""
    with EffectLog(run_id, store_dir) as log:
        assert log.recover_interrupted() == ()  # nothing claimed: nothing written
        assert not backend.exists(store_dir)
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


# --------------------------------------------------------------------------- recovery refusals


def test_recovery_refuses_a_run_another_log_moved_on(backend: Backend, store_dir: Path) -> None:
    """A log whose run got records it has not seen writes no recovery over them."""
    run_id = orphan_run(store_dir)
    stale = EffectLog.load(run_id, store_dir)
    with EffectLog.load(run_id, store_dir) as other:
        other.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
    outcomes = outcome_rows(backend, store_dir)
    with pytest.raises(RunHeldError) as refused:
        stale.recover_interrupted()
    assert str(refused.value) == (
        f"cannot recover run {run_id}: run {run_id} holds records up to seq 2 where this "
        "log knows 1: another writer touched it; load it again"
    )
    assert outcome_rows(backend, store_dir) == outcomes == []
    assert stale.history().outcomes == ()  # nothing remembered that is not in the store
    assert not stale.degraded
    stale.close()
    with EffectLog.load(run_id, store_dir) as fresh:  # a fresh load recovers both claims
        recovered = fresh.recover_interrupted()
    assert [(o.effect_id, o.seq, o.replayed) for o in recovered] == [
        ("e1", 3, True),
        ("e2", 4, True),
    ]


def test_recovery_of_a_degraded_log_is_refused_and_writes_nothing(
    backend: Backend, store_dir: Path
) -> None:
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
        with backend.unavailable(store_dir):
            log.outcome(effect_id="e2", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert log.degraded
        with pytest.raises(LogDegradedError) as refused:
            log.recover_interrupted()
        assert str(refused.value) == (
            f"run {run_id} is degraded: recovery would write past a lost record"
        )
    assert outcome_rows(backend, store_dir) == []


# --------------------------------------------------------------------------- recovery and the run's lock
#
# Another process holding a run is stood in for by the backend's driver, which holds it
# as another process would from this one (``Backend.elsewhere``): no child process,
# whose work a mutation run could not see.


@pytest.fixture
def elsewhere(backend: Backend) -> Iterator[Callable[[Path, str], Holder]]:
    """Make holders of a run; let go after the test, once its logs are closed."""
    made: list[Holder] = []

    def make(store: Path, run_id: str) -> Holder:
        made.append(backend.elsewhere(store, run_id))
        return made[-1]

    yield make
    for holder in made:
        holder.close()


def test_recovery_is_refused_while_another_process_has_the_run_loaded(
    backend: Backend, store_dir: Path, elsewhere: Callable[[Path, str], Holder]
) -> None:
    """A run held shared elsewhere is not recovered; once let go, it is, and the exclusive hold is given back."""
    run_id = orphan_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(Mode.SHARED)
    with EffectLog.load(run_id, store_dir) as log:
        with pytest.raises(RunHeldError) as refused:
            log.recover_interrupted()
        assert str(refused.value) == (
            f"cannot recover run {run_id}: another live process has it loaded, and "
            "recovering it would break that process; close it there, or stop it"
        )
        assert log.history().outcomes == ()
        assert not log.degraded
        assert outcome_rows(backend, store_dir) == []
        other.release()
        (recovered,) = log.recover_interrupted()
        assert (recovered.effect_id, recovered.seq) == ("e1", 2)
        # Recovery held the run exclusive only while it wrote: the open log holds it shared.
        assert other.could_hold(Mode.SHARED)
        assert not other.could_hold(Mode.EXCLUSIVE)
    assert other.could_hold(Mode.EXCLUSIVE)


def test_forced_recovery_settles_a_run_another_process_has_loaded(
    backend: Backend, store_dir: Path, elsewhere: Callable[[Path, str], Holder]
) -> None:
    """``ledger recover --force`` recovers under a holder; without --force it is refused."""
    run_id = orphan_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(Mode.SHARED)
    with pytest.raises(_inspect.RunInUseError):
        _inspect.recover_run(store_dir, run_id)
    recovery = _inspect.recover_run(store_dir, run_id, force=True)
    assert [(o.effect_id, o.seq, o.replayed) for o in recovery.outcomes] == [("e1", 2, True)]
    assert recovery.skipped is None
    assert len(outcome_rows(backend, store_dir)) == 1
    other.release()
    assert other.could_hold(Mode.EXCLUSIVE)  # this process holds nothing of the run


def test_a_log_loaded_while_the_run_was_being_recovered_may_not_recover_it(
    backend: Backend, store_dir: Path, elsewhere: Callable[[Path, str], Holder]
) -> None:
    """Loaded while the run was held exclusive elsewhere: its recovery is refused even once that ended."""
    run_id = orphan_run(store_dir)
    other = elsewhere(store_dir, run_id)
    other.hold(Mode.EXCLUSIVE)
    with EffectLog.load(run_id, store_dir) as stale:
        other.release()
        with pytest.raises(RunHeldError) as refused:
            stale.recover_interrupted()
        assert str(refused.value) == (
            f"cannot recover run {run_id}: another process was recovering it when this log "
            "loaded it; load the run again"
        )
    assert outcome_rows(backend, store_dir) == []
    with EffectLog.load(run_id, store_dir) as again:
        assert [o.effect_id for o in again.recover_interrupted()] == ["e1"]


def test_recovery_records_this_process_as_the_runs_writer_once(
    backend: Backend, store_dir: Path
) -> None:
    """Recovery records the writer; the same log's next write does not record it again."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        (recovered,) = log.recover_interrupted()
        later = log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
    assert later.recorded_at > recovered.recorded_at
    assert backend.query(store_dir, "SELECT run_id, pid, since FROM run_writers") == [
        (run_id, os.getpid(), recovered.recorded_at)
    ]


# --------------------------------------------------------------------------- recovery and threads
#
# Another client holding the store's write lock (``Backend.write_locked``) keeps the log's
# transaction waiting, so a write is in flight for as long as a test needs. What a
# thread is doing is read from the log's queues (under the log's lock, its decisions are
# made together with them) and from the thread's innermost frame.


def test_recovery_waits_for_a_claim_in_flight_and_settles_it_too(
    backend: Backend, store_dir: Path, in_thread: Callable[[Callable[[], Any]], Call]
) -> None:
    """Recovery called while another thread's claim is being written waits for it, then marks both claims."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        with backend.write_locked(store_dir):
            claiming = in_thread(
                lambda: log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])
            )
            wait_for(lambda: "e2" in log._state.queued_claims, "the claim is queued")
            log.history()  # returns once the claim's thread let go of the log: it is writing
            recovering = in_thread(log.recover_interrupted)
            wait_for(recovering.waits_for_the_log, "recovery waits for the claim in flight")
        assert claiming.result().seq == 2
        recovered = recovering.result()
        assert [(o.effect_id, o.seq) for o in recovered] == [("e1", 3), ("e2", 4)]
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history


def test_a_claim_made_while_recovery_commits_is_numbered_after_it(
    backend: Backend, store_dir: Path, in_thread: Callable[[Callable[[], Any]], Call]
) -> None:
    """A claim made while recovery's transaction waits for the store waits behind it and follows its outcomes."""
    run_id = orphan_run(store_dir)
    with EffectLog.load(run_id, store_dir) as log:
        with backend.write_locked(store_dir):
            recovering = in_thread(log.recover_interrupted)
            wait_for(lambda: "e1" in log._state.queued_settles, "recovery is settling e1")
            log.history()  # recovery let go of the log: it is committing
            claiming = in_thread(
                lambda: log.claim(effect_id="e3", action_id="a3", operation=op(), impact_scope=[])
            )
            wait_for(lambda: "e3" in log._state.queued_claims, "the claim is queued")
        assert [(o.effect_id, o.seq) for o in recovering.result()] == [("e1", 2)]
        assert claiming.result().seq == 3
        assert not log.degraded
        history = log.history()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history() == history


# --------------------------------------------------------------------------- other writers of a run


def test_a_run_loaded_empty_and_started_elsewhere_is_refused_as_stale(
    backend: Backend, store_dir: Path
) -> None:
    """A log that loaded an empty run refuses to write once another writer started it: load again."""
    run_id = new_run_id()
    with EffectLog.load(run_id, store_dir) as empty, EffectLog(run_id, store_dir) as other:
        claim_bare(other, "e-other")
        with pytest.raises(RunHeldError) as refused:
            claim_bare(empty, "e-stale")
        assert str(refused.value) == (
            f"cannot record claim 'e-stale' in run {run_id}: run {run_id} holds records up to "
            "seq 1 where this log knows 0: another writer touched it; load it again"
        )
    assert backend.query(store_dir, "SELECT run_id, effect_id FROM claims") == [(run_id, "e-other")]
    with EffectLog.load(run_id, store_dir) as again:
        assert claim_bare(again, "e-again").seq == 2


def test_the_first_write_after_a_load_records_this_process_as_the_runs_writer(
    backend: Backend, store_dir: Path
) -> None:
    """A run another process wrote names this process as its writer once this one writes."""
    run_id = new_run_id()
    child = Child("claim", store_dir, run_id)
    assert child.answer == {"claimed": True}
    assert child.finish() == 0
    (before,) = backend.query(store_dir, "SELECT pid FROM run_writers WHERE run_id = ?", (run_id,))
    assert before[0] != os.getpid()
    with EffectLog.load(run_id, store_dir) as log:
        claim_bare(log, "e2")
    assert backend.query(store_dir, "SELECT pid FROM run_writers WHERE run_id = ?", (run_id,)) == [
        (os.getpid(),)
    ]


def test_an_exported_run_imports_as_a_new_run_that_loads_the_same(
    backend: Backend, store_dir: Path, tmp_path: Path
) -> None:
    """Import (in process): a new run's row and records, loading to the history exported."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        claim_write(log)
        settle(log)
        see(log, "o1")
    _, lines = _jsonl.export_lines(store_dir, run_id)
    new_id = new_run_id()
    exported = tmp_path / f"{new_id}.jsonl"
    exported.write_text("\n".join(lines) + "\n")
    other = backend.location(tmp_path / "other")
    imported = _jsonl.import_file(other, exported)
    assert imported.records == 3
    assert stored_runs(backend, other) == {imported.run_id}
    assert imported.run_id == new_id
    with (
        EffectLog.load(run_id, store_dir) as original,
        EffectLog.load(imported.run_id, other) as copy,
    ):
        assert copy.history() == original.history()
    with pytest.raises(_jsonl.ImportRefusedError, match="already in the store"):
        _jsonl.import_file(other, exported, imported.run_id)


def test_two_threads_retrying_one_effect_at_once_make_one_retry(
    backend: Backend, store_dir: Path, in_thread: Callable[[Callable[[], Any]], Call]
) -> None:
    """A retry decided while another retry of the effect is being written is refused: WAIT."""
    run_id = new_run_id()
    with EffectLog(run_id, store_dir) as log:
        claim_bare(log, "e1")
        log.outcome(effect_id="e1", execution=FAILED, impact=NONE)
        assert log.decide("e1").step is fx.NextStep.RETRY
        with backend.write_locked(store_dir):
            first = in_thread(lambda: log.retry("e1", new_effect_id="r1"))
            wait_for(lambda: "r1" in log._state.queued_claims, "the first retry is queued")
            second = in_thread(lambda: log.retry("e1", new_effect_id="r2"))
            wait_for(
                lambda: not second.thread.is_alive() or "r2" in log._state.queued_claims,
                "the second retry is decided",
            )
        assert first.result().retry_of == "e1"
        with pytest.raises(ValueError, match=r"the decision is WAIT \(A retry of it is being"):
            second.result()
        # Once the first is durable, the effect's decision is its retry's: pending, WAIT.
        with pytest.raises(ValueError, match="the decision is WAIT"):
            log.retry("e1")
    assert backend.query(
        store_dir, "SELECT effect_id, retry_of FROM claims WHERE run_id = ? ORDER BY seq", (run_id,)
    ) == [("e1", None), ("r1", "e1")]


def test_a_writer_name_is_recorded_with_the_process_and_shown_by_runs(
    backend: Backend, store_dir: Path
) -> None:
    """writer_name goes with this process into the run's writer; ledger runs prints it."""
    named, plain = new_run_id(), new_run_id()
    with EffectLog(named, store_dir, writer_name="mailer-7") as log:
        claim_bare(log, "e1")
    with EffectLog(plain, store_dir) as log:
        claim_bare(log, "e1")
    writers = {s.run_id: s.writer for s in _inspect.list_runs(store_dir)}
    assert writers[named] is not None
    assert (writers[named].name, writers[named].pid) == ("mailer-7", os.getpid())
    assert writers[named].label().startswith("mailer-7 (")
    assert writers[plain] is not None
    assert writers[plain].name is None
    with EffectLog.load(named, store_dir, writer_name="mailer-8") as log:
        claim_bare(log, "e2")
    assert {s.run_id: s.writer for s in _inspect.list_runs(store_dir)}[named].name == "mailer-8"  # type: ignore[union-attr]
    shown = _inspect.show_run(store_dir, named).to_dict()
    assert shown["writer"]["name"] == "mailer-8"


@pytest.mark.parametrize(
    ("name", "error"),
    [("", ValueError), ("a\nb", ValueError), ("x" * 201, ValueError), (7, TypeError)],
)
def test_a_bad_writer_name_is_refused_before_anything_is_written(
    backend: Backend, store_dir: Path, name: object, error: type[Exception]
) -> None:
    """An empty, multi-line, too long or non-str writer_name: the caller's mistake, nothing written."""
    with pytest.raises(error, match="writer_name"):
        EffectLog(new_run_id(), store_dir, writer_name=name)  # type: ignore[arg-type]
    with pytest.raises(error, match="writer_name"):
        EffectLog.load(new_run_id(), store_dir, writer_name=name)  # type: ignore[arg-type]
    assert not backend.exists(store_dir)
