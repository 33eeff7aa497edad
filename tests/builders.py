"""Builders and helpers shared by the test modules, each written once.

Values, paths and the tools a test needs; the error tree's leaves; records and whole
runs written through a log; threads; file fingerprints; the ``ledger`` command; child
Pythons, alone or started together; and the generated histories of the property tests.
Fixtures live in the ``conftest.py`` files; what only SQLite's tests share is in
``tests/sqlite/driver.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.server
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest
from hypothesis import strategies as st

from ledger import effects as fx
from ledger import errors
from ledger._run.writes import Writes
from ledger.effect_log import ClaimRequest, EffectLog, OutcomeRequest, new_run_id
from ledger.resources import FilesystemResource, FilesystemRoot

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
LEDGER = str(Path(PYTHON).with_name("ledger"))  # the installed console script
TIMEOUT = 10.0  # the longest one wait in this process may take before the test fails
CHILD_TIMEOUT = 60  # the longest a child process may take
BURST_TIMEOUT = 120.0  # the longest a burst of threads, or of children, may take

# Short names for the enum members tests spell most.
RUNNING = fx.ExecutionOutcome.RUNNING
SUCCESS = fx.ExecutionOutcome.REPORTED_SUCCESS
FAILED = fx.ExecutionOutcome.FAILED
INTERRUPTED = fx.ExecutionOutcome.INTERRUPTED
NONE = fx.Impact.NONE
POSSIBLE = fx.Impact.POSSIBLE
CERTAIN = fx.Impact.CERTAIN
EXISTS = fx.Predicate.EXISTS
ABSENT = fx.Predicate.ABSENT
SHA256 = fx.Predicate.SHA256
REVISION = fx.Predicate.REVISION
COMPLETE = fx.Coverage.COMPLETE
PARTIAL = fx.Coverage.PARTIAL
PENDING = fx.EffectVerdict.PENDING
UNVERIFIED = fx.EffectVerdict.UNVERIFIED
CONTRADICTED = fx.EffectVerdict.CONTRADICTED
VERIFIED = fx.EffectVerdict.VERIFIED
FAILED_VERDICT = fx.EffectVerdict.FAILED


# --------------------------------------------------------------------------- values, paths, tools


def sha(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def op(name: str = "write_file", args: bytes = b"{}") -> fx.OperationRef:
    """An operation with the digest of ``args``."""
    return fx.OperationRef(name, "test/1", sha(args))


def fs_ref(locator: str, role: str = "target") -> fx.ResourceRef:
    """An ``fs`` resource reference for an absolute path."""
    return fx.ResourceRef("fs", locator, role)


def file_ref(root: FilesystemRoot, name: str, role: str = "target") -> fx.ResourceRef:
    """The reference of ``name`` inside ``root`` (it may be missing)."""
    return fx.resource_ref(FilesystemResource.resolve(root, name, allow_missing=True), role)


def resolve(root: FilesystemRoot, path: str | Path, **kwargs: bool) -> Path:
    """The real path ``path`` resolves to inside ``root``."""
    return FilesystemResource.resolve(root, path, **kwargs).path


def refusal(call: Callable[[], object]) -> str:
    """The message of the ValueError ``call`` raises."""
    with pytest.raises(ValueError) as refused:
        call()
    return str(refused.value)


def missing(what: str) -> NoReturn:
    """This machine lacks what a test needs: fail saying what, never pass by skipping.

    ``make test`` installs the tools the suite uses, and CI runs it as root; a developer
    without them may set ``LEDGER_ALLOW_SKIP=1`` to skip such tests instead.
    """
    if os.environ.get("LEDGER_ALLOW_SKIP") == "1":
        pytest.skip(what)
    pytest.fail(
        f"{what} (make test installs the tools the suite needs; run it as root for the "
        "tests that act as another user, or set LEDGER_ALLOW_SKIP=1 to skip them)",
        pytrace=False,
    )


def require_tool(name: str) -> str:
    """The path of the program ``name``, or the test fails saying it is missing."""
    path = shutil.which(name)
    if path is None:
        missing(f"the {name} program is not installed")
    return path


def subprocess_env() -> dict[str, str]:
    """The environment for child Python processes that import ledger."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def sql_literal(value: object) -> str:
    """``value`` as an SQL literal, for rows written by hand as a person would."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


# --------------------------------------------------------------------------- the error tree

# The leaves of the error tree under EffectPersistenceError (ledger.errors).
ERROR_LEAVES = (
    errors.LogDegradedError,
    errors.RunExistsError,
    errors.RunHeldError,
    errors.SchemaTooNewError,
    errors.StoreCorruptError,
    errors.StoreFileRefusedError,
    errors.StoreSchemaOldError,
    errors.StoreTamperedError,
    errors.StoreUnavailableError,
)


def subclasses(root: type[BaseException]) -> list[type[BaseException]]:
    """``root`` and every class below it, each once."""
    seen: list[type[BaseException]] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return seen


# --------------------------------------------------------------------------- records, through a log


def claim_write(
    log: EffectLog,
    effect_id: str = "e1",
    ref: fx.ResourceRef | None = None,
    *,
    action_id: str = "a1",
    obligations: tuple[fx.Postcondition, ...] | None = None,
) -> fx.EffectClaim:
    """Claim a write of ``ref`` (``/sandbox/a.txt``) that should leave it existing."""
    if ref is None:
        ref = fs_ref("/sandbox/a.txt")
    if obligations is None:
        obligations = (fx.Postcondition(ref, fx.Predicate.EXISTS),)
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
    ref: fx.ResourceRef | None = None,
    *,
    exists: bool | None = True,
    coverage: fx.Coverage = fx.Coverage.COMPLETE,
) -> fx.Observation:
    """Record a stat of ``ref`` (``/sandbox/a.txt``)."""
    return log.observe(
        observation_id=observation_id,
        resource=fs_ref("/sandbox/a.txt") if ref is None else ref,
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=coverage,
        source_action_id="look",
        exists=exists,
    )


def claim_bare(log: EffectLog, effect_id: str = "e1") -> fx.EffectClaim:
    """Claim an effect with an empty scope and no obligation."""
    return log.claim(
        effect_id=effect_id, action_id=f"a-{effect_id}", operation=op(), impact_scope=()
    )


def claim_small(log: EffectLog, effect_id: str) -> fx.EffectClaim:
    """Claim a small write of ``/sandbox/a.txt``, with no obligation."""
    return log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(),
        impact_scope=[fs_ref("/sandbox/a.txt")],
    )


def claim_target(log: EffectLog, effect_id: str) -> fx.EffectClaim:
    """Claim a write of ``/sandbox/<run>/<effect_id>.txt`` that should leave it existing."""
    target = fs_ref(f"/sandbox/{log.run_id}/{effect_id}.txt")
    return log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(args=effect_id.encode()),
        impact_scope=[target],
        obligations=[fx.Postcondition(target, fx.Predicate.EXISTS)],
    )


def replay(log: EffectLog, history: fx.History) -> None:
    """Every record of ``history`` written again through ``log``'s public calls, in order.

    Resolutions are written as a reconciler's (``allow_self``): the log resolves effects
    it claimed itself.
    """
    for record in history.records():
        if isinstance(record, fx.EffectClaim):
            log.claim(
                effect_id=record.effect_id,
                action_id=record.action_id,
                operation=record.operation,
                impact_scope=record.impact_scope,
                obligations=record.obligations,
                kind=record.kind,
                retry_of=record.retry_of,
            )
        elif isinstance(record, fx.Resolution):
            log.resolve(record.effect_id, applied=record.applied, by=record.by, allow_self=True)
        elif isinstance(record, fx.EffectOutcome):
            log.outcome_many(
                [
                    OutcomeRequest(
                        effect_id=record.effect_id,
                        execution=record.execution,
                        impact=record.impact,
                    )
                ]
            )
        else:
            log.observe(
                observation_id=record.observation_id,
                resource=record.resource,
                mechanism=record.mechanism,
                coverage=record.coverage,
                source_action_id=record.source_action_id,
                exists=record.exists,
                sha256=record.sha256,
                revision=record.revision,
            )


def write_five_records(log: EffectLog) -> None:
    """o0 (a missing), e1 on a and its parent (RUNNING, then success), and e2 left open."""
    a = fs_ref("/w/a")
    log.observe(
        observation_id="o0",
        resource=a,
        mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="s0",
        exists=False,
    )
    log.claim(
        effect_id="e1",
        action_id="a1",
        operation=op(),
        impact_scope=[a, fs_ref("/w")],
        obligations=[fx.Postcondition(a, fx.Predicate.EXISTS)],
    )
    log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.RUNNING, impact=fx.Impact.POSSIBLE)
    log.outcome(
        effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS, impact=fx.Impact.CERTAIN
    )
    log.claim(effect_id="e2", action_id="a2", operation=op(), impact_scope=[])


def claim_request(name: str, **change: Any) -> ClaimRequest:
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


def claim_requests(*effect_ids: str) -> list[ClaimRequest]:
    """One :func:`claim_request` per effect id, in order."""
    return [claim_request(effect_id) for effect_id in effect_ids]


def outcome_request(
    effect_id: str, execution: fx.ExecutionOutcome = SUCCESS, **change: Any
) -> OutcomeRequest:
    """An outcome request; a reported success with certain impact unless told otherwise."""
    fields: dict[str, Any] = {"effect_id": effect_id, "execution": execution, "impact": CERTAIN}
    return OutcomeRequest(**{**fields, **change})


def loaded(run_id: str, store: Path) -> fx.History:
    """The run's history as a fresh ``EffectLog.load`` reads it from the store."""
    with EffectLog.load(run_id, store) as log:
        return log.history()


def effect_ids(history: fx.History) -> list[str]:
    """The claimed effect ids of ``history``, in seq order."""
    return [c.effect_id for c in history.claims]


def gap_free(history: fx.History) -> bool:
    """Whether the run's records are numbered 1, 2, 3, ... without gap or repeat."""
    return [r.seq for r in history.records()] == list(range(1, len(history.records()) + 1))


def orphan_run(store: Path, run_id: str | None = None) -> str:
    """A closed run (new unless given) whose one claim e1 never got an outcome, as after a crash."""
    run_id = run_id or new_run_id()
    with EffectLog(run_id, store) as log:
        claim_bare(log, "e1")
    return run_id


@contextlib.contextmanager
def resolutions_before_0013() -> Iterator[None]:
    """Inside the block, resolutions record no writing process, as before migration 0013.

    For the tests that take a store written now down to an earlier revision: a resolution
    that records its writer loses it there, and with it its hash.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Writes, "written_by", lambda _writes, *, allow_self: {})
        yield


def write_every_column(
    directory: Path, run_id: str, *, recorded: bool = False, before_0013: bool = False
) -> None:
    """Write run ``run_id`` so that every column of every record table is set in some row.

    A recovered outcome has ``replayed`` set; an observation has every optional field.
    With ``recorded``, claims with a step and recorded arguments and outcomes with a
    recorded result (chain version 3, migration 0012) follow, a recorded JSON null among
    them, and a claim with a trace context (version 5, 0015); without, the run holds no
    record a store before 0012 could not. With
    ``before_0013``, its resolution records no writing process (as before migration
    0013), and the columns that would hold it are NULL.
    """
    a = fx.ResourceRef("fs", "/w/a", "target", revision="r1")
    b = fs_ref("/w/b")
    with EffectLog(run_id, directory) as log:
        log.observe(
            observation_id="o0",
            resource=a,
            mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="s0",
            exists=True,
            sha256=sha(b"before"),
            revision="r0",
        )
        log.claim(
            effect_id="e1",
            action_id="a1",
            operation=op("write_file", b"1"),
            impact_scope=[a, b],
            obligations=[
                fx.Postcondition(a, fx.Predicate.SHA256, sha(b"after")),
                fx.Postcondition(b, fx.Predicate.EXISTS),
            ],
        )
        log.outcome(
            effect_id="e1",
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
            execution_id="x-1",
        )
        log.outcome(
            effect_id="e1",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
            execution_id="x-1",
        )
        log.claim(effect_id="e2", action_id="a2", operation=op("remove", b"2"), impact_scope=[b])
    with EffectLog.load(run_id, directory) as log:  # after a crash: e2 is recovered
        assert len(log.recover_interrupted()) == 1
        # A person finds e2 did not land; e3 repeats it (a version 2 claim, with a retry).
        with resolutions_before_0013() if before_0013 else contextlib.nullcontext():
            log.resolve("e2", applied=False, by="ops", note="b untouched")
        log.claim(
            effect_id="e3",
            action_id="a3",
            operation=op("remove", b"2"),
            impact_scope=[b],
            kind=fx.EffectKind.IDEMPOTENT,
            retry_of="e2",
        )
        log.observe(
            observation_id="o1",
            resource=b,
            mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
            coverage=fx.Coverage.PARTIAL,
            source_action_id="s1",
            exists=False,
        )
        if recorded:
            write_recorded_values(log, b)
    if recorded:
        write_traced_claim(run_id, directory)
        write_approvals(run_id, directory)


# What a person answers to each approval write_approvals asks for, by its tool.
APPROVAL_ANSWERS = {"refund": ("granted", "alice", "up to 150"), "wipe": ("denied", "bob", "no")}
APPROVAL_POLICY = fx.ApprovalPolicy(ttl=timedelta(days=300), reason="money leaves the company")


def write_approvals(run_id: str, directory: Path | str) -> dict[str, str]:
    """Approval requests, a person's answers and a claim made under a grant (version 6).

    ``refund`` is asked for (with its arguments recorded and a reason), granted by
    another process (a person's ``ledger approve``: the worker cannot approve its own
    request), then claimed under the grant and done; ``wipe`` is asked for and denied. Returns
    the approval ids by tool. :func:`ask_approvals`, :func:`answer_elsewhere` and
    :func:`claim_approved` do it in three steps, for many runs with one other process.
    """
    asked = ask_approvals(run_id, directory)
    answer_elsewhere(directory, approval_answers(run_id, asked))
    claim_approved(run_id, directory, asked)
    return asked


def ask_approvals(run_id: str, directory: Path | str) -> dict[str, str]:
    """The requests of :func:`write_approvals`: the approval ids by tool."""
    asked: dict[str, str] = {}
    with EffectLog.load(run_id, directory) as log:
        for tool in APPROVAL_ANSWERS:
            with pytest.raises(errors.ApprovalPending) as pending:
                log.claim(**_gated_call(tool), approval=APPROVAL_POLICY)
            asked[tool] = pending.value.approval_id
    return asked


def approval_answers(run_id: str, asked: dict[str, str]) -> list[tuple[str, ...]]:
    """The answers of :func:`write_approvals`, as :func:`answer_elsewhere` takes them."""
    return [(run_id, asked[tool], *answer) for tool, answer in APPROVAL_ANSWERS.items()]


def claim_approved(run_id: str, directory: Path | str, asked: dict[str, str]) -> int:
    """The claim of :func:`write_approvals` made under refund's grant, and its outcome.

    Returns the run's last seq.
    """
    with EffectLog.load(run_id, directory) as log:
        claim = log.claim(**_gated_call("refund"), approval=APPROVAL_POLICY)
        assert claim.approval_id == asked["refund"]
        done = log.outcome(
            effect_id=claim.effect_id,
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        return done.seq


@dataclasses.dataclass(frozen=True)
class Approval:
    """An approval request of a run: its id, the effect it reserves, its seq."""

    approval_id: str
    effect_id: str
    seq: int


# The requests of write_five_approvals, by tool, in the order asked: the answer each gets
# (None: none) and the lifetime of its request.
FIVE_APPROVALS: dict[str, tuple[str | None, timedelta]] = {
    "refund": ("granted", timedelta(days=300)),
    "wipe": ("denied", timedelta(days=300)),
    "send": ("granted", timedelta(days=300)),
    "mail": (None, timedelta(days=300)),
    "late": (None, timedelta(microseconds=1)),
}


def _five_call(tool: str) -> dict[str, Any]:
    return {
        "effect_id": f"{tool}-1",
        "action_id": f"a-{tool}",
        "operation": op(tool, tool.encode()),
        "impact_scope": [],
        "kind": fx.EffectKind.IRREVERSIBLE,
        "args": {"amount": 150},
    }


def write_five_approvals(run_id: str, location: Path | str) -> tuple[dict[str, Approval], int]:
    """An approval in each state, asked by this process, answered by another.

    Requests for refund (granted, then claimed under its grant), wipe (denied), send
    (granted, unused), mail (pending) and late (expired unanswered: its ttl is a
    microsecond); the answers come from one other process, as ``ledger approve`` and
    ``ledger deny``. Returns the requests by tool and the seq of refund's claim, the
    run's last record.
    """
    asked = {}
    with EffectLog.load(run_id, location) as log:
        for tool, (_, ttl) in FIVE_APPROVALS.items():
            with pytest.raises(errors.ApprovalPending) as pending:
                log.claim(**_five_call(tool), approval=fx.ApprovalPolicy(ttl=ttl))
            seq = log.history().records()[-1].seq
            asked[tool] = Approval(pending.value.approval_id, pending.value.effect_id, seq)
    answer_elsewhere(
        location,
        [
            (run_id, asked[tool].approval_id, answer, "ops", f"{tool}: {answer}")
            for tool, (answer, _) in FIVE_APPROVALS.items()
            if answer is not None
        ],
    )
    with EffectLog.load(run_id, location) as log:
        policy = fx.ApprovalPolicy(ttl=timedelta(days=300))
        claim = log.claim(**_five_call("refund"), approval=policy)
        assert claim.approval_id == asked["refund"].approval_id
    return asked, claim.seq


def _gated_call(tool: str) -> dict[str, Any]:
    return {
        "effect_id": f"{tool}-1",
        "action_id": f"a-{tool}",
        "operation": op(tool, tool.encode()),
        "impact_scope": [fx.ResourceRef("owned", f"payments/{tool}", "record")],
        "kind": fx.EffectKind.IRREVERSIBLE,
        "step": f"plan/{tool}",
        "args": {"amount": 150, "to": "acct-7"},
    }


_ANSWER = """
import sys
from ledger.effect_log import EffectLog
directory, *answers = sys.argv[1:]
for answer in answers:
    run_id, approval_id, decision, by, note = answer.split("\\t")
    log = EffectLog._visit(run_id, directory, "ledger approve")
    try:
        if decision == "granted":
            log.approve(approval_id, by=by, note=note)
        else:
            log.deny(approval_id, by=by, note=note)
    finally:
        log.close()
"""


def answer_elsewhere(directory: Path | str, answers: Sequence[tuple[str, ...]]) -> None:
    """Record people's answers (run id, approval id, decision, by, note) from another process.

    As ``ledger approve`` and ``ledger deny`` do: one process, which did not ask.
    """
    argv = [PYTHON, "-c", _ANSWER, str(directory), *("\t".join(a) for a in answers)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def write_traced_claim(run_id: str, directory: Path | str) -> None:
    """A claim made in a span, by a log with an SDK tracer: it stores its traceparent (0015)."""
    from opentelemetry.sdk.trace import TracerProvider  # only the tests that need it

    provider = TracerProvider()
    with (
        EffectLog.load(run_id, directory, tracer_provider=provider) as log,
        provider.get_tracer("tests").start_as_current_span("the caller"),
    ):
        log.claim(effect_id="traced", action_id="a9", operation=op("send"), impact_scope=[])
        log.outcome(
            effect_id="traced",
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )


def write_recorded_values(log: EffectLog, ref: fx.ResourceRef) -> None:
    """Claims and outcomes of chain version 3: steps, recorded arguments and results.

    A step with arguments and a result (text outside ASCII: lengths count characters),
    a step alone whose result is a recorded JSON null, arguments alone (no step) with no
    result recorded, and a retry carrying its original's step.
    """
    log.claim(
        effect_id="r1",
        action_id="ar1",
        operation=op("write_file", b"r1"),
        impact_scope=[ref],
        step="plan/1: write b",
        args={"path": "/w/b", "text": "caf\u00e9 \u2603", "n": [1, 2.5, None, True]},
    )
    log.outcome(
        effect_id="r1",
        execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
        impact=fx.Impact.CERTAIN,
        result={"written": 6, "note": "\u00e9t\u00e9"},
    )
    log.claim(
        effect_id="r2",
        action_id="ar2",
        operation=op("read", b"r2"),
        impact_scope=[],
        kind=fx.EffectKind.READ,
        step="plan/2",
    )
    log.outcome(
        effect_id="r2",
        execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
        impact=fx.Impact.NONE,
        result=None,
        result_recorded=True,
    )
    log.claim(
        effect_id="r3",
        action_id="ar3",
        operation=op("remove", b"r3"),
        impact_scope=[ref],
        args=[],
    )
    log.outcome(effect_id="r3", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
    log.claim(
        effect_id="r4",
        action_id="ar4",
        operation=op("remove", b"r3"),
        impact_scope=[ref],
        retry_of="r3",
        step="",
        args=[],
    )
    log.outcome(
        effect_id="r4",
        execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
        impact=fx.Impact.CERTAIN,
        result="done",
    )


def run_of_forty_claims(store: Path) -> str:
    """A new run of 40 claims with long fields (many pages) in ``store``, closed; its id."""
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        for i in range(40):
            log.claim(
                effect_id=f"e{i}",
                action_id="a" * 150,
                operation=op(),
                impact_scope=[fs_ref(f"/sandbox/{i}-{j}.txt") for j in range(4)],
            )
    return run_id


# --------------------------------------------------------------------------- threads


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    """Poll until ``predicate`` holds; fail the test after ``TIMEOUT``."""
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.002)


def run_threads(workers: Sequence[Callable[[], None]]) -> list[BaseException | None]:
    """Run the workers in threads that start together; return each one's error (or None).

    A thread that does not finish in time fails the test (a deadlock).
    """
    start = threading.Barrier(len(workers))
    errors: list[BaseException | None] = [None] * len(workers)

    def body(i: int) -> None:
        try:
            start.wait(timeout=BURST_TIMEOUT)
            workers[i]()
        except BaseException as e:
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + BURST_TIMEOUT
    for thread in threads:
        thread.join(timeout=max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    return errors


def no_errors(errors: Sequence[BaseException | None]) -> None:
    """Raise the first error a thread met."""
    for error in errors:
        if error is not None:
            raise error


class Call:
    """``fn()`` running in a thread of its own (named ``name``), and how it ended."""

    def __init__(self, fn: Callable[[], Any], name: str | None = None) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._body, args=(fn,), name=name, daemon=True)
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
        assert not self.thread.is_alive(), f"{self.thread.name} did not finish (deadlock?)"
        if self._error is not None:
            raise self._error
        return self._result


# --------------------------------------------------------------------------- files

Fingerprint = dict[str, tuple[object, ...]]


def fingerprint(*roots: Path, relative_to: Path | None = None) -> Fingerprint:
    """Path -> (content or type, mode, owner, group, links, mtime_ns) of each root and all under it.

    The content is a file's sha256, a symlink's target or a file type. Paths are given
    whole, or relative to ``relative_to`` (``.`` for itself).
    """
    prints: Fingerprint = {}
    for root in roots:
        below = sorted(root.rglob("*")) if root.is_dir() and not root.is_symlink() else []
        for path in [root, *below]:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                content: object = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                content = f"-> {os.readlink(path)}"
            else:
                content = stat.filemode(st.st_mode)
            name = path if relative_to is None else path.relative_to(relative_to)
            prints[str(name)] = (
                content,
                stat.S_IMODE(st.st_mode),
                st.st_uid,
                st.st_gid,
                st.st_nlink,
                st.st_mtime_ns,
            )
    return prints


def listing(path: Path) -> list[str]:
    """Every entry under ``path``, relative, sorted."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --------------------------------------------------------------------------- the ledger command


def ledger(
    *args: str | bytes,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``ledger`` console script to its end; the caller checks the result.

    Its output is text; bytes that are not UTF-8 (a store path that is not) come back as
    surrogates, as Python's own file names do.
    """
    return subprocess.run(
        [LEDGER, *args],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        env=env or subprocess_env(),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def ledger_ok(*args: str) -> str:
    """Run ``ledger`` as :func:`ledger` does, require it to succeed; its stdout."""
    result = ledger(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def ledger_json(*args: str) -> Any:
    """:func:`ledger_ok`'s stdout read as JSON (``args`` ask for it, with ``--json``)."""
    return json.loads(ledger_ok(*args))


def ledger_all(*argvs: Sequence[str]) -> list[subprocess.CompletedProcess[str]]:
    """Run independent ``ledger`` invocations side by side; results in the order given.

    Each one costs a Python start-up with SQLAlchemy and Alembic (most of a second).
    """
    calls = [tuple(argv) for argv in argvs]
    workers = max(1, min(len(calls), 2 * (os.cpu_count() or 1), 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda argv: ledger(*argv), calls))


# --------------------------------------------------------------------------- child processes

# What every script run_child runs starts with: imports, and the builders of claim_small
# (claim) and of a directory's file sizes (sizes). Arguments arrive in sys.argv.
CHILD_LOG_PRELUDE = textwrap.dedent(
    """
    import json, logging, os, resource, signal, sys
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, EffectPersistenceError

    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    REF = fx.ResourceRef("fs", "/sandbox/a.txt", "target")

    def claim(log, effect_id, action_id=None):
        return log.claim(effect_id=effect_id, action_id=action_id or "a-" + effect_id,
                         operation=OP, impact_scope=[REF])

    def sizes(directory):
        return {p.name: p.stat().st_size for p in sorted(Path(directory).iterdir())}
    """
)


def run_python(
    script: str,
    *args: object,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = CHILD_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a child Python that imports this ledger; the caller checks the result."""
    return subprocess.run(
        [PYTHON, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        env=env or subprocess_env(),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def python_stdout(
    script: str,
    *args: object,
    signal_exit: int | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = CHILD_TIMEOUT,
) -> str:
    """:func:`run_python`'s stdout; the child must exit 0, or be killed by ``signal_exit``.

    Otherwise the test fails with the child's stderr.
    """
    result = run_python(script, *args, env=env, cwd=cwd, timeout=timeout)
    expected = 0 if signal_exit is None else -signal_exit
    assert result.returncode == expected, result.stderr
    return result.stdout


def run_child(script: str, *args: object, signal_exit: int | None = None) -> str:
    """:func:`python_stdout` of ``script`` after CHILD_LOG_PRELUDE."""
    return python_stdout(
        CHILD_LOG_PRELUDE + textwrap.dedent(script), *args, signal_exit=signal_exit
    )


# One child process that does one thing to a run, says so on one JSON line, then waits
# for its stdin to close (or for SIGKILL) before it exits.
RUN_CHILD = textwrap.dedent(
    """
    import contextlib, json, sys
    from ledger import _inspect, effects as fx, storage
    from ledger.effect_log import EffectLog, EffectPersistenceError

    what, store, run_id = sys.argv[1:4]
    op = fx.OperationRef("write_file", "test/1", "0" * 64)
    keep = None
    try:
        if what == "load":
            keep = EffectLog.load(run_id, store)
            answer = {"claims": [c.effect_id for c in keep.history().claims]}
        elif what == "claim":
            keep = EffectLog(run_id, store)
            keep.claim(effect_id="e-child", action_id="a-child", operation=op, impact_scope=())
            answer = {"claimed": True}
        elif what == "exclusive":
            held = storage.backend(store).acquire(store)
            keep = held.hold(run_id, storage.Mode.EXCLUSIVE)
            answer = {"held": keep is not None}
        elif what == "recover":
            with EffectLog.load(run_id, store) as log:
                answer = {"recovered": [o.effect_id for o in log.recover_interrupted()]}
        elif what == "recovering":
            keep = contextlib.ExitStack()
            hold = keep.enter_context(_inspect.reader(store).recovering(run_id))
            answer = {"recovering": hold.name}
        else:
            raise SystemExit(f"unknown {what}")
    except EffectPersistenceError as e:
        answer = {"error": str(e)}
    print(json.dumps(answer), flush=True)
    sys.stdin.read()
    """
)


class Child:
    """A child process doing one thing to a run; ``answer`` is what it said."""

    def __init__(self, what: str, store: Path, run_id: str) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, "-c", RUN_CHILD, what, str(store), run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"child {what} said nothing (exit {self.proc.wait(timeout=CHILD_TIMEOUT)})"
        self.answer: dict[str, object] = json.loads(line)

    def finish(self) -> int:
        """Let the child exit; its return code."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
        code = self.proc.wait(timeout=CHILD_TIMEOUT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def kill(self) -> None:
        """SIGKILL the child and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=CHILD_TIMEOUT) == -signal.SIGKILL


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


# --------------------------------------------------------------------------- children started together
#
# Each child signals that it is ready by creating a file, then waits for a ``go`` file
# that the parent creates once every child is ready. Every wait has a timeout, so a
# deadlock fails the test instead of hanging it.

# Shared preamble: arguments, the barrier, and a module-level operation.
CHILD_PRELUDE = r"""
import hashlib
import json
import json
import sys
import time
from pathlib import Path

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id

OP = fx.OperationRef("write_file", "test/1", hashlib.sha256(b"{}").hexdigest())


def barrier(directory, name):
    (directory / f"ready-{name}").touch()
    deadline = time.monotonic() + 60
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"child {name}: the barrier never opened")
        time.sleep(0.002)
"""

# argv: store, barrier dir, name, run id ("-" for a new one), claims, settle (0/1)
WRITER_CHILD = (
    CHILD_PRELUDE
    + r"""
store, gate, name, run_id, count, settle = sys.argv[1:7]
gate = Path(gate)
run_id = new_run_id() if run_id == "-" else run_id
with EffectLog(run_id, store) as log:  # writes nothing yet
    barrier(gate, name)
    for i in range(int(count)):
        ref = fx.ResourceRef("fs", f"/sandbox/{name}/{i}.txt", "target")
        log.claim(
            effect_id=f"e{i}",
            action_id=f"a{i}",
            operation=OP,
            impact_scope=[ref],
            obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
        )
        if settle == "1":
            log.outcome(
                effect_id=f"e{i}",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
                execution_id=f"x{i}",
            )
    # An outcome that failed to persist does not raise: it degrades the log.
    if log.degraded:
        raise SystemExit(f"child {name}: run {run_id} is degraded")
print(run_id, flush=True)
"""
)


def start_child(script: str, *args: object) -> subprocess.Popen[str]:
    """Start a child Python running ``script`` with ``args``, its output piped."""
    return subprocess.Popen(
        [PYTHON, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
    )


def kill_children(procs: Sequence[subprocess.Popen[str]]) -> str:
    """Kill every child still running; what each one said, for a failure message."""
    report = []
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        out, err = proc.communicate()
        report.append(f"pid {proc.pid} rc={proc.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    return "\n".join(report)


def open_barrier(gate: Path, procs: Sequence[subprocess.Popen[str]]) -> None:
    """Wait until every child is ready, then let them all go at once."""
    deadline = time.monotonic() + BURST_TIMEOUT
    while len(list(gate.glob("ready-*"))) < len(procs):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            pytest.fail("a child died or hung before the barrier:\n" + kill_children(procs))
        time.sleep(0.005)
    (gate / "go").touch()


def finish_children(procs: Sequence[subprocess.Popen[str]]) -> list[str]:
    """Wait for every child; each must exit 0 with an empty stderr. Returns their stdouts."""
    deadline = time.monotonic() + BURST_TIMEOUT
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail("a child did not finish (deadlock?):\n" + kill_children(procs))
        assert proc.returncode == 0, f"child {proc.pid} failed:\n{err}"
        assert err == "", f"child {proc.pid} wrote to stderr:\n{err}"
        outputs.append(out)
    return outputs


# --------------------------------------------------------------------------- generated histories
#
# Valid one-run histories for hypothesis, drawn over resources that a wrong overlap test
# confuses: the views (tests/contract/test_view.py) and the log's index
# (tests/pure/test_index.py) are held to the pure ``assess`` on them.

HISTORY_NOW = "2024-01-01T00:00:00.000000+00:00"  # every generated record's timestamp
DIGESTS = (sha(b"one"), sha(b"two"))
REVISIONS = ("r1", "r2")

Pool = tuple[tuple[str, str], ...]


def _fs(*locators: str) -> Pool:
    return tuple(("fs", loc) for loc in locators)


# Pairs of resources that a wrong overlap test confuses (and a few that truly overlap,
# for contrast). Each history draws its resources from one pair, or a few from the whole
# pool, so that such pairs meet in one history often.
TRICKY_POOLS: tuple[Pool, ...] = (
    # % matches anything in LIKE: '/w/a%/%' matches /w/a/b and /w/a_/x.
    _fs("/w/a%", "/w/a/b"),
    _fs("/w/a%", "/w/a_/x"),
    _fs("/w/a%", "/w/a%/x"),
    # _ matches one character in LIKE: '/w/a_/%' matches /w/ab/x, '/w/a_b' matches /w/axb.
    _fs("/w/a_", "/w/ab/x"),
    _fs("/w/a_b", "/w/axb"),
    _fs("/w/a_", "/w/a_/x"),
    # A sibling sharing a prefix is no descendant; / is everyone's ancestor.
    _fs("/w/a", "/w/ab"),
    _fs("/w/a", "/w/a/b"),
    _fs("/", "/w/abc"),
    _fs("/w", "/w/a_/x"),
    # LIKE is case-insensitive, GLOB has * and ?: neither may decide overlap.
    _fs("/w/a", "/w/A/x"),
    _fs("/w/a*", "/w/ab/c"),
    _fs("/w/a?", "/w/ab/c"),
    # Kinds never overlap, even when the locators are equal or look like paths, and
    # owned locators have no ancestors.
    (("fs", "/w/a"), ("owned", "/w/a")),
    (("owned", "/"), ("fs", "/w/a")),
    (("owned", "/w/a"), ("owned", "/w/a/b")),
    (("owned", "rec:1"), ("owned", "rec:1/x")),
    # External URIs overlap as paths do, and a URI ending in '/' is above what follows it.
    (("external", "https://h/v1"), ("external", "https://h/v1/x")),
    (("external", "https://h/v1/"), ("external", "https://h/v1/x")),
    (("external", "https://h/v1"), ("external", "https://h/v10")),
    (("external", "https://h/v1/"), ("external", "https://h/v1")),
    (("external", "mcp://s"), ("external", "mcp://s/t")),
    (("external", "x:/w/a"), ("fs", "/w/a/b")),
)
RESOURCES: Pool = tuple(sorted({res for pool in TRICKY_POOLS for res in pool}))

TERMINAL_SHAPES = (
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.NONE),
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.POSSIBLE),
    (fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN),
    (fx.ExecutionOutcome.FAILED, fx.Impact.NONE),
    (fx.ExecutionOutcome.FAILED, fx.Impact.POSSIBLE),
    (fx.ExecutionOutcome.FAILED, fx.Impact.CERTAIN),
    (fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE),
)
RUNNING_SHAPES = tuple((fx.ExecutionOutcome.RUNNING, impact) for impact in fx.Impact)
# Weights by repetition (pick is uniform): terminal outcomes, complete
# observations and outcome/observation steps come up more often than their alternatives.
OUTCOME_SHAPES = RUNNING_SHAPES + TERMINAL_SHAPES * 2
COVERAGES = (fx.Coverage.COMPLETE, fx.Coverage.COMPLETE, fx.Coverage.PARTIAL)
OPERATIONS = (op("write_file"), op("delete_file"))
KINDS = (*fx.EffectKind, fx.EffectKind.WRITE, fx.EffectKind.WRITE)  # rule 7 is WRITE's
STEPS = ("claim", "outcome", "outcome", "outcome", "observe", "observe", "observe", "resolve")


T = TypeVar("T")


def pick(draw: st.DrawFn, choices: Sequence[T]) -> T:
    """One of ``choices`` (shrinking towards the first); cheaper than a fresh sampled_from."""
    return choices[draw(st.integers(0, len(choices) - 1))]


def draw_ref(draw: st.DrawFn, pool: Pool, roles: tuple[str, str]) -> fx.ResourceRef:
    """A reference from ``pool``; role and revision vary because the view must ignore them."""
    kind, locator = pick(draw, pool)
    return fx.ResourceRef(kind, locator, pick(draw, roles), pick(draw, (None, "r1")))


def draw_postcondition(draw: st.DrawFn, pool: Pool) -> fx.Postcondition:
    """A postcondition with any predicate; SHA256 and REVISION expect one of two values."""
    target = draw_ref(draw, pool, ("target", "parent"))
    predicate = pick(draw, tuple(fx.Predicate))
    if predicate is fx.Predicate.SHA256:
        return fx.Postcondition(target, predicate, pick(draw, DIGESTS))
    if predicate is fx.Predicate.REVISION:
        return fx.Postcondition(target, predicate, pick(draw, REVISIONS))
    return fx.Postcondition(target, predicate)


def draw_observation(
    draw: st.DrawFn, seq: int, pool: Pool, duties: list[fx.Postcondition]
) -> fx.Observation:
    """An observation at ``seq``: of anything in the pool, or of some obligation's target.

    Of a target, it is often made to satisfy that obligation (its other fields stay
    random), so that VERIFIED comes up often enough to be tested.
    """
    exists = pick(draw, (True, False, None))
    sha256 = pick(draw, (None, *DIGESTS))
    revision = pick(draw, (None, *REVISIONS))
    if duties and draw(st.integers(0, 3)) > 0:
        duty = pick(draw, duties)
        kind, locator = duty.target.kind, duty.target.locator
        if draw(st.integers(0, 3)) > 0:
            if duty.predicate is fx.Predicate.EXISTS:
                exists = True
            elif duty.predicate is fx.Predicate.ABSENT:
                exists = False
            elif duty.predicate is fx.Predicate.SHA256:
                exists, sha256 = pick(draw, (True, None)), duty.expected
            else:
                exists, revision = pick(draw, (True, None)), duty.expected
    else:
        kind, locator = pick(draw, pool)
    return fx.Observation(
        observation_id=f"o{seq}",
        seq=seq,
        resource=fx.ResourceRef(
            kind, locator, pick(draw, ("observed", "target")), pick(draw, (None, "r1"))
        ),
        mechanism=pick(draw, tuple(fx.ObservationMechanism)),
        coverage=pick(draw, COVERAGES),
        source_action_id=f"s{seq}",
        exists=exists,
        sha256=sha256,
        revision=revision,
        recorded_at=HISTORY_NOW,
    )


# Recorded values a generated record may hold: JSON of every type, text outside ASCII.
RECORDED_VALUES: tuple[object, ...] = (
    None,
    {"path": "/w/a", "n": 1},
    [],
    "caf\u00e9",
    0,
    2.5,
    True,
    {"nested": [None, {"k": "\u2603"}]},
)
STEP_NAMES = ("", "step-1", "plan/2: write", "\u00e9tape 3")


def draw_claim(
    draw: st.DrawFn,
    seq: int,
    pool: Pool,
    earlier: list[fx.EffectClaim],
    *,
    recorded: bool = False,
) -> fx.EffectClaim:
    """A claim at ``seq`` with up to two obligations and a scope that often covers their targets.

    Of any kind; now and then a retry of an earlier claim (same key, its own fields).
    With ``recorded``, a step (a retry's is its original's) and recorded arguments.
    """
    obligations = tuple(draw_postcondition(draw, pool) for _ in range(draw(st.integers(0, 2))))
    own = [p.target for p in obligations] if draw(st.booleans()) else []
    extra = [draw_ref(draw, pool, ("target", "parent")) for _ in range(draw(st.integers(0, 1)))]
    retried = pick(draw, earlier) if earlier and draw(st.integers(0, 3)) == 0 else None
    return fx.EffectClaim(
        effect_id=f"e{seq}",
        seq=seq,
        action_id=f"a{seq}",
        operation=pick(draw, OPERATIONS),
        impact_scope=(*own, *extra),
        obligations=obligations,
        recorded_at=HISTORY_NOW,
        kind=pick(draw, KINDS),
        idempotency_key=sha(f"e{seq}".encode())[:32]
        if retried is None
        else retried.idempotency_key,
        retry_of=None if retried is None else retried.effect_id,
        step="" if not recorded else (pick(draw, STEP_NAMES) if retried is None else retried.step),
        args=pick(draw, RECORDED_VALUES) if recorded else None,
    )


def draw_outcome(
    draw: st.DrawFn, seq: int, effect_id: str, *, recorded: bool = False
) -> fx.EffectOutcome:
    """An outcome of any allowed shape; only an INTERRUPTED one may be replayed.

    With ``recorded``, a result may be recorded (JSON null included).
    """
    execution, impact = pick(draw, OUTCOME_SHAPES)
    result = pick(draw, RECORDED_VALUES) if recorded else None
    return fx.EffectOutcome(
        effect_id=effect_id,
        seq=seq,
        execution=execution,
        impact=impact,
        execution_id=pick(draw, (None, f"x{seq}")),
        replayed=execution is fx.ExecutionOutcome.INTERRUPTED and draw(st.booleans()),
        recorded_at=HISTORY_NOW,
        result=result,
        result_recorded=result is not None or (recorded and draw(st.booleans())),
    )


@st.composite
def histories(draw: st.DrawFn, *, recorded: bool = False) -> fx.History:
    """A valid one-run history with seq 1..n, built step by step so it is valid by construction.

    With ``recorded``, claims may have a step and recorded arguments and outcomes a
    recorded result (a JSON null among them); a retry carries its original's step.

    Each step is a claim, an outcome of a claim with no terminal outcome yet (so
    outcomes come as none, RUNNING, RUNNING…, RUNNING… then terminal, or terminal
    directly), or an observation; observations mostly look at a target of a settled
    claim, so that verdicts other than PENDING and UNVERIFIED come up often.
    """
    claims: list[fx.EffectClaim] = []
    outcomes: list[fx.EffectOutcome] = []
    observations: list[fx.Observation] = []
    resolutions: list[fx.Resolution] = []
    settled: set[str] = set()
    if draw(st.booleans()):
        pool = pick(draw, TRICKY_POOLS)
    else:
        pool = tuple(
            draw(st.lists(st.sampled_from(RESOURCES), min_size=1, max_size=4, unique=True))
        )
    for seq in range(1, draw(st.integers(0, 32)) + 1):
        unsettled = [c.effect_id for c in claims if c.effect_id not in settled]
        resolved = {r.effect_id for r in resolutions}
        unresolved = [c.effect_id for c in claims if c.effect_id not in resolved]
        step = pick(draw, STEPS if unsettled else ("claim", "observe", "resolve"))
        if step == "resolve" and not unresolved:
            step = "claim"
        if step == "claim":
            claims.append(draw_claim(draw, seq, pool, claims, recorded=recorded))
        elif step == "resolve":
            resolutions.append(
                fx.Resolution(pick(draw, unresolved), seq, draw(st.booleans()), "ops", HISTORY_NOW)
            )
        elif step == "outcome":
            outcomes.append(draw_outcome(draw, seq, pick(draw, unsettled), recorded=recorded))
            if outcomes[-1].terminal:
                settled.add(outcomes[-1].effect_id)
        else:
            # Mostly look at targets of settled claims: only later observations count.
            done = [p for c in claims if c.effect_id in settled for p in c.obligations]
            duties = [p for c in claims for p in c.obligations]
            looked_at = done if done and draw(st.integers(0, 3)) > 0 else duties
            observations.append(draw_observation(draw, seq, pool, looked_at))
    return fx.History(tuple(claims), tuple(outcomes), tuple(observations), tuple(resolutions))


class Payments(http.server.BaseHTTPRequestHandler):
    """A payment API on 127.0.0.1 that performs once per Idempotency-Key.

    A repeat with a key it has seen gets the first answer and charges nothing: what a
    deduplicating system does with the key a claim hands downstream. ``seen`` lists every
    request's key, ``performed`` the payments made (see the ``payments`` fixture).
    """

    seen: list[str]
    performed: dict[str, str]

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append(key)
        if key not in self.performed:
            self.performed[key] = f"payment-{len(self.performed) + 1}"
        body = json.dumps({"id": self.performed[key]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass
