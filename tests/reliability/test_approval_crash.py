"""A gated call's worker killed at every point around a grant: no request lost, no grant used twice.

Real worker processes run one gated call, the same code each time, starting with
``EffectLog.resume``: a refund (irreversible) or a write of a file with its digest as
postcondition, under ``approval=fx.ApprovalPolicy(...)``. A person grants it from another
process. The worker is killed with SIGKILL while it waits for the person, after the grant
and before it runs again, after its claim is durable and before the body acts, and
inside the body after it acted. Started again, the worker asks nothing twice, and the
grant never authorizes a second run: the effect's decision governs (an irreversible
call waits for ``ledger resolve``; a write proven not applied is retried under its first
attempt's approval, without a new one). Each body appends a line to a journal before it
acts, so the test counts what ran.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.backends import Backend
from tests.builders import ledger, python_stdout, sha, start_child

pytestmark = pytest.mark.program

CHILD_TIMEOUT = 60
NEEDS, PENDING = 3, 4  # the worker's exit status when the call needs a person

WORKER = """
import json, os, sys, time
from datetime import timedelta
from pathlib import Path
import ledger
from ledger import effects as fx
from ledger.resources import ExternalResource

store, run_id, workdir, kind, crash_at = sys.argv[1:6]
work = Path(workdir)
journal = work / "journal"
target = work / "out.txt"
POLICY = fx.ApprovalPolicy(ttl=timedelta(hours=1), reason="a person checks it")

def ran(effect_id):
    with open(journal, "a") as f:
        f.write(effect_id + "\\n")
        f.flush()
        os.fsync(f.fileno())

def crash(where):
    if where == crash_at:
        print(json.dumps({"inside": where}), flush=True)
        time.sleep(600)  # killed here

if kind == "refund":
    options = dict(args={"amount": 150}, kind=fx.EffectKind.IRREVERSIBLE,
                   impact_scope=[ExternalResource("https://payments.example/accounts/7")])
else:
    ref = fx.ResourceRef("fs", str(target), "target")
    options = dict(args={"path": str(target)}, impact_scope=[ref],
                   obligations=[fx.Postcondition(ref, fx.Predicate.SHA256, sys.argv[6])])

try:
    with ledger.EffectLog.resume(run_id, store) as log:
        with log.effect(kind, step=kind, approval=POLICY, **options) as call:
            if not call.replayed:
                crash("claimed")  # the claim is durable, the body has not acted
                ran(call.effect_id)
                if kind == "write":
                    target.write_bytes(b"the new content")
                crash("body")  # it acted, no outcome yet
except ledger.ApprovalPending as e:
    print(json.dumps({"pending": e.approval_id, "effect_id": e.effect_id}), flush=True)
    crash("pending")
    sys.exit(PENDING_STATUS)
except ledger.NeedsResolution as e:
    print(json.dumps({"needs": e.effect_id}), flush=True)
    sys.exit(NEEDS_STATUS)
print(json.dumps({"finished": call.effect_id}), flush=True)
""".replace("NEEDS_STATUS", str(NEEDS)).replace("PENDING_STATUS", str(PENDING))

APPROVE = """
import sys
from ledger.effect_log import EffectLog
store, run_id, approval_id = sys.argv[1:4]
with EffectLog._visit(run_id, store, "ledger approve") as log:
    print(log.approve(approval_id, by="alice").decision)
"""


class Worker:
    """The gated call's worker process, run again and again on one run, store and world."""

    def __init__(self, tmp_path: Path, location: Path | str, kind: str) -> None:
        self.store = location
        self.run_id = new_run_id()
        self.kind = kind
        self.work = tmp_path / "world"
        self.work.mkdir()

    def _start(self, crash_at: str) -> subprocess.Popen[str]:
        return start_child(
            textwrap.dedent(WORKER),
            self.store,
            self.run_id,
            self.work,
            self.kind,
            crash_at,
            sha(b"the new content"),
        )

    def crash(self, where: str) -> dict[str, str]:
        """Run the worker and SIGKILL it at ``where``; what it said last before."""
        child = self._start(where)
        said: dict[str, str] = {}
        try:
            assert child.stdout is not None
            while "inside" not in said:
                line = child.stdout.readline()
                assert line, child.stderr.read() if child.stderr else "the worker exited"
                said |= json.loads(line)
            assert said["inside"] == where
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=CHILD_TIMEOUT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGKILL
        return said

    def run(self) -> tuple[int, dict[str, str]]:
        """Run the worker to its end: its exit status and what it said last."""
        child = self._start("-")
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
        assert out, err
        return child.returncode, json.loads(out.splitlines()[-1])

    def approve(self, approval_id: str) -> None:
        """A person grants it, from a process of their own."""
        said = python_stdout(APPROVE, self.store, self.run_id, approval_id)
        assert said.strip() == "granted"

    def ran(self) -> list[str]:
        """The effect ids the body ran under, in order."""
        path = self.work / "journal"
        return path.read_text().splitlines() if path.exists() else []

    def history(self) -> fx.History:
        with EffectLog.load(self.run_id, self.store) as log:
            return log.history()

    def verify(self) -> None:
        checked = ledger("verify", "--store", str(self.store))
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def refund(tmp_path: Path, location: Path | str) -> Worker:
    return Worker(tmp_path, location, "refund")


@pytest.fixture
def write(tmp_path: Path, location: Path | str) -> Worker:
    return Worker(tmp_path, location, "write")


def granted(worker: Worker) -> str:
    """Run the worker until it asks, grant what it asked for; the approval id."""
    status, said = worker.run()
    assert status == PENDING, said
    worker.approve(said["pending"])
    return said["pending"]


def used_once(worker: Worker, approval_id: str) -> fx.EffectClaim:
    """One claim of the run was made under ``approval_id``, and only one request exists."""
    history = worker.history()
    under = [c for c in history.claims if c.approval_id == approval_id]
    assert len(under) == 1
    assert [r.approval_id for r in history.approval_requests] == [approval_id]
    return under[0]


def test_a_worker_killed_while_it_waits_asks_again_with_the_same_request(
    backend: Backend, refund: Worker
) -> None:
    """Killed after ApprovalPending: the restarted worker raises it with the same approval id."""
    said = refund.crash("pending")
    for _ in range(2):
        status, again = refund.run()
        assert status == PENDING
        assert (again["pending"], again["effect_id"]) == (said["pending"], said["effect_id"])
    assert backend.row_counts(refund.store)["approval_requests"] == 1
    refund.approve(said["pending"])
    status, done = refund.run()
    assert (status, done) == (0, {"finished": said["effect_id"]})
    assert refund.ran() == [said["effect_id"]]
    used_once(refund, said["pending"])
    refund.verify()


def test_a_grant_given_while_no_worker_runs_is_used_by_the_next_one_once(refund: Worker) -> None:
    """Granted between a killed worker and its restart: the call runs once, the third run replays."""
    refund.crash("pending")
    approval_id = granted(refund)
    for _ in range(2):
        status, done = refund.run()
        assert status == 0, done
    assert len(refund.ran()) == 1
    assert used_once(refund, approval_id).effect_id == refund.ran()[0]
    refund.verify()


@pytest.mark.parametrize("where", ["claimed", "body"])
def test_an_irreversible_call_killed_under_its_grant_is_never_run_again(
    backend: Backend, refund: Worker, where: str
) -> None:
    """Killed after its claim (before or after the body acted): a person must resolve it, no rerun."""
    approval_id = granted(refund)
    refund.crash(where)
    before = refund.ran()
    for _ in range(2):  # however often it is started, it neither reruns nor asks again
        status, said = refund.run()
        assert status == NEEDS, said
        assert refund.ran() == before
    claim = used_once(refund, approval_id)
    assert said["needs"] == claim.effect_id
    with EffectLog.load(refund.run_id, refund.store) as log:
        assert log.decide(claim.effect_id).step is fx.NextStep.ESCALATE
    assert backend.row_counts(refund.store)["claims"] == 1
    refund.verify()


def test_a_write_killed_before_it_acted_is_retried_under_its_first_grant(write: Worker) -> None:
    """Proven not applied (its file is not as promised): RETRY runs it, without a new approval."""
    approval_id = granted(write)
    write.crash("claimed")
    assert not (write.work / "out.txt").exists()
    status, said = write.run()
    assert status == 0, said
    history = write.history()
    first, retry = history.claims
    assert (first.approval_id, retry.approval_id, retry.retry_of) == (
        approval_id,
        None,
        first.effect_id,
    )
    assert write.ran() == [retry.effect_id]
    assert len(history.approval_requests) == 1
    assert (write.work / "out.txt").read_bytes() == b"the new content"
    status, said = write.run()  # done: replayed, nothing runs
    assert status == 0
    assert write.ran() == [retry.effect_id]
    write.verify()


def test_a_write_killed_after_it_acted_is_done_and_not_run_again(write: Worker) -> None:
    """Its file holds what it promised: verified, done, the body does not run a second time."""
    approval_id = granted(write)
    write.crash("body")
    status, said = write.run()
    assert status == 0, said
    claim = used_once(write, approval_id)
    assert write.ran() == [claim.effect_id]
    write.verify()
