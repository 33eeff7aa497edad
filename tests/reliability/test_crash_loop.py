"""Crash loop: a worker writing three runs is SIGKILLed at random moments, again and again.

After every kill the store must load and verify, hold every acknowledged record with its
seq, hold nothing unacknowledged but the one write in flight per run, and recover exactly
the claims that never got an outcome (a second recovery returning ``()``).

Real processes, real SIGKILL, real files. The worker is a child Python process: a small
server started with ``subprocess_env()`` imports ledger once and forks one worker per
life, because importing ledger costs about a second here, more than a quick profile of 50
restarts can pay. Each worker is its own process; the test SIGKILLs it by its pid and the
server reaps it and reports how it died. The worker runs three threads, one ``EffectLog``
per run (each continued with ``EffectLog.load``), and writes every record it is about to
make (``begin``) and every record whose call has returned (``ack``) as one JSON line on
its stdout, a FIFO the test reads.

Profiles: 50 kills under plain pytest; 1000 with ``LEDGER_RELIABILITY=long``. The seed is
printed with the figures; ``LEDGER_RELIABILITY_SEED`` replays the same choices (the kill
moments depend on timing as well, so they are reproduced only approximately). Figures are
printed on one ``reliability:`` line and appended as JSON to ``$LEDGER_RELIABILITY_REPORT``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import select
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import effects as fx
from ledger._inspect import verify
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite.reads import read
from tests.builders import PYTHON, subprocess_env
from tests.postgresql.driver import POSTGRESQL
from tests.postgresql.server import server
from tests.reliability.figures import report

LONG = os.environ.get("LEDGER_RELIABILITY") == "long"
KILLS = 1000 if LONG else 50
SEED = int(os.environ.get("LEDGER_RELIABILITY_SEED", "20240611"))
RUNS = 3
DB = "ledger.sqlite3"
WORKER_SECONDS = 20  # a worker stops writing after this long (it is always killed sooner)
STALL_SECONDS = 30  # no worker may take longer than this to reach its kill moment
MAX_DELAY = 0.25  # the longest random delay before a kill, in seconds
MAX_ACKS = 30  # the largest number of acknowledgements before a kill
RUN_RECORDS = 200  # a run this long is left as it is; a new run takes its place
STORE_LIVES = 50  # lives per store; the long profile goes through 20 stores

SERVER = textwrap.dedent(
    r"""
    import hashlib, json, os, random, sys, threading, time, traceback
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import EffectLog
    from ledger.resources import OwnedResource
    from ledger.sqlite.engine import head_revision

    head_revision()  # warm the migration scripts before forking, like the imports

    X, I = fx.ExecutionOutcome, fx.Impact
    TERMINAL = [(X.REPORTED_SUCCESS, I.CERTAIN), (X.REPORTED_SUCCESS, I.POSSIBLE),
                (X.FAILED, I.NONE), (X.FAILED, I.POSSIBLE), (X.INTERRUPTED, I.POSSIBLE)]
    RUNNING = [(X.RUNNING, I.NONE), (X.RUNNING, I.POSSIBLE)]
    emit_lock = threading.Lock()

    def emit(**message):
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with emit_lock:
            os.write(1, line)  # one write(2) under PIPE_BUF bytes: atomic on a pipe

    def digest(n):
        return hashlib.sha256(str(n).encode()).hexdigest()

    def ref(rng):
        if rng.random() < 0.7:
            return fx.ResourceRef("fs", f"/sandbox/d{rng.randrange(3)}/f{rng.randrange(6)}.txt",
                                  rng.choice(["target", "source"]))
        note = OwnedResource("notes", "alice", "t1", "notes", f"n{rng.randrange(6)}",
                             rng.choice([None, "r1", "r2"]))
        return fx.resource_ref(note, "target")

    def claim(log, rng, effect_id):
        scope = list(dict.fromkeys(ref(rng) for _ in range(rng.randint(1, 3))))
        duties = []
        for target in scope[: rng.randint(0, 2)]:
            predicate = rng.choice(list(fx.Predicate)[:3])  # EXISTS, ABSENT, SHA256
            expected = digest(rng.random()) if predicate is fx.Predicate.SHA256 else None
            duties.append(fx.Postcondition(target, predicate, expected))
        operation = fx.OperationRef(rng.choice(["write_file", "delete_file", "update_note"]),
                                    "test/1", digest(effect_id))
        return log.claim(effect_id=effect_id, action_id=f"a-{effect_id}", operation=operation,
                         impact_scope=scope, obligations=duties)

    def observe(log, rng, observation_id):
        exists = rng.choice([True, False, None])
        return log.observe(observation_id=observation_id, resource=ref(rng),
                           mechanism=rng.choice(list(fx.ObservationMechanism)),
                           coverage=rng.choice(list(fx.Coverage)),
                           source_action_id=f"a-{observation_id}", exists=exists,
                           sha256=digest(observation_id) if exists else None)

    def life(store, run_id, r, rng, deadline):
        log = EffectLog.load(run_id, store)
        history = log.history()
        nxt = len(history.records()) + 1
        started = bool(history.claims)  # observations made before a first claim wait for it
        settled = {o.effect_id for o in history.outcomes if o.terminal}
        unsettled = [c.effect_id for c in history.claims if c.effect_id not in settled]
        emit(ev="loaded", run=r, seq=nxt - 1)
        while time.monotonic() < deadline:
            roll = rng.random()
            if unsettled and roll < 0.4:
                effect_id = rng.choice(unsettled)
                execution, impact = rng.choice(RUNNING if rng.random() < 0.3 else TERMINAL)
                ident = f"{effect_id}:{execution.value}"
                emit(ev="begin", run=r, kind="outcome", id=ident, seq=nxt)
                record = log.outcome(effect_id=effect_id, execution=execution, impact=impact,
                                     execution_id=rng.choice([None, f"x{nxt}"]))
                if record.terminal:
                    unsettled.remove(effect_id)
                durable = True
            elif roll < 0.7:
                ident = f"e{nxt}"
                emit(ev="begin", run=r, kind="claim", id=ident, seq=nxt)
                record = claim(log, rng, ident)
                unsettled.append(ident)
                started = durable = True
            else:
                ident = f"o{nxt}"
                emit(ev="begin", run=r, kind="observation", id=ident, seq=nxt)
                record = observe(log, rng, ident)
                durable = started
            if log.degraded:  # an outcome or observation failed to persist, silently
                emit(ev="error", run=r, trace=f"run {run_id} degraded at seq {nxt}")
                os._exit(3)
            emit(ev="ack" if durable else "held", run=r, kind=record.record_type, id=ident,
                 seq=record.seq)
            nxt += 1
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0, 0.004))
        log.close()

    def guarded(*args):
        try:
            life(*args)
        except BaseException:
            emit(ev="error", trace=traceback.format_exc()[-2000:])
            os._exit(3)

    def work(request):
        deadline = time.monotonic() + request["seconds"]
        threads = [
            threading.Thread(target=guarded, args=(
                request["store"], run_id, r,
                random.Random(f"{request['seed']}:{request['life']}:{r}"), deadline))
            for r, run_id in enumerate(request["runs"])
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        emit(ev="done")
        time.sleep(request["seconds"])  # wait to be killed

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 4
            try:
                fd = os.open(request["fifo"], os.O_WRONLY)
                os.dup2(fd, 1)  # the worker's stdout is the test's FIFO
                os.close(fd)
                work(request)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "status": status,
                          "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}),
              flush=True)
    """
)


class Lines:
    """JSON lines read from a non-blocking file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        os.set_blocking(fd, False)

    def read(self) -> list[dict[str, Any]]:
        """Every complete line available now."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines]


Key = tuple[str, str]  # (kind, id) of a record; an outcome's id is "effect:execution"


def key(record: fx.EffectClaim | fx.EffectOutcome | fx.Observation) -> Key:
    """The (kind, id) the worker reports for ``record``."""
    if isinstance(record, fx.EffectClaim):
        return ("claim", record.effect_id)
    if isinstance(record, fx.EffectOutcome):
        return ("outcome", f"{record.effect_id}:{record.execution.value}")
    return ("observation", record.observation_id)


@dataclasses.dataclass
class Run:
    """What the test knows of one run: its durable records, and what may be in flight."""

    run_id: str
    durable: dict[int, Key] = dataclasses.field(default_factory=dict)  # acknowledged or found
    held: dict[int, Key] = dataclasses.field(default_factory=dict)  # observations awaiting a claim
    inflight: tuple[int, Key] | None = None


@dataclasses.dataclass
class Figures:
    """The counts the test reports."""

    kills: int = 0
    acknowledged: int = 0
    lost: int = 0
    extra: int = 0
    inflight_at_kill: int = 0
    killed_before_first_ack: int = 0
    killed_creating_store: int = 0
    recovered: int = 0
    recovered_in_place: int = 0
    stores: int = 0
    runs: int = 0
    records: int = 0
    by_delay: int = 0
    by_acks: int = 0


class Harness:
    """The server, the FIFO, and the test's view of the three runs."""

    script = SERVER  # the server's program; tests/power runs a variant of it

    def __init__(self, base: Path, backend: str = "sqlite") -> None:
        self.base = base
        self.postgresql = backend == "postgresql"
        self.copy = base / "copy"
        self.fifo = base / "worker.fifo"
        os.mkfifo(self.fifo, 0o600)
        # The test keeps a writer open too, so that the FIFO never reads as closed between
        # workers; a worker's end is known from the server, which reaps it.
        self.fifo_in = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.fifo_keep = os.open(self.fifo, os.O_WRONLY)
        self.stderr = (base / "server.stderr").open("w+b")
        self.server = subprocess.Popen(
            [PYTHON, "-c", self.script],
            env=subprocess_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        assert self.server.stdout is not None
        self.worker_lines = Lines(self.fifo_in)
        self.server_lines = Lines(self.server.stdout.fileno())
        self.figures = Figures()
        self.new_store()

    def close(self) -> None:
        """Stop the server and close the FIFO."""
        assert self.server.stdin is not None
        self.server.stdin.close()
        assert self.server.stdout is not None
        try:
            self.server.wait(timeout=STALL_SECONDS)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self.server.stdout.close()
        os.close(self.fifo_in)
        os.close(self.fifo_keep)
        self.stderr.close()

    def server_error(self) -> str:
        """The server's stderr, for failure messages."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    def server_message(self, deadline: float) -> dict[str, Any]:
        """The server's next line, waiting until ``deadline``."""
        while True:
            lines = self.server_lines.read()
            if lines:
                assert len(lines) == 1, lines
                return lines[0]
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the server did not answer: {self.server_error()}"
            assert self.server.poll() is None, f"the server died: {self.server_error()}"
            select.select([self.server_lines.fd], [], [], remaining)

    # ------------------------------------------------------------------ one life

    def live(self, life: int, rng: random.Random) -> None:
        """Start a worker, SIGKILL it at a random moment, and take in all it acknowledged."""
        assert self.server.stdin is not None
        request = {
            "fifo": str(self.fifo),
            "store": str(self.store),
            "runs": [run.run_id for run in self.runs],
            "seed": SEED,
            "life": life,
            "seconds": WORKER_SECONDS,
        }
        self.server.stdin.write((json.dumps(request) + "\n").encode())
        self.server.stdin.flush()
        start = time.monotonic()
        pid = self.server_message(start + STALL_SECONDS)["pid"]
        by_delay = rng.random() < 0.5
        delay = rng.uniform(0, MAX_DELAY)
        wanted = rng.randint(1, MAX_ACKS)
        acks = 0
        while True:
            for message in self.worker_lines.read():
                acks += self.take(message)
            now = time.monotonic()
            if by_delay and now >= start + delay:
                break
            if not by_delay and acks >= wanted:
                break
            assert now < start + STALL_SECONDS, f"worker stalled after {acks} acknowledgements"
            timeout = start + delay - now if by_delay else 0.5
            select.select([self.fifo_in, self.server_lines.fd], [], [], max(timeout, 0))
            if self.server_lines.read():
                for message in self.worker_lines.read():
                    self.take(message)  # reports the worker's error, if it sent one
                raise AssertionError(
                    f"the worker ended before it was killed: {self.server_error()}"
                )
        os.kill(pid, signal.SIGKILL)
        ended = self.server_message(time.monotonic() + STALL_SECONDS)
        assert ended["pid"] == pid
        for message in self.worker_lines.read():  # all it wrote before it died: it is reaped
            acks += self.take(message)
        assert not self.worker_lines.buffer, "a worker's line was torn"
        assert ended["signal"] == signal.SIGKILL, f"worker ended with {ended}"
        self.figures.kills += 1
        self.figures.by_delay += by_delay
        self.figures.by_acks += not by_delay
        self.figures.killed_before_first_ack += acks == 0
        self.figures.inflight_at_kill += any(run.inflight for run in self.runs)

    def take(self, message: dict[str, Any]) -> int:
        """Apply one worker line to the runs; return 1 for an acknowledgement."""
        event = message["ev"]
        assert event != "error", message.get("trace")
        if event == "done":
            return 0
        run = self.runs[message["run"]]
        if event == "loaded":
            assert message["seq"] == len(run.durable), "the worker loaded what the test knows"
            return 0
        record = (message["seq"], (message["kind"], message["id"]))
        if event == "begin":
            assert run.inflight is None
            assert message["seq"] == len(run.durable) + len(run.held) + 1, message
            run.inflight = record
            return 0
        assert run.inflight == record, (run.inflight, message)
        run.inflight = None
        if event == "held":
            run.held[record[0]] = record[1]
            return 0
        assert event == "ack", message
        run.durable[record[0]] = record[1]
        acknowledged = 1
        if message["kind"] == "claim" and run.held:  # written in the first claim's transaction
            run.durable.update(run.held)
            acknowledged += len(run.held)
            run.held.clear()
        self.figures.acknowledged += acknowledged
        return acknowledged

    # ------------------------------------------------------------------ after a kill

    def check(self, rng: random.Random) -> None:
        """The store after a kill: it verifies, loses nothing, invents nothing, recovers."""
        if not self.exists():
            assert all(not run.durable for run in self.runs), "acknowledged, yet no store"
            self.forget_in_flight()
            return
        if not self.postgresql:  # a PostgreSQL store's schema commits in one transaction
            tables = read(
                Path(self.store),
                lambda c: c.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar(),
            )
            self.figures.killed_creating_store += tables == 0  # killed before its schema committed
        problems = verify(self.store).problems
        assert problems == (), problems
        # Recover the store itself, or a copy of the crashed files (WAL and all), which
        # leaves the claims open for the next worker to settle. (A PostgreSQL store is a
        # database on a server that did not crash: it is recovered in place.)
        in_place = self.postgresql or rng.random() < 0.5
        if not in_place:
            shutil.rmtree(self.copy, ignore_errors=True)
            shutil.copytree(Path(self.store), self.copy)
        for run in self.runs:
            with EffectLog.load(run.run_id, self.store) as loaded:
                history = loaded.history()
                self.check_run(run, history)
                if in_place:
                    appended = loaded.recover_interrupted()
            if not in_place:
                with EffectLog.load(run.run_id, self.copy) as copied:
                    assert copied.history() == history
                    appended = copied.recover_interrupted()
            self.check_recovery(run, history, appended, self.store if in_place else self.copy)
            if in_place:
                run.durable.update((o.seq, key(o)) for o in appended)
            self.figures.recovered += len(appended)
        self.figures.recovered_in_place += in_place
        self.forget_in_flight()
        for run in self.runs:
            if len(run.durable) >= RUN_RECORDS:  # keep loads cheap: continue with a new run
                self.runs[self.runs.index(run)] = Run(new_run_id())
                self.figures.runs += 1

    def check_run(self, run: Run, history: fx.History) -> None:
        """Every acknowledged record is there; anything else is the one write in flight."""
        present = {r.seq: key(r) for r in history.records()}
        lost = {seq: k for seq, k in run.durable.items() if present.get(seq) != k}
        self.figures.lost += len(lost)
        assert not lost, f"run {run.run_id} lost acknowledged records {lost}"
        extra = {seq: k for seq, k in present.items() if seq not in run.durable}
        in_flight: dict[int, Key] = {}
        if run.inflight is not None:
            in_flight[run.inflight[0]] = run.inflight[1]
            if run.inflight[1][0] == "claim":  # a first claim carries the held observations
                in_flight.update(run.held)
        assert extra in ({}, in_flight), (
            f"run {run.run_id}: unacknowledged records {extra}; only {in_flight} was in flight"
        )
        self.figures.extra += len(extra)
        run.durable = present  # the next worker will find the in-flight write if it committed

    @staticmethod
    def check_recovery(
        run: Run, before: fx.History, appended: tuple[fx.EffectOutcome, ...], target: Path
    ) -> None:
        """Recovery appended exactly the missing outcomes, and a second one appends nothing."""
        with_outcome = {o.effect_id for o in before.outcomes}
        expected = [c.effect_id for c in before.claims if c.effect_id not in with_outcome]
        assert [o.effect_id for o in appended] == expected
        first = len(before.records()) + 1
        assert [o.seq for o in appended] == list(range(first, first + len(expected)))
        assert all(
            o.execution is fx.ExecutionOutcome.INTERRUPTED
            and o.impact is fx.Impact.POSSIBLE
            and o.replayed
            for o in appended
        ), appended
        with EffectLog.load(run.run_id, target) as again:
            assert again.history().records() == before.records() + appended
            assert again.recover_interrupted() == ()

    def forget_in_flight(self) -> None:
        """The dead worker's calls are over: nothing is in flight, held records are gone."""
        for run in self.runs:
            run.inflight = None
            run.held.clear()

    def new_store(self) -> None:
        """Continue in a new, empty store with three new runs."""
        self.store: Path | str = (
            server().new_database()
            if self.postgresql
            else self.base / f"store{self.figures.stores}"
        )
        self.runs = [Run(new_run_id()) for _ in range(RUNS)]
        self.figures.stores += 1
        self.figures.runs += RUNS

    def close_store(self) -> None:
        """Verify the store a last time, count its records, and delete it."""
        if self.exists():
            verified = verify(self.store)
            assert verified.problems == (), verified.problems
            self.figures.records += verified.records
        if not self.postgresql:
            shutil.rmtree(self.store, ignore_errors=True)
        shutil.rmtree(self.copy, ignore_errors=True)

    def exists(self) -> bool:
        """Whether the store was created: its database file, or its schema."""
        if self.postgresql:
            return POSTGRESQL.exists(self.store)
        return (Path(self.store) / DB).exists()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_crash_loop_loses_nothing_and_recovers_exactly(tmp_path: Path, backend: str) -> None:
    """A worker SIGKILLed at random moments never loses an acknowledged record nor leaves more than the write in flight."""
    rng = random.Random(SEED)
    harness = Harness(tmp_path, backend)
    started = time.monotonic()
    try:
        for life in range(KILLS):
            if life and life % STORE_LIVES == 0:
                harness.close_store()
                harness.new_store()
            harness.live(life, rng)
            harness.check(rng)
        harness.close_store()
    finally:
        harness.close()
        report(
            {
                "test": "crash_loop" if backend == "sqlite" else f"crash_loop_{backend}",
                "profile": "long" if LONG else "quick",
                "seed": SEED,
                "iterations": harness.figures.kills,
                **dataclasses.asdict(harness.figures),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    assert harness.figures.kills == KILLS
    assert harness.figures.lost == 0
