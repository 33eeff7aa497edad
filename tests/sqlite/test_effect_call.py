"""Behaviour of ``log.effect``, ``@log.tool`` and ``log.observe_file``: one tool call, one effect.

Every test writes a real store in ``tmp_path``; nothing of the log is mocked. Where a
commit must be slow, another connection holds SQLite's write lock (``BEGIN
IMMEDIATE``), so the log's own transaction waits for it as it would for a busy disk.
Every wait has a deadline, so a deadlock fails a test instead of hanging it; no
assertion depends on how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import inspect
import linecache
import logging
import os
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, current_call, new_run_id
from ledger.resources import ExternalResource, FilesystemResource, FilesystemRoot, OwnedResource
from tests.builders import file_ref, sha
from tests.sqlite.driver import wal_commits

TIMEOUT = 10.0  # the longest any one wait may take before the test fails
SUCCESS = fx.ExecutionOutcome.REPORTED_SUCCESS
FAILED = fx.ExecutionOutcome.FAILED


class ToolError(Exception):
    """What the tools of these tests raise."""


class NotSentError(ToolError):
    """A tool's error raised before its request left the machine."""


def outcomes_of(log: EffectLog, effect_id: str) -> list[tuple[fx.ExecutionOutcome, fx.Impact]]:
    """The outcomes the log holds for one effect, as (execution, impact)."""
    return [(o.execution, o.impact) for o in log.history().outcomes if o.effect_id == effect_id]


def write_postcondition(ref: fx.ResourceRef, content: bytes) -> fx.Postcondition:
    """The postcondition of writing ``content`` to ``ref``."""
    return fx.Postcondition(ref, fx.Predicate.SHA256, sha(content))


def seqs(history: fx.History) -> list[tuple[str, int]]:
    """Every record of a history as (record type, seq), in seq order."""
    return [(type(r).record_type, r.seq) for r in history.records()]


def enter_then_raise(
    scope: Any, error: BaseException, give: Callable[[Any], object] = lambda call: None
) -> None:
    """Enter ``scope``; the body calls ``give(call)``, then raises ``error``."""
    with scope as call:
        give(call)
        raise error


async def enter_then_raise_async(
    scope: Any, error: BaseException, give: Callable[[Any], object] = lambda call: None
) -> None:
    """Enter ``scope`` with ``async with``; the body calls ``give(call)``, then raises ``error``."""
    async with scope as call:
        give(call)
        raise error


@pytest.fixture
def store(log: EffectLog) -> EffectLog:
    """The log, its store created by a first effect (so that another connection can lock it)."""
    with log.effect("warm_up"):
        pass
    return log


# --------------------------------------------------------------------------- entering


def test_entering_claims_durably_before_the_body_runs(log: EffectLog, store_dir: Path) -> None:
    """The body sees its claim already in the store, with the effect's id and idempotency key."""
    with log.effect("send", args={"to": "a"}, effect_id="e1", action_id="a1") as call:
        with EffectLog.load(log.run_id, store_dir) as reader:
            stored = reader.history().claims
        assert [(c.effect_id, c.action_id, c.operation) for c in stored] == [
            ("e1", "a1", fx.OperationRef("send", "", fx.args_digest({"to": "a"})))
        ]
        assert call.effect_id == "e1"
        assert call.claim == log.history().claim("e1")
        assert call.idempotency_key == fx.idempotency_key(log.run_id, "e1")
        assert call.claim.idempotency_key == call.idempotency_key
        assert call.kind is fx.EffectKind.WRITE
        assert log.assess("e1").verdict is fx.EffectVerdict.PENDING


def test_the_defaults_give_a_fresh_effect_id_its_action_id_and_the_digest_of_no_arguments(
    log: EffectLog,
) -> None:
    """Without ids, each effect gets a fresh id, used as its action id; args None digest as {}."""
    with log.effect("ping") as first:
        pass
    with log.effect("ping", args={}) as second:
        pass
    assert first.effect_id != second.effect_id
    for call in (first, second):
        fx.check_identifier(call.effect_id, "effect_id")
        assert call.claim.action_id == call.effect_id
        assert call.claim.operation == fx.OperationRef("ping", "", fx.args_digest({}))
        assert call.claim.impact_scope == call.claim.obligations == ()


def test_the_claim_carries_every_argument_given(log: EffectLog, sandbox: FilesystemRoot) -> None:
    """Operation, backend, args digest, kind, scope and postconditions reach the claim."""
    ref = file_ref(sandbox, "out.txt")
    condition = fx.Postcondition(ref, fx.Predicate.EXISTS)
    with log.effect(
        "write_file",
        args={"path": "out.txt", "n": [1, 2.5, None, True]},
        kind=fx.EffectKind.IDEMPOTENT,
        impact_scope=[ref],
        obligations=[condition],
        effect_id="e1",
        action_id="step-1",
        backend="fs/2",
    ) as call:
        (sandbox.path / "out.txt").write_text("x")
    claim = call.claim
    assert claim.operation == fx.OperationRef(
        "write_file", "fs/2", fx.args_digest({"n": [1, 2.5, None, True], "path": "out.txt"})
    )
    assert claim.kind is fx.EffectKind.IDEMPOTENT
    assert claim.impact_scope == (ref,)
    assert claim.obligations == (condition,)
    assert claim.action_id == "step-1"


def test_impact_scope_takes_references_and_resource_objects(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """A FilesystemResource or OwnedResource in the scope is turned into its reference."""
    resource = FilesystemResource.resolve(sandbox, "a.txt", allow_missing=True)
    note = OwnedResource("notes", "alice", "acme", "notes", "n1", revision="r1")
    plain = file_ref(sandbox, "b.txt", role="source")
    with log.effect("edit", impact_scope=[resource, note, plain]) as call:
        pass
    assert call.claim.impact_scope == (
        resource.to_ref("target"),
        note.to_ref("target"),
        plain,
    )


def test_an_external_resource_in_the_scope_is_claimed(log: EffectLog) -> None:
    """An ExternalResource in the scope is claimed as its external reference."""
    ticket = ExternalResource("https://Tickets.Example/t/42")
    with log.effect("update_ticket", impact_scope=[ticket]) as call:
        pass
    assert call.claim.impact_scope == (ticket.to_ref("target"),)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"args": {1: "a"}}, ValueError),  # a key that is not a str
        ({"args": {"x": float("nan")}}, ValueError),
        ({"args": {"x": {1, 2}}}, ValueError),
        ({"args": {"x": b"bytes"}}, ValueError),
        ({"args": {"x": Path("/p")}}, ValueError),
        ({"kind": "write"}, TypeError),
        ({"impact_scope": "/a"}, TypeError),
        ({"impact_scope": [object()]}, TypeError),
        ({"obligations": ["exists"]}, TypeError),
        ({"effect_id": ""}, ValueError),
        ({"effect_id": "a\nb"}, ValueError),
        ({"action_id": "x" * 201}, ValueError),
        ({"backend": 3}, TypeError),
        ({"no_impact": (ValueError, "KeyError")}, TypeError),
        ({"no_impact": [ValueError]}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    log: EffectLog, sandbox: FilesystemRoot, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """A bad argument raises when log.effect is called: no observation, no claim, no file."""
    condition = write_postcondition(file_ref(sandbox, "a.txt"), b"a")
    with pytest.raises(error):
        log.effect("write_file", **{"obligations": [condition], **kwargs})
    with pytest.raises(ValueError, match="operation name"):
        log.effect("", obligations=[condition])
    assert log.history() == fx.History((), (), ())
    assert not log.path.exists()


def test_a_scope_is_entered_once(log: EffectLog) -> None:
    """Entering the object log.effect returned a second time is a RuntimeError."""
    scope = log.effect("ping")
    with scope:
        pass
    with pytest.raises(RuntimeError, match="entered once"), scope:
        pass
    assert len(log.history().claims) == 1


def test_a_taken_effect_id_is_refused_before_its_baseline_is_observed(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Reusing an effect id is a ValueError, and no observation is made for it."""
    condition = write_postcondition(file_ref(sandbox, "a.txt"), b"a")
    with log.effect("write_file", effect_id="e1"):
        pass
    with (
        pytest.raises(ValueError, match="already claimed"),
        log.effect("write_file", effect_id="e1", obligations=[condition]),
    ):
        pytest.fail("the body ran")
    assert log.history().observations == ()
    assert len(log.history().claims) == 1


# --------------------------------------------------------------------------- leaving


def test_a_normal_exit_records_reported_success_with_certain_impact(log: EffectLog) -> None:
    """A body that returns settles the effect REPORTED_SUCCESS / CERTAIN."""
    with log.effect("send", effect_id="e1"):
        pass
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.CERTAIN)]
    assert log.assess("e1").verdict is fx.EffectVerdict.UNVERIFIED


def test_a_read_that_returns_records_impact_none(log: EffectLog) -> None:
    """A READ effect's normal exit records REPORTED_SUCCESS with impact NONE."""
    with log.effect("look", kind=fx.EffectKind.READ, effect_id="e1"):
        pass
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.NONE)]
    assert not log.assess("e1").unresolved_impact


@pytest.mark.parametrize("kind", list(fx.EffectKind))
def test_an_exception_records_failed_possible_and_is_reraised_unchanged(
    log: EffectLog, kind: fx.EffectKind
) -> None:
    """A body that raises settles the effect FAILED / POSSIBLE; the very same exception goes on."""
    error = ToolError("the provider answered 502")
    with pytest.raises(ToolError) as raised, log.effect("send", kind=kind, effect_id="e1"):
        raise error
    assert raised.value is error
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.POSSIBLE)]


def test_a_base_exception_in_the_body_records_failed_possible(log: EffectLog) -> None:
    """Ctrl-C (or SystemExit) in the body may have cut the call short: FAILED / POSSIBLE, re-raised."""
    with pytest.raises(KeyboardInterrupt), log.effect("send", effect_id="e1"):
        raise KeyboardInterrupt
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.POSSIBLE)]


def test_an_exception_listed_in_no_impact_records_impact_none(log: EffectLog) -> None:
    """An error of a type in no_impact (or a subclass of one) records FAILED / NONE: verdict FAILED."""
    with pytest.raises(NotSentError), log.effect("send", effect_id="e1", no_impact=(NotSentError,)):
        raise NotSentError
    with pytest.raises(NotSentError), log.effect("send", effect_id="e2", no_impact=ToolError):
        raise NotSentError
    with pytest.raises(ToolError), log.effect("send", effect_id="e3", no_impact=NotSentError):
        raise ToolError
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.NONE)]
    assert outcomes_of(log, "e2") == [(FAILED, fx.Impact.NONE)]
    assert outcomes_of(log, "e3") == [(FAILED, fx.Impact.POSSIBLE)]
    assert log.assess("e1").verdict is fx.EffectVerdict.FAILED


def test_the_outcome_the_body_gives_is_kept(log: EffectLog) -> None:
    """call.succeeded / call.failed record at once, and the exit adds no outcome of its own."""
    with log.effect("send", effect_id="e1") as call:
        given = call.succeeded(impact=fx.Impact.NONE)
        assert log.history().outcomes[-1] == given
        assert call.outcome_given
    with pytest.raises(ToolError):
        enter_then_raise(
            log.effect("send", effect_id="e2"),
            ToolError(),
            lambda call: call.failed(impact=fx.Impact.NONE),
        )
    with log.effect("send", effect_id="e3") as call:
        call.failed()
    with log.effect("look", kind=fx.EffectKind.READ, effect_id="e4") as call:
        call.succeeded()
    with pytest.raises(ToolError):
        enter_then_raise(
            log.effect("send", effect_id="e5"), ToolError(), lambda call: call.succeeded()
        )
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.NONE)]
    assert outcomes_of(log, "e2") == [(FAILED, fx.Impact.NONE)]
    assert outcomes_of(log, "e3") == [(FAILED, fx.Impact.POSSIBLE)]
    assert outcomes_of(log, "e4") == [(SUCCESS, fx.Impact.NONE)]
    assert outcomes_of(log, "e5") == [(SUCCESS, fx.Impact.CERTAIN)]


def test_an_outcome_the_body_records_through_the_log_is_kept(log: EffectLog) -> None:
    """A terminal outcome recorded with log.outcome is kept; a RUNNING one is followed by the exit's."""
    with log.effect("send", effect_id="e1") as call:
        log.outcome(effect_id=call.effect_id, execution=FAILED, impact=fx.Impact.NONE)
    with log.effect("send", effect_id="e2") as call:
        log.outcome(
            effect_id=call.effect_id,
            execution=fx.ExecutionOutcome.RUNNING,
            impact=fx.Impact.POSSIBLE,
        )
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.NONE)]
    assert outcomes_of(log, "e2") == [
        (fx.ExecutionOutcome.RUNNING, fx.Impact.POSSIBLE),
        (SUCCESS, fx.Impact.CERTAIN),
    ]


def test_a_second_outcome_from_the_body_is_a_value_error(log: EffectLog) -> None:
    """The body gives at most one outcome; a bad impact is refused without using it up."""
    with log.effect("send", effect_id="e1") as call:
        with pytest.raises(TypeError, match="Impact"):
            call.succeeded(impact="none")  # type: ignore[arg-type]
        call.succeeded()
        with pytest.raises(ValueError, match="already has its outcome"):
            call.failed()
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.CERTAIN)]


def test_a_failure_to_record_never_hides_the_bodys_exception(
    log: EffectLog, caplog: pytest.LogCaptureFixture
) -> None:
    """If the outcome cannot be recorded (the log was closed), the body's exception still goes on."""
    error = ToolError("original")
    with pytest.raises(ToolError) as raised:
        enter_then_raise(log.effect("send", effect_id="e1"), error, lambda call: log.close())
    assert raised.value is error
    assert "could not be recorded" in caplog.text
    other = EffectLog(new_run_id(), log.directory)
    with pytest.raises(ValueError, match="closed"), other.effect("send"):
        other.close()  # the body returns: the exit's own failure is raised


# --------------------------------------------------------------------------- files


def test_a_real_file_write_ends_verified(log: EffectLog, sandbox: FilesystemRoot) -> None:
    """The postcondition's file is observed after the outcome, so a write that landed is VERIFIED."""
    ref = file_ref(sandbox, "report.txt")
    with log.effect(
        "write_file",
        args={"path": "report.txt"},
        impact_scope=[ref],
        obligations=[write_postcondition(ref, b"figures\n")],
        effect_id="e1",
    ):
        (sandbox.path / "report.txt").write_bytes(b"figures\n")
    assessment = log.assess("e1")
    assert assessment.verdict is fx.EffectVerdict.VERIFIED
    after = log.history().observations[-1]
    assert assessment.evidence == (after.observation_id,)
    assert (after.exists, after.sha256) == (True, sha(b"figures\n"))
    claim = log.history().claim("e1")
    assert claim is not None
    assert fx.decide(claim, log.history()).step is fx.NextStep.DONE


def test_a_baseline_observation_is_recorded_before_the_claim(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Each fs target is observed before the claim and again after the outcome, by the action."""
    (sandbox.path / "old.txt").write_bytes(b"old")
    new, old = file_ref(sandbox, "new.txt"), file_ref(sandbox, "old.txt")
    obligations = [
        fx.Postcondition(new, fx.Predicate.EXISTS),
        write_postcondition(new, b"new"),  # the same file: observed once
        fx.Postcondition(old, fx.Predicate.ABSENT),
    ]
    with log.effect("move", obligations=obligations, effect_id="e1", action_id="step-7"):
        (sandbox.path / "old.txt").rename(sandbox.path / "new.txt")
        (sandbox.path / "new.txt").write_bytes(b"new")
    history = log.history()
    assert seqs(history) == [
        ("observation", 1),
        ("observation", 2),
        ("claim", 3),
        ("outcome", 4),
        ("observation", 5),
        ("observation", 6),
    ]
    seen = [(o.resource, o.exists, o.sha256, o.source_action_id) for o in history.observations]
    assert seen == [
        (new, False, None, "step-7"),
        (old, True, sha(b"old"), "step-7"),
        (new, True, sha(b"new"), "step-7"),
        (old, False, None, "step-7"),
    ]
    assert log.assess("e1").verdict is fx.EffectVerdict.VERIFIED


def test_a_baseline_is_observed_before_a_later_claim_of_the_run_too(
    store: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Once the run has started, the baseline is still written before the claim."""
    ref = file_ref(sandbox, "a.txt")
    with store.effect("write_file", obligations=[write_postcondition(ref, b"a")], effect_id="e1"):
        (sandbox.path / "a.txt").write_bytes(b"a")
    history = store.history()
    claim = history.claim("e1")
    assert claim is not None
    before = [o for o in history.observations if o.seq < claim.seq]
    assert [(o.resource, o.exists) for o in before] == [(ref, False)]


def test_an_effect_with_file_targets_costs_two_commits(
    store: EffectLog, sandbox: FilesystemRoot
) -> None:
    """The baseline rides with the claim, the later observations with the outcome."""
    assert store.path is not None
    refs = [file_ref(sandbox, name) for name in ("a.txt", "b.txt")]
    before = wal_commits(store.path)
    with store.effect(
        "write_both", obligations=[fx.Postcondition(r, fx.Predicate.EXISTS) for r in refs]
    ):
        assert wal_commits(store.path) == before + 1  # baseline and claim: durable together
        for ref in refs:
            Path(ref.locator).write_bytes(b"x")
    assert wal_commits(store.path) == before + 2
    assert [kind for kind, _ in seqs(store.history())][-6:] == [
        "observation",
        "observation",
        "claim",
        "outcome",
        "observation",
        "observation",
    ]


def test_an_effect_whose_body_gave_its_outcome_observes_after_in_one_commit(
    store: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Two targets seen after the call, the outcome already given: one more commit."""
    assert store.path is not None
    refs = [file_ref(sandbox, name) for name in ("a.txt", "b.txt")]
    with store.effect(
        "write_both", obligations=[fx.Postcondition(r, fx.Predicate.EXISTS) for r in refs]
    ) as call:
        call.succeeded()
        after_outcome = wal_commits(store.path)
    assert wal_commits(store.path) == after_outcome + 1
    assert len(store.history().observations) == 4


def test_a_write_that_failed_leaving_its_file_as_it_was_may_be_retried(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """A WRITE that raised before touching its file: FAILED / POSSIBLE, observed unchanged, decided RETRY."""
    (sandbox.path / "a.txt").write_bytes(b"before")
    ref = file_ref(sandbox, "a.txt")
    with (
        pytest.raises(ToolError),
        log.effect("write_file", obligations=[write_postcondition(ref, b"after")], effect_id="e1"),
    ):
        raise ToolError
    history = log.history()
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.POSSIBLE)]
    assert [o.sha256 for o in history.observations] == [sha(b"before"), sha(b"before")]
    assert log.assess("e1").verdict is fx.EffectVerdict.CONTRADICTED
    claim = history.claim("e1")
    assert claim is not None
    assert fx.decide(claim, history).step is fx.NextStep.RETRY


def test_only_postconditions_on_files_are_observed(log: EffectLog) -> None:
    """A postcondition on an owned record is left to the worker: nothing observes it."""
    note = OwnedResource("notes", "alice", "acme", "notes", "n1").to_ref("target")
    with log.effect("edit_note", obligations=[fx.Postcondition(note, fx.Predicate.EXISTS)]):
        pass
    assert log.history().observations == ()


def test_a_file_that_cannot_be_observed_is_logged_and_left_out(
    log: EffectLog, sandbox: FilesystemRoot, caplog: pytest.LogCaptureFixture
) -> None:
    """A target that cannot be looked at (a symlink loop) is skipped with a warning; the call goes on."""
    (sandbox.path / "loop").symlink_to("loop")
    ref = fx.ResourceRef("fs", str(sandbox.path / "loop"), "target")
    with (
        caplog.at_level(logging.WARNING, logger="ledger"),
        log.effect("write_file", obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)]) as call,
    ):
        pass
    assert log.history().observations == ()
    assert outcomes_of(log, call.effect_id) == [(SUCCESS, fx.Impact.CERTAIN)]
    assert log.assess(call.effect_id).verdict is fx.EffectVerdict.UNVERIFIED
    assert caplog.text.count("could not be observed") == 2  # before and after the call


# --------------------------------------------------------------------------- observe_file


def test_observe_file_records_the_digest_of_a_file(log: EffectLog, sandbox: FilesystemRoot) -> None:
    """A file is read whole: FILESYSTEM_READ, COMPLETE, exists, its SHA-256."""
    (sandbox.path / "a.txt").write_bytes(b"hello")
    (sandbox.path / "empty").write_bytes(b"")
    resource = FilesystemResource.resolve(sandbox, "a.txt")
    seen = log.observe_file(resource, source_action_id="check-1", observation_id="o1")
    assert seen == log.history().observations[0]
    assert seen.observation_id == "o1"
    assert seen.resource == resource.to_ref("target")
    assert seen.mechanism is fx.ObservationMechanism.FILESYSTEM_READ
    assert seen.coverage is fx.Coverage.COMPLETE
    assert seen.source_action_id == "check-1"
    assert (seen.exists, seen.sha256, seen.revision) == (True, sha(b"hello"), None)
    empty = log.observe_file(file_ref(sandbox, "empty"), source_action_id="check-1")
    assert (empty.exists, empty.sha256) == (True, sha(b""))


def test_observe_file_takes_an_fs_reference_as_it_is(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """An fs ResourceRef keeps its role; ids default to fresh unique ones."""
    ref = file_ref(sandbox, "a.txt", role="source")
    first = log.observe_file(ref, source_action_id="s")
    second = log.observe_file(ref, source_action_id="s")
    assert first.resource == ref
    assert first.observation_id != second.observation_id


def test_observe_file_records_a_missing_file_as_absent(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """A missing file, a dangling symlink and a path through a file are absent."""
    (sandbox.path / "file").write_bytes(b"x")
    (sandbox.path / "dangling").symlink_to("nowhere")
    for name in ("missing", "missing/deeper", "dangling", "file/below"):
        ref = fx.ResourceRef("fs", str(sandbox.path / name), "target")
        seen = log.observe_file(ref, source_action_id="s")
        assert (seen.exists, seen.sha256) == (False, None), name
        assert seen.mechanism is fx.ObservationMechanism.FILESYSTEM_READ
        assert seen.coverage is fx.Coverage.COMPLETE


def test_observe_file_follows_a_symlink_to_its_content(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """A symlink reads as the file it points at: what a reader of the path gets."""
    (sandbox.path / "real").write_bytes(b"content")
    (sandbox.path / "link").symlink_to("real")
    ref = fx.ResourceRef("fs", str(sandbox.path / "link"), "target")
    assert log.observe_file(ref, source_action_id="s").sha256 == sha(b"content")


def test_observe_file_records_what_has_no_content_as_existing_without_a_digest(
    log: EffectLog, sandbox: FilesystemRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory, FIFO or socket exists, with no digest, by FILESYSTEM_STAT; a FIFO is not waited on."""
    (sandbox.path / "dir").mkdir()
    os.mkfifo(sandbox.path / "fifo")
    monkeypatch.chdir(sandbox.path)  # a socket's path is short: relative to the sandbox
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("socket")
    listener.close()
    for name in ("dir", "fifo", "socket"):
        seen = log.observe_file(file_ref(sandbox, name), source_action_id="s")
        assert (seen.exists, seen.sha256) == (True, None), name
        assert seen.mechanism is fx.ObservationMechanism.FILESYSTEM_STAT
        assert seen.coverage is fx.Coverage.COMPLETE
    # So a directory satisfies EXISTS, and leaves a SHA256 postcondition undecided.
    dir_ref = file_ref(sandbox, "dir")
    with log.effect("mkdir", obligations=[fx.Postcondition(dir_ref, fx.Predicate.EXISTS)]) as made:
        pass
    assert log.assess(made.effect_id).verdict is fx.EffectVerdict.VERIFIED
    with log.effect("write", obligations=[write_postcondition(dir_ref, b"x")]) as written:
        pass
    assert log.assess(written.effect_id).verdict is fx.EffectVerdict.UNVERIFIED


def test_observe_file_raises_when_not_even_existence_can_be_told(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """A symlink loop is an OSError, and nothing is recorded."""
    (sandbox.path / "loop").symlink_to("loop")
    ref = fx.ResourceRef("fs", str(sandbox.path / "loop"), "target")
    with pytest.raises(OSError) as raised:
        log.observe_file(ref, source_action_id="s")
    assert raised.value.errno == errno.ELOOP
    assert log.history().observations == ()


def test_observe_file_refuses_what_is_not_a_file(log: EffectLog) -> None:
    """Another kind of reference is a ValueError; anything else a TypeError; ids are checked."""
    owned = OwnedResource("notes", "alice", "acme", "notes", "n1").to_ref("target")
    with pytest.raises(ValueError, match="reads files"):
        log.observe_file(owned, source_action_id="s")
    with pytest.raises(TypeError, match="FilesystemResource"):
        log.observe_file("/etc/hostname", source_action_id="s")  # type: ignore[arg-type]
    ref = fx.ResourceRef("fs", "/nonexistent", "target")
    with pytest.raises(ValueError, match="source_action_id"):
        log.observe_file(ref, source_action_id="")
    with pytest.raises(ValueError, match="observation_id"):
        log.observe_file(ref, source_action_id="s", observation_id="a\x00")
    assert log.history().observations == ()


# --------------------------------------------------------------------------- @log.tool


def test_tool_keeps_the_functions_signature_name_and_docstring(log: EffectLog) -> None:
    """Frameworks that read a tool's signature, name and docstring see the original."""

    def search(query: str, *, limit: int = 10, tags: tuple[str, ...] = ()) -> list[str]:
        """Search the notes."""
        return [query] * limit

    wrapped = log.tool(kind=fx.EffectKind.READ)(search)
    assert inspect.signature(wrapped) == inspect.signature(search)
    assert wrapped.__name__ == "search"
    assert wrapped.__doc__ == "Search the notes."
    assert wrapped.__wrapped__ is search  # type: ignore[attr-defined]
    assert not inspect.iscoroutinefunction(wrapped)


def test_each_tool_call_is_one_effect_with_its_bound_arguments(log: EffectLog) -> None:
    """A call's arguments, defaults applied, are the effect's args however they were passed."""

    @log.tool(kind=fx.EffectKind.IDEMPOTENT, backend="notes/1")
    def add(a: int, b: int = 2, *rest: int, scale: float = 1.0, **extra: str) -> float:
        return (a + b + sum(rest)) * scale

    assert add(1) == 3
    assert add(a=1, b=2) == 3
    assert add(1, 2, 3, scale=2.0, note="x") == 12
    claims = log.history().claims
    assert len(claims) == 3
    plain = fx.args_digest({"a": 1, "b": 2, "rest": [], "scale": 1.0, "extra": {}})
    full = fx.args_digest({"a": 1, "b": 2, "rest": [3], "scale": 2.0, "extra": {"note": "x"}})
    assert [c.operation for c in claims] == [
        fx.OperationRef("add", "notes/1", plain),
        fx.OperationRef("add", "notes/1", plain),
        fx.OperationRef("add", "notes/1", full),
    ]
    assert {c.kind for c in claims} == {fx.EffectKind.IDEMPOTENT}
    assert len({c.effect_id for c in claims}) == 3
    assert [outcomes_of(log, c.effect_id) for c in claims] == [[(SUCCESS, fx.Impact.CERTAIN)]] * 3


def test_a_bare_tool_decorator_records_a_write_named_after_the_function(log: EffectLog) -> None:
    """``@log.tool`` without arguments makes WRITE effects; ``operation`` renames them."""

    @log.tool
    def delete(path: str) -> None:
        """Delete a file."""

    @log.tool(operation="fs.delete")
    def delete2(path: str) -> None:
        pass

    delete("/a")
    delete2("/b")
    first, second = log.history().claims
    assert (first.operation.name, first.kind) == ("delete", fx.EffectKind.WRITE)
    assert second.operation.name == "fs.delete"
    assert delete.__doc__ == "Delete a file."


def test_a_tools_exception_is_recorded_and_reraised(log: EffectLog) -> None:
    """A tool that raises records FAILED (NONE for its no_impact types) and raises the same error."""

    @log.tool(no_impact=NotSentError)
    def send(to: str) -> None:
        raise NotSentError(to) if to == "nobody" else ToolError(to)

    with pytest.raises(ToolError, match="alice"):
        send("alice")
    with pytest.raises(NotSentError, match="nobody"):
        send("nobody")
    first, second = log.history().claims
    assert outcomes_of(log, first.effect_id) == [(FAILED, fx.Impact.POSSIBLE)]
    assert outcomes_of(log, second.effect_id) == [(FAILED, fx.Impact.NONE)]


def test_tool_scope_and_postconditions_may_be_computed_from_the_arguments(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Callables for impact_scope and obligations get the call's arguments; the write ends VERIFIED."""
    calls: list[tuple[Any, ...]] = []

    def scope(name: str, text: str) -> list[FilesystemResource]:
        calls.append((name, text))
        return [FilesystemResource.resolve(sandbox, name, allow_missing=True)]

    def obligations(name: str, text: str) -> list[fx.Postcondition]:
        return [write_postcondition(file_ref(sandbox, name), text.encode())]

    @log.tool(impact_scope=scope, obligations=obligations)
    def write_file(name: str, text: str) -> int:
        return (sandbox.path / name).write_text(text)

    assert write_file("a.txt", text="hello") == 5
    assert calls == [("a.txt", "hello")]
    claim = log.history().claims[0]
    assert claim.impact_scope == (file_ref(sandbox, "a.txt"),)
    assert log.assess(claim.effect_id).verdict is fx.EffectVerdict.VERIFIED


def test_a_tool_called_wrongly_or_with_arguments_json_cannot_hold_writes_nothing(
    log: EffectLog,
) -> None:
    """Arguments that do not bind are a TypeError, ones JSON cannot hold a ValueError; the function never runs."""
    ran = []

    @log.tool
    def write(path: object) -> None:
        ran.append(path)

    with pytest.raises(TypeError):
        write()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        write("/a", "/b")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="JSON"):
        write(Path("/a"))
    assert ran == []
    assert log.history() == fx.History((), (), ())


def test_tool_refuses_what_it_cannot_wrap(log: EffectLog) -> None:
    """Generators, non-callables and bad options are refused when decorating."""

    def gen() -> Iterator[int]:
        yield 1

    async def agen() -> Any:
        yield 1

    for fn in (gen, agen):
        with pytest.raises(TypeError, match="generator"):
            log.tool(fn)
    with pytest.raises(TypeError, match="EffectKind"):
        log.tool(kind="read")  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        log.tool(fx.EffectKind.READ)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="operation"):
        log.tool(operation="")
    with pytest.raises(TypeError, match="no_impact"):
        log.tool(no_impact=("x",))  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="__name__"):
        log.tool(functools.partial(print, "x"))


def test_an_async_tool_keeps_its_signature_and_is_one_effect_per_call(log: EffectLog) -> None:
    """An async function stays a coroutine function with its signature; each await is one effect."""

    async def fetch(url: str, retries: int = 1) -> str:
        """Fetch a page."""
        await asyncio.sleep(0)
        return url

    wrapped = log.tool(kind=fx.EffectKind.READ)(fetch)
    assert inspect.iscoroutinefunction(wrapped)
    assert inspect.signature(wrapped) == inspect.signature(fetch)
    assert wrapped.__doc__ == "Fetch a page."

    async def main() -> list[str]:
        return list(await asyncio.gather(wrapped("a"), wrapped(url="b", retries=3)))

    assert asyncio.run(main()) == ["a", "b"]
    claims = log.history().claims
    assert sorted(c.operation.args_sha256 for c in claims) == sorted(
        [fx.args_digest({"url": "a", "retries": 1}), fx.args_digest({"url": "b", "retries": 3})]
    )
    assert {o.impact for o in log.history().outcomes} == {fx.Impact.NONE}


def test_a_tool_reads_its_own_call_and_key_from_current_call(log: EffectLog) -> None:
    """Inside a @log.tool function, current_call() is its effect: the key to hand downstream."""
    seen: list[tuple[str, str]] = []

    @log.tool(kind=fx.EffectKind.IDEMPOTENT)
    def upsert(name: str) -> str:
        call = current_call()
        assert call is not None
        seen.append((call.effect_id, call.idempotency_key))
        return name

    assert current_call() is None
    upsert("a")
    upsert("b")
    assert current_call() is None
    claims = log.history().claims
    assert seen == [(c.effect_id, c.idempotency_key) for c in claims]
    assert len({key for _, key in seen}) == 2


def test_current_call_is_the_innermost_block_and_per_thread(log: EffectLog) -> None:
    """Nested blocks see the innermost; a block's exit (even by an exception) restores the outer; other threads see none."""
    elsewhere: list[object] = []
    with log.effect("outer") as outer:
        assert current_call() is outer
        inside: list[object] = []

        def fail_inside() -> None:
            with log.effect("inner") as inner:
                inside.append(current_call() is inner)
                raise KeyError("boom")

        with pytest.raises(KeyError):
            fail_inside()
        assert inside == [True]
        assert current_call() is outer
        thread = threading.Thread(target=lambda: elsewhere.append(current_call()))
        thread.start()
        thread.join()
    assert elsewhere == [None]
    assert current_call() is None


# --------------------------------------------------------------------------- asyncio


def waiting_for_the_write_lock() -> bool:
    """Whether a thread of this process waits in the store's BEGIN IMMEDIATE (the lock is held)."""
    for frame in sys._current_frames().values():
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        # It tries BEGIN IMMEDIATE again and again, sleeping between tries.
        if frame.f_code.co_name == "begin_immediate" and (
            "BEGIN IMMEDIATE" in line or "sleep" in line
        ):
            return True
    return False


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[Callable[[], None]]:
    """Hold SQLite's write lock on ``path`` from another connection; yield its release."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            other.execute("ROLLBACK")

    try:
        yield release
    finally:
        release()
        other.close()


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll on the event loop until ``predicate`` holds; fail after ``TIMEOUT``."""
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.001)


def test_async_with_records_as_with_does(log: EffectLog, sandbox: FilesystemRoot) -> None:
    """In asyncio code: claim before the body, success, FAILED on an error re-raised unchanged, VERIFIED files."""
    ref = file_ref(sandbox, "a.txt")
    error = ToolError("502")

    async def main() -> None:
        async with log.effect(
            "write_file", obligations=[write_postcondition(ref, b"a")], effect_id="e1"
        ) as call:
            assert log.history().claim("e1") == call.claim
            assert call.idempotency_key == fx.idempotency_key(log.run_id, "e1")
            (sandbox.path / "a.txt").write_bytes(b"a")
        with pytest.raises(ToolError) as raised:
            async with log.effect("send", effect_id="e2"):
                raise error
        assert raised.value is error
        with pytest.raises(NotSentError):
            async with log.effect("send", effect_id="e3", no_impact=(NotSentError,)):
                raise NotSentError
        async with log.effect("look", kind=fx.EffectKind.READ, effect_id="e4"):
            pass

    asyncio.run(main())
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.CERTAIN)]
    assert log.assess("e1").verdict is fx.EffectVerdict.VERIFIED
    assert [type(r).record_type for r in log.history().records()][:4] == [
        "observation",
        "claim",
        "outcome",
        "observation",
    ]
    assert outcomes_of(log, "e2") == [(FAILED, fx.Impact.POSSIBLE)]
    assert outcomes_of(log, "e3") == [(FAILED, fx.Impact.NONE)]
    assert outcomes_of(log, "e4") == [(SUCCESS, fx.Impact.NONE)]


def test_an_async_bodys_outcome_is_written_off_the_loop_awaited_or_not(log: EffectLog) -> None:
    """call.succeeded / call.failed return a future of the outcome; the exit waits for it anyway."""

    async def main() -> fx.EffectOutcome:
        async with log.effect("send", effect_id="e1") as call:
            outcome = await call.succeeded(impact=fx.Impact.NONE)
            assert log.history().outcomes[-1] == outcome
        async with log.effect("send", effect_id="e2") as call:
            call.failed()  # not awaited: the exit waits for it
        with pytest.raises(ToolError):
            await enter_then_raise_async(
                log.effect("send", effect_id="e3"),
                ToolError(),
                lambda call: call.failed(impact=fx.Impact.NONE),
            )
        return outcome

    outcome = asyncio.run(main())
    assert (outcome.execution, outcome.impact) == (SUCCESS, fx.Impact.NONE)
    assert outcomes_of(log, "e1") == [(SUCCESS, fx.Impact.NONE)]
    assert outcomes_of(log, "e2") == [(FAILED, fx.Impact.POSSIBLE)]
    assert outcomes_of(log, "e3") == [(FAILED, fx.Impact.NONE)]


def test_other_tasks_run_while_a_claim_waits_for_the_disk(store: EffectLog) -> None:
    """While a claim's commit waits (another connection holds the write lock), the loop serves other tasks.

    A referee thread waits until the claim's transaction waits for the lock, then lets
    the lock go once a ticking task has ticked 20 more times, or after ``TIMEOUT``. Had
    the claim run on the loop's thread, nothing could tick meanwhile.
    """
    ticks = 0
    seen: dict[str, Any] = {}

    with write_lock_held(store.path) as release:

        def referee() -> None:
            try:
                deadline = time.monotonic() + TIMEOUT
                while not waiting_for_the_write_lock() and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen["at_wait"] = ticks
                deadline = time.monotonic() + TIMEOUT
                while ticks < seen["at_wait"] + 20 and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen["at_release"] = ticks
                seen["claimed"] = store.history().claim("slow") is not None
            finally:
                release()

        async def main() -> None:
            nonlocal ticks
            done = False

            async def ticker() -> None:
                nonlocal ticks
                while not done:
                    ticks += 1
                    await asyncio.sleep(0.001)

            ticking = asyncio.create_task(ticker())
            async with store.effect("write_file", effect_id="slow"):
                pass
            done = True
            await ticking

        helper = threading.Thread(target=referee, daemon=True)
        helper.start()
        asyncio.run(main())
        helper.join(TIMEOUT)
    assert seen["at_release"] >= seen["at_wait"] + 20, "the loop stood still while the claim waited"
    assert not seen["claimed"], "the claim did not wait for the lock"
    assert outcomes_of(store, "slow") == [(SUCCESS, fx.Impact.CERTAIN)]


def test_a_task_cancelled_while_its_claim_commits_keeps_the_claim_and_settles_it(
    store: EffectLog, store_dir: Path
) -> None:
    """Cancelled while its claim waits for the lock: the claim lands, then FAILED / NONE (the body never ran)."""
    ran = []

    async def main() -> None:
        async def call_tool() -> None:
            async with store.effect("send", effect_id="e1"):
                ran.append(True)

        with write_lock_held(store.path) as release:
            task = asyncio.create_task(call_tool())
            await until(waiting_for_the_write_lock, "the claim waits for the write lock")
            task.cancel()
            await asyncio.sleep(0)  # the task takes the cancellation while its claim waits
            release()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert task.cancelled()

    asyncio.run(main())
    assert ran == []
    assert store.history().claim("e1") is not None
    assert outcomes_of(store, "e1") == [(FAILED, fx.Impact.NONE)]
    with EffectLog.load(store.run_id, store_dir) as reloaded:
        assert reloaded.history().claim("e1") is not None
        assert outcomes_of(reloaded, "e1") == [(FAILED, fx.Impact.NONE)]
        assert reloaded.assess("e1").verdict is fx.EffectVerdict.FAILED


def test_a_cancelled_body_records_failed_possible_and_the_cancellation_goes_on(
    log: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Cancelling the task in the body records FAILED / POSSIBLE, observes the files, re-raises CancelledError."""
    ref = file_ref(sandbox, "a.txt")

    async def main() -> None:
        entered = asyncio.Event()

        async def call_tool() -> None:
            async with log.effect(
                "write", obligations=[write_postcondition(ref, b"a")], effect_id="e1"
            ):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(call_tool())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.POSSIBLE)]
    assert [o.exists for o in log.history().observations] == [False, False]


def test_a_timeout_around_an_effect_still_times_out(log: EffectLog) -> None:
    """asyncio.timeout cancelling the body turns into TimeoutError as usual; the effect is FAILED / POSSIBLE."""

    async def main() -> None:
        async with asyncio.timeout(None) as timeout, log.effect("slow_call", effect_id="e1"):
            timeout.reschedule(asyncio.get_running_loop().time())  # due now, in the body
            await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert outcomes_of(log, "e1") == [(FAILED, fx.Impact.POSSIBLE)]


def test_a_task_cancelled_while_its_outcome_commits_records_it_then_is_cancelled(
    store: EffectLog, sandbox: FilesystemRoot
) -> None:
    """Cancelled while the exit writes the outcome: the outcome and the observation land, then CancelledError."""
    ref = file_ref(sandbox, "a.txt")

    async def main() -> None:
        lock: list[Callable[[], None]] = []
        with contextlib.ExitStack() as stack:

            async def call_tool() -> None:
                async with store.effect(
                    "write", obligations=[write_postcondition(ref, b"a")], effect_id="e1"
                ):
                    (sandbox.path / "a.txt").write_bytes(b"a")
                    lock.append(stack.enter_context(write_lock_held(store.path)))

            task = asyncio.create_task(call_tool())
            await until(lambda: bool(lock) and waiting_for_the_write_lock(), "the outcome waits")
            task.cancel()
            await asyncio.sleep(0)
            lock[0]()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert outcomes_of(store, "e1") == [(SUCCESS, fx.Impact.CERTAIN)]
    assert store.assess("e1").verdict is fx.EffectVerdict.VERIFIED


def test_concurrent_tasks_each_see_their_own_current_call(log: EffectLog) -> None:
    """Two tasks inside their own async blocks at once: each sees its own call, then none."""

    async def one(name: str, entered: asyncio.Event, other: asyncio.Event) -> tuple[str, str]:
        async with log.effect(name, effect_id=name) as call:
            entered.set()
            await other.wait()  # both blocks are open now
            here = current_call()
            assert here is call
            return name, here.effect_id

    async def main() -> list[tuple[str, str]]:
        a, b = asyncio.Event(), asyncio.Event()
        found = await asyncio.gather(one("task-a", a, b), one("task-b", b, a))
        assert current_call() is None
        return list(found)

    assert asyncio.run(main()) == [("task-a", "task-a"), ("task-b", "task-b")]


def test_the_arguments_recorded_are_those_given_when_the_effect_was_made(tmp_path: Path) -> None:
    run_id = new_run_id()
    args: dict[str, Any] = {"to": ["a"], "body": {"text": "hi"}}
    with EffectLog(run_id, tmp_path) as log:
        scope = log.effect("send", args=args)
        args["to"].append("b")  # changed after log.effect, before the claim
        args["body"]["text"] = "changed"
        with scope as call:
            pass
        assert call.claim.args == {"body": {"text": "hi"}, "to": ["a"]}
        assert call.claim.operation.args_sha256 == fx.args_digest(call.claim.args)
    with EffectLog.load(run_id, tmp_path) as again:
        (claim,) = again.history().claims
        assert claim.args == call.claim.args
        assert list(claim.args) == list(call.claim.args)  # the same key order as read back


def test_begin_step_records_the_probes_own_arguments_when_given_none_apart(tmp_path: Path) -> None:
    """The door log.effect goes through: a probe carrying its arguments keeps them."""
    args = {"to": "a"}
    probe = fx.EffectClaim(
        effect_id="e-probe",
        seq=1,
        action_id="a-probe",
        operation=fx.OperationRef("send", "", fx.args_digest(args)),
        impact_scope=(),
        obligations=(),
        recorded_at="2026-01-01T00:00:00.000000+00:00",
        args=args,
    )
    with EffectLog(new_run_id(), tmp_path) as log:
        begun = log.begin_step(probe, step="send-once")
        assert begun.claim.args == args
        assert log.history().claims[0].args == args
