"""A worker killed inside a step and started again with the same code: every call is safe.

Real worker processes run one plan, the same code each time, starting with
``EffectLog.resume``: a read, a payment to a real HTTP server on 127.0.0.1 that performs
each ``Idempotency-Key`` once, a write of a file with its digest as postcondition, an
irreversible send, and a last read. A first run is killed with SIGKILL inside one step
(after or before that step touched the world); the next runs of the same code must re-run
a read and an idempotent call with the same key, re-run a write that never touched its
file, stop at a write that did and at the irreversible send until ``ledger resolve``, and
never run a completed step twice. Each body appends a line to a journal before it acts, so
the test counts what ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import Payments, ledger, sha, start_child

pytestmark = pytest.mark.program

CHILD_TIMEOUT = 60
NEEDS = 3  # the worker's exit status when a step needs a person

WORKER = """
import os, sys, time, urllib.request
from pathlib import Path
import ledger
from ledger import effects as fx
from ledger.resources import ExternalResource

store, run_id, url, workdir, crash_at, touch = sys.argv[1:7]
work = Path(workdir)
target = work / "out.txt"
journal = work / "journal"
ref = fx.ResourceRef("fs", str(target), "target")
CONTENT = b"the new content"

def ran(step, key):
    with open(journal, "a") as f:
        f.write(f"{step} {key}\\n")
        f.flush()
        os.fsync(f.fileno())

def maybe_crash(step):
    if step == crash_at:
        print("inside", step, flush=True)
        time.sleep(600)  # killed here, before any outcome

@ledger.tool(kind=fx.EffectKind.READ)
def fetch(page: int) -> dict:
    key = ledger.current_call().idempotency_key
    ran(f"fetch{page}", key)
    maybe_crash(f"fetch{page}")
    return {"page": page}

@ledger.tool(kind=fx.EffectKind.IDEMPOTENT, impact_scope=[ExternalResource(url)])
def pay(cents: int) -> dict:
    key = ledger.current_call().idempotency_key
    ran("pay", key)
    request = urllib.request.Request(
        url, data=str(cents).encode(), method="POST", headers={"Idempotency-Key": key})
    answer = urllib.request.urlopen(request, timeout=30).read().decode()
    maybe_crash("pay")
    return {"answer": answer}

def write_out():
    with log.effect("write_out", args={"path": str(target)}, impact_scope=[ref],
                    obligations=[fx.Postcondition(ref, fx.Predicate.SHA256, sys.argv[7])]) as call:
        if call.replayed:
            return
        ran("write_out", call.idempotency_key)
        if crash_at == "write_out" and touch == "before":
            maybe_crash("write_out")
        if crash_at == "write_out" and touch == "half":
            target.write_bytes(b"half")
            maybe_crash("write_out")
        target.write_bytes(CONTENT)
        maybe_crash("write_out")

def send():
    with log.effect("send", args={"to": "ops"}, kind=fx.EffectKind.IRREVERSIBLE,
                    step="send-report") as call:
        if call.replayed:
            return
        ran("send", call.idempotency_key)
        maybe_crash("send")

try:
    with ledger.EffectLog.resume(run_id, store) as log:
        fetch(1)
        pay(1200)
        write_out()
        send()
        fetch(2)
except ledger.NeedsResolution as e:
    print("needs", e.effect_id, flush=True)
    print(e, file=sys.stderr)
    sys.exit(NEEDS_STATUS)
print("finished", flush=True)
""".replace("NEEDS_STATUS", str(NEEDS))


class Worker:
    """The plan's worker process, run again and again on one run, store and world."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.store = tmp_path / "store"
        self.run_id = new_run_id()
        self.url = url
        self.work = tmp_path / "world"
        self.work.mkdir()
        (self.work / "out.txt").write_bytes(b"the old content")

    def _start(self, crash_at: str, touch: str) -> subprocess.Popen[str]:
        return start_child(
            textwrap.dedent(WORKER),
            self.store,
            self.run_id,
            self.url,
            self.work,
            crash_at,
            touch,
            sha(b"the new content"),
        )

    def crash(self, step: str, touch: str = "after") -> None:
        """Run the plan and SIGKILL the worker inside ``step``."""
        child = self._start(step, touch)
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line == f"inside {step}\n", (line, child.stderr.read() if child.stderr else "")
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=CHILD_TIMEOUT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGKILL

    def run(self) -> tuple[int, str, str]:
        """Run the plan to its end (no crash): exit status, stdout, stderr."""
        child = self._start("-", "-")
        out, err = child.communicate(timeout=CHILD_TIMEOUT)
        return child.returncode, out, err

    def finish(self) -> None:
        status, out, err = self.run()
        assert (status, out.splitlines()[-1:]) == (0, ["finished"]), err

    def journal(self) -> list[tuple[str, str]]:
        path = self.work / "journal"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(line.split()[0], line.split()[1]) for line in lines]

    def ran(self, step: str) -> list[str]:
        """The keys ``step``'s body ran with, in order."""
        return [key for name, key in self.journal() if name == step]

    def resolve(self, effect_id: str, *, applied: bool) -> None:
        word = "--applied" if applied else "--not-applied"
        done = ledger(
            "resolve", self.run_id, effect_id, word, "--by", "ops", "--store", str(self.store)
        )
        assert done.returncode == 0, done.stderr

    def verify(self) -> None:
        checked = ledger("verify", "--store", str(self.store))
        assert checked.returncode == 0, checked.stdout + checked.stderr


PLAN = ["fetch1", "pay", "write_out", "send", "fetch2"]


def once_each(worker: Worker, *, but: dict[str, int] | None = None) -> None:
    """Every step's body ran once (``but`` some that ran more), each time with its one key."""
    counts = {step: len(worker.ran(step)) for step in PLAN}
    assert counts == dict.fromkeys(PLAN, 1) | (but or {})
    for step in PLAN:
        assert len(set(worker.ran(step))) == 1, f"{step} ran with two keys"


@pytest.fixture
def worker(tmp_path: Path, payments: tuple[str, type[Payments]]) -> Worker:
    return Worker(tmp_path, payments[0])


@pytest.mark.parametrize("step", ["fetch1", "fetch2"])
def test_a_read_killed_inside_runs_again_with_its_key_and_nothing_done_runs_twice(
    worker: Worker, payments: tuple[str, type[Payments]], step: str
) -> None:
    worker.crash(step)
    worker.finish()
    once_each(worker, but={step: 2})
    assert list(payments[1].performed) == worker.ran("pay")
    worker.finish()  # a third run of the same code: everything is done, nothing runs
    once_each(worker, but={step: 2})
    worker.verify()


def test_an_idempotent_call_killed_after_it_reached_the_server_repeats_with_its_key_once(
    worker: Worker, payments: tuple[str, type[Payments]]
) -> None:
    worker.crash("pay")
    worker.finish()
    once_each(worker, but={"pay": 2})
    server = payments[1]
    assert server.seen == worker.ran("pay")  # two requests, one key
    assert len(server.performed) == 1  # one payment
    worker.verify()


def test_a_write_killed_before_it_touched_its_file_runs_again_without_a_person(
    worker: Worker, payments: tuple[str, type[Payments]]
) -> None:
    worker.crash("write_out", touch="before")
    assert (worker.work / "out.txt").read_bytes() == b"the old content"
    worker.finish()
    once_each(worker, but={"write_out": 2})
    assert (worker.work / "out.txt").read_bytes() == b"the new content"
    assert len(payments[1].performed) == 1
    worker.verify()


def test_a_write_killed_after_its_file_holds_what_it_promised_is_done_and_not_run_again(
    worker: Worker, payments: tuple[str, type[Payments]]
) -> None:
    worker.crash("write_out", touch="after")
    worker.finish()
    once_each(worker)  # resume saw the file as promised: verified, so done
    assert (worker.work / "out.txt").read_bytes() == b"the new content"
    worker.verify()


@pytest.mark.parametrize(("step", "touch"), [("write_out", "half"), ("send", "after")])
@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_call_that_may_have_landed_waits_for_a_person_and_runs_nothing_until_then(
    worker: Worker, payments: tuple[str, type[Payments]], step: str, touch: str, applied: bool
) -> None:
    worker.crash(step, touch)
    before = worker.journal()
    for _ in range(2):  # however often it is started, it stops at the step
        status, out, err = worker.run()
        assert status == NEEDS, err
        assert "ledger resolve" in err
        assert worker.journal() == before  # nothing ran: not the step, not what follows
    effect_id = out.split()[-1]
    with EffectLog.load(worker.run_id, worker.store) as log:
        claim = log.history().claim(effect_id)
        assert claim is not None
        assert claim.operation.name == step
    worker.resolve(effect_id, applied=applied)
    worker.finish()
    once_each(worker, but={} if applied else {step: 2})
    assert len(payments[1].performed) == 1
    worker.verify()


def test_the_runs_records_carry_steps_arguments_and_results(worker: Worker) -> None:
    worker.crash("fetch2")
    worker.finish()
    with EffectLog.load(worker.run_id, worker.store) as log:
        history = log.history()
    steps = [c.step for c in history.claims]
    assert steps[:4] == [
        f"fetch#1@{fx.args_digest({'page': 1})[:16]}",
        f"pay#1@{fx.args_digest({'cents': 1200})[:16]}",
        f"write_out#1@{fx.args_digest({'path': str(worker.work / 'out.txt')})[:16]}",
        "send-report",
    ]
    fetch2 = [c for c in history.claims if c.step.startswith("fetch#1@") and c.args == {"page": 2}]
    assert len(fetch2) == 2
    assert fetch2[1].retry_of == fetch2[0].effect_id
    assert fetch2[1].idempotency_key == fetch2[0].idempotency_key
    results = {o.effect_id: o.result for o in history.outcomes if o.result_recorded}
    assert results[fetch2[1].effect_id] == {"page": 2}
    assert os.path.exists(worker.store)
