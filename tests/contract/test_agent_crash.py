"""After a crash inside ``log.effect``: what decide says, per kind, and what retry and resolve do.

Real workers in child processes, killed with SIGKILL inside the ``with`` block; the
restarted side loads the run, recovers it and asks :meth:`EffectLog.decide`. The
idempotency-key test runs a real HTTP server on 127.0.0.1 that deduplicates requests by
their ``Idempotency-Key`` header.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import REPO, Payments, sha, subprocess_env

CHILD_TIMEOUT = 60

WORKER = """
import os, sys, time, urllib.request
from pathlib import Path
from ledger import effects as fx
from ledger.effect_log import EffectLog
from ledger.resources import ExternalResource

store, run_id, kind, target, mode, url = sys.argv[1:7]
log = EffectLog(run_id, store)
ref = fx.ResourceRef("fs", target, "target")
if mode == "http":
    scope, duties = [ExternalResource(url)], []
else:
    scope, duties = [ref], [fx.Postcondition(ref, fx.Predicate.SHA256, sys.argv[7])]
with log.effect("act", args={"target": target}, kind=fx.EffectKind(kind), effect_id="e1",
                impact_scope=scope, obligations=duties) as call:
    if mode == "write-some":
        Path(target).write_bytes(b"half")
    if mode == "http":
        request = urllib.request.Request(
            url, data=b"pay 10", method="POST",
            headers={"Idempotency-Key": call.idempotency_key})
        urllib.request.urlopen(request, timeout=30).read()
    print("inside", call.idempotency_key, flush=True)
    time.sleep(600)  # killed here, before any outcome
"""


def crash_inside_effect(  # noqa: PLR0917 - one worker, told everything it does
    store: Path, run_id: str, kind: fx.EffectKind, target: Path, mode: str, url: str = "-"
) -> str:
    """Run a worker that enters ``log.effect`` and is SIGKILLed inside it; its key."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(WORKER),
            str(store),
            run_id,
            kind.value,
            str(target),
            mode,
            url,
            sha(b"the new content"),
        ],
        env=subprocess_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("inside "), child.stderr.read() if child.stderr else line
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    return line.split()[1]


def restart(store: Path, run_id: str) -> EffectLog:
    """Load the run after the crash and recover its unanswered claim."""
    log = EffectLog.load(run_id, store)
    assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]
    return log


@pytest.mark.parametrize(
    ("kind", "mode", "expected"),
    [
        (fx.EffectKind.READ, "untouched", fx.NextStep.RETRY),
        (fx.EffectKind.IDEMPOTENT, "untouched", fx.NextStep.RETRY),
        (fx.EffectKind.IRREVERSIBLE, "untouched", fx.NextStep.ESCALATE),
        (fx.EffectKind.WRITE, "write-some", fx.NextStep.ESCALATE),
        (fx.EffectKind.WRITE, "untouched", fx.NextStep.RETRY),
    ],
    ids=["read", "idempotent", "irreversible", "write-changed", "write-unchanged"],
)
def test_a_crash_inside_an_effect_is_decided_by_its_kind_and_the_evidence(
    tmp_path: Path, kind: fx.EffectKind, mode: str, expected: fx.NextStep
) -> None:
    store, run_id = tmp_path / "store", new_run_id()
    target = tmp_path / "out.txt"
    target.write_bytes(b"the old content")
    key = crash_inside_effect(store, run_id, kind, target, mode)
    with restart(store, run_id) as log:
        log.observe_file(fx.ResourceRef("fs", str(target), "target"), source_action_id="check")
        decision = log.decide("e1")
        assert decision.step is expected, decision.reason
        assert decision.idempotency_key == key == log.history().claim("e1").idempotency_key
        if expected is fx.NextStep.RETRY:
            retry = log.retry("e1", new_effect_id="e1-again")
            assert (retry.retry_of, retry.idempotency_key, retry.kind) == ("e1", key, kind)
            assert log.decide("e1").step is fx.NextStep.WAIT  # the retry speaks for it now
        else:
            with pytest.raises(ValueError, match="ESCALATE"):
                log.retry("e1")
            assert [c.effect_id for c in log.history().claims] == ["e1"]


def test_a_person_who_finds_the_effect_did_not_land_makes_it_retryable(tmp_path: Path) -> None:
    store, run_id = tmp_path / "store", new_run_id()
    target = tmp_path / "out.txt"
    crash_inside_effect(store, run_id, fx.EffectKind.IRREVERSIBLE, target, "untouched")
    with restart(store, run_id) as log:
        assert log.decide("e1").step is fx.NextStep.ESCALATE
    resolved = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger",
            "resolve",
            run_id,
            "e1",
            "--not-applied",
            "--by",
            "ops",
            "--store",
            str(store),
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert resolved.returncode == 0, resolved.stderr
    with EffectLog.load(run_id, store) as log:
        assert log.decide("e1").step is fx.NextStep.RETRY
        assert log.assess("e1").resolution == "not_applied"
        assert not log.assess("e1").unresolved_impact
        assert log.retry("e1").idempotency_key == log.history().claim("e1").idempotency_key


def test_a_retry_after_a_crash_carries_the_key_and_the_server_performs_once(
    tmp_path: Path, payments: tuple[str, type[Payments]]
) -> None:
    """Killed after sending, restarted, retried with the same key: two requests, one payment."""
    import urllib.request

    url, server = payments
    store, run_id = tmp_path / "store", new_run_id()
    key = crash_inside_effect(
        store, run_id, fx.EffectKind.IDEMPOTENT, tmp_path / "unused", "http", url
    )
    assert server.seen == [key]
    with restart(store, run_id) as log:
        assert log.decide("e1").step is fx.NextStep.RETRY
        retry = log.retry("e1")
        request = urllib.request.Request(  # noqa: S310 - the test's server on 127.0.0.1
            url, data=b"pay 10", method="POST", headers={"Idempotency-Key": retry.idempotency_key}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - 127.0.0.1
            assert json.loads(answer.read()) == {"id": "payment-1"}
        log.outcome(
            effect_id=retry.effect_id,
            execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
            impact=fx.Impact.CERTAIN,
        )
        assert log.decide("e1").step is fx.NextStep.DONE
    assert server.seen == [key, key]
    assert list(server.performed) == [key]
