"""What ``ledger bench`` times, and the runs and stores it builds to time some of it on.

Each latency case here measures a chunk of samples at a time, so that the caller can
interleave the cases; the caller decides the order, the counts and the report. Every
SQLite database a latency case writes is first written until its WAL has been
checkpointed once: until then each commit also grows the file, which is not the
steady state of a store.

A worker process of the ``processes4`` case runs as
``python -m ledger._bench.cases DIR N``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ledger import effects as fx
from ledger import storage
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    EffectPersistenceError,
    OutcomeRequest,
    new_run_id,
)
from ledger.sqlite import engine, rows
from ledger.sqlite.commit import Step, begin_immediate, execute_step, writing_connection

__all__ = [
    "SMALL_RUN",
    "UNSETTLED",
    "CpuOff",
    "Jsonl",
    "Library",
    "Raw",
    "Sql",
    "build_store",
    "built",
    "new_run",
    "processes",
    "read_through",
    "spread",
    "threads",
    "timed",
    "unsettle",
    "warm",
    "worker",
]

SMALL_RUN = 1_000
UNSETTLED = 100

_OP = fx.OperationRef("write_file", "fs/1", hashlib.sha256(b'{"path": "f"}').hexdigest())
_WAL_BYTES = 1000 * 4096  # SQLite's default wal_autocheckpoint and page size, kept by the store
_BATCH = 2000  # claims per transaction when building runs and stores


# --------------------------------------------------------------------------- helpers


def timed(step: Callable[[int], object], indices: Iterable[int]) -> list[int]:
    """The nanoseconds ``step(i)`` took, for each index in turn."""
    samples = []
    for i in indices:
        start = time.perf_counter_ns()
        step(i)
        samples.append(time.perf_counter_ns() - start)
    return samples


def _ref(i: int, prefix: str = "/bench") -> fx.ResourceRef:
    return fx.ResourceRef("fs", f"{prefix}/f{i}", "target")


def _request(effect_id: str, ref: fx.ResourceRef) -> ClaimRequest:
    return ClaimRequest(
        effect_id=effect_id,
        action_id="bench",
        operation=_OP,
        impact_scope=(ref,),
        obligations=(fx.Postcondition(ref, fx.Predicate.EXISTS),),
    )


def _record(effect_id: str, seq: int, ref: fx.ResourceRef, key: str = "") -> fx.EffectClaim:
    """The record of a claim as _claim makes it, built without a log."""
    return fx.EffectClaim(
        effect_id=effect_id,
        seq=seq,
        action_id="bench",
        operation=_OP,
        impact_scope=(ref,),
        obligations=(fx.Postcondition(ref, fx.Predicate.EXISTS),),
        recorded_at=fx.utc_now(),
        idempotency_key=key,
    )


def _claim(log: EffectLog, effect_id: str, ref: fx.ResourceRef) -> None:
    log.claim(
        effect_id=effect_id,
        action_id="bench",
        operation=_OP,
        impact_scope=(ref,),
        obligations=(fx.Postcondition(ref, fx.Predicate.EXISTS),),
    )


def _wal(db: Path) -> int:
    try:
        return db.with_name(db.name + "-wal").stat().st_size
    except FileNotFoundError:
        return 0


def _flush(db: Path) -> None:
    """Write out what synchronous=OFF left in memory, before a case that fsyncs is timed.

    A file system may write every dirty page at the next fsync, whoever's it is.
    """
    for path in (db, db.with_name(db.name + "-wal")):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def warm(db: Path, bulk: Callable[[], object], step: Callable[[], object]) -> None:
    """Commit until the WAL has been checkpointed once and is reused rather than grown."""
    while _wal(db) < _WAL_BYTES:  # the commit that crosses it checkpoints
        bulk()
    size, unchanged = _wal(db), 0
    for _ in range(10_000):
        step()
        unchanged = unchanged + 1 if _wal(db) == size else 0
        size = _wal(db)
        if unchanged >= 20:
            return


def _db(log: EffectLog) -> Path:
    """The SQLite database file of a log (these cases measure SQLite stores)."""
    if log.path is None:
        raise ValueError(f"{log.store} is not a SQLite store")
    return log.path


def _warm_log(log: EffectLog, name: str) -> None:
    ids = iter(range(10**9))
    warm(
        _db(log),
        lambda: log.claim_many(_request(f"{name}{next(ids)}", _ref(0)) for _ in range(50)),
        lambda: _claim(log, f"{name}{next(ids)}", _ref(0)),
    )


# --------------------------------------------------------------------------- latency


def _unsynchronised(directory: Path) -> contextlib.AbstractContextManager[None]:
    """The store opened inside the block skips the disk flush (scratch stores only)."""
    return storage.backend(directory).unsynchronised(directory)


class Raw:
    """The floor: stdlib sqlite3, one claim-shaped row per BEGIN IMMEDIATE ... COMMIT."""

    def __init__(self, db: Path, synchronous: str) -> None:
        self.db, self.durable = db, synchronous == "FULL"
        self.conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute(
            "CREATE TABLE claims (effect_id TEXT, action_id TEXT, operation TEXT, "
            "backend TEXT, args_sha256 TEXT, recorded_at TEXT)"
        )
        self.rows = 0
        warm(db, lambda: self.insert(200), lambda: self.insert(1))

    def insert(self, rows: int) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        for _ in range(rows):
            self.rows += 1
            self.conn.execute(
                "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                (f"e{self.rows}", "bench", _OP.name, _OP.backend, _OP.args_sha256, fx.utc_now()),
            )
        self.conn.execute("COMMIT")

    def chunk(self, count: int) -> list[int]:
        samples = timed(lambda _: self.insert(1), range(count))
        if not self.durable:
            _flush(self.db)
        return samples


class Jsonl:
    """The file-based effect log: a claim's JSON line appended, then fsync."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.seq = 0

    def append(self, ref: fx.ResourceRef) -> None:
        self.seq += 1
        claim = _record(f"e{self.seq}", self.seq, ref)
        os.write(self.fd, (json.dumps(claim.to_dict(), separators=(",", ":")) + "\n").encode())
        os.fsync(self.fd)

    def chunk(self, count: int) -> list[int]:
        refs = [_ref(self.seq + i) for i in range(count)]
        return timed(lambda i: self.append(refs[i]), range(count))


class Library:
    """claim, claim + outcome, claim_many of 8, log.effect: each its own run in one warmed store."""

    def __init__(self, directory: Path) -> None:
        self.logs = [EffectLog(new_run_id(), directory) for _ in range(4)]
        self.single, self.pairs, self.batches, self.effects = self.logs
        _warm_log(self.single, "w")
        for log in (self.pairs, self.batches, self.effects):
            _claim(log, "first", _ref(0))  # a run's first write also records the run
        # The files log.effect writes and observes: a few, rewritten in turn.
        self.files = (directory.parent / "files").resolve()
        self.files.mkdir(exist_ok=True)
        self.next = 0

    def close(self) -> None:
        for log in self.logs:
            log.close()

    def _ids(self, count: int) -> range:
        self.next += count
        return range(self.next - count, self.next)

    def claim(self, count: int) -> list[int]:
        refs = {i: _ref(i) for i in self._ids(count)}
        return timed(lambda i: _claim(self.single, f"e{i}", refs[i]), refs)

    def claim_outcome(self, count: int) -> list[int]:
        refs = {i: _ref(i) for i in self._ids(count)}

        def pair(i: int) -> None:
            _claim(self.pairs, f"e{i}", refs[i])
            self.pairs.outcome(
                effect_id=f"e{i}",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
            )

        return timed(pair, refs)

    def effect(self, count: int) -> list[int]:
        ids = list(self._ids(count))

        def one(i: int) -> None:
            path = self.files / f"f{i % 16}"
            ref = fx.ResourceRef("fs", str(path), "target")
            with self.effects.effect(
                "write_file",
                args={"path": path.name},
                effect_id=f"e{i}",
                impact_scope=[ref],
                obligations=[fx.Postcondition(ref, fx.Predicate.EXISTS)],
            ):
                path.write_bytes(b"x")

        return timed(one, ids)

    def claim_many8(self, count: int) -> list[int]:
        batches = {
            i: [_request(f"e{i}-{k}", _ref(8 * i + k)) for k in range(8)] for i in self._ids(count)
        }
        return timed(lambda i: self.batches.claim_many(batches[i]), batches)


class CpuOff:
    """claim with synchronous=OFF: the library's own cost, with the disk taken out."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.next = 0
        with _unsynchronised(directory), EffectLog(new_run_id(), directory) as log:
            _warm_log(log, "w")
            # Held open, so that closing the last log neither checkpoints nor deletes the WAL.
            self.keeper = sqlite3.connect(_db(log), check_same_thread=False)
            self.keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def chunk(self, count: int) -> list[int]:
        # A log opened inside unsynchronised is OFF for as long as it is open.
        with _unsynchronised(self.directory), EffectLog(new_run_id(), self.directory) as log:
            _claim(log, "first", _ref(0))  # opens the store and records the run
            self.next += count
            refs = {i: _ref(i) for i in range(self.next - count, self.next)}
            samples = timed(lambda i: _claim(log, f"e{i}", refs[i]), refs)
        _flush(_db(log))
        return samples


class Sql:
    """A claim's SQL alone: the library's statement and row for it, run through sqlite3.

    The row of each claim is made beforehand by the library's own code (validated,
    encoded and chained to the one before it, as ``claim`` makes it), and the
    connection is set up as the store's writers are. Timed: ``BEGIN IMMEDIATE``, the
    schema check, the insert with every guard and the ``scope_index`` row, ``COMMIT``.
    What a claim costs beyond this is the library's Python.
    """

    def __init__(self, directory: Path, synchronous: str) -> None:
        with EffectLog(new_run_id(), directory) as log:  # the store, and the run's first claim
            _claim(log, "first", _ref(0))
            self.run_id, self.db = log.run_id, _db(log)
        self.durable = synchronous == "FULL"
        self.conn = sqlite3.connect(self.db, isolation_level=None, check_same_thread=False)
        engine.prepare(self.conn, engine.FULL if self.durable else engine.OFF)
        writing_connection(self.conn)
        self.seq, self.head = self.conn.execute(
            "SELECT seq + 1, hash FROM claims WHERE run_id = ? AND seq = 1", (self.run_id,)
        ).fetchone()
        warm(self.db, lambda: self.commit(self.steps(50)), lambda: self.commit(self.steps(1)))

    def steps(self, count: int) -> list[Step]:
        """The statements of ``count`` more claims of the run, chained, in one list."""
        records = []
        for _ in range(count):
            effect_id, ref = f"s{self.seq}", _ref(self.seq)
            key = fx.idempotency_key(self.run_id, effect_id)
            records.append(_record(effect_id, self.seq, ref, key))
            self.seq += 1
        steps, self.head = rows.prepare(self.run_id, records, self.head)
        return steps

    def commit(self, steps: list[Step]) -> None:
        cursor = self.conn.cursor()
        begin_immediate(cursor)
        cursor.execute("PRAGMA schema_version").fetchone()  # what each write checks first
        for sql, params in steps:
            execute_step(cursor, sql, params)
        cursor.execute("COMMIT")

    def chunk(self, count: int) -> list[int]:
        ready = [self.steps(1) for _ in range(count)]
        samples = timed(lambda i: self.commit(ready[i]), range(count))
        if not self.durable:
            _flush(self.db)
        return samples


# --------------------------------------------------------------------------- concurrency


def threads(
    directory: Path, count: int, claims: int, *, shared: bool = False
) -> tuple[list[int], int]:
    """``count`` threads, started together, claim ``claims`` times each: (latencies, wall ns).

    Each thread has a log of its own (its own run in the store), or with ``shared``
    all of them use one log.
    """
    logs = [EffectLog(new_run_id(), directory) for _ in range(1 if shared else count)]
    samples: list[list[int]] = [[] for _ in range(count)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(count + 1)

    def work(k: int) -> None:
        log = logs[0 if shared else k]
        refs = {i: _ref(i) for i in range(claims)}
        barrier.wait()
        try:
            samples[k] = timed(lambda i: _claim(log, f"t{k}-{i}", refs[i]), refs)
        except BaseException as e:  # raised again in the caller's thread
            failures.append(e)

    try:
        for log in logs:
            _claim(log, "first", _ref(0))  # opens the store and records the run
        pool = [threading.Thread(target=work, args=(k,)) for k in range(count)]
        for thread in pool:
            thread.start()
        barrier.wait()
        start = time.perf_counter_ns()
        for thread in pool:
            thread.join()
        wall = time.perf_counter_ns() - start
    finally:
        for log in logs:
            log.close()
    if failures:
        raise failures[0]
    return [s for per_thread in samples for s in per_thread], wall


def worker(directory: Path, claims: int) -> None:
    """One process of ``processes4``: say ready, wait for a line, claim, print the figures."""
    with EffectLog(new_run_id(), directory) as log:
        _claim(log, "first", _ref(0))  # opens the store and records the run
        refs = {i: _ref(i) for i in range(claims)}
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        errors = 0

        def claim(i: int) -> None:
            nonlocal errors
            try:
                _claim(log, f"p{i}", refs[i])
            except Exception:  # counted: the figure is how often a worker could not claim
                errors += 1

        samples = timed(claim, refs)
        sys.stdout.write(json.dumps({"samples": samples, "errors": errors}) + "\n")
        sys.stdout.flush()


def processes(directory: Path, count: int, claims: int) -> tuple[list[int], int, int]:
    """``count`` processes, started together, claim into one store: (latencies, errors, wall)."""
    argv = [sys.executable, "-m", "ledger._bench.cases", str(directory), str(claims)]
    pipe = subprocess.PIPE
    children = [
        subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, text=True)  # noqa: S603 - our own module
        for _ in range(count)
    ]
    try:
        for child in children:
            if child.stdout is None or child.stdout.readline() != "ready\n":
                raise _failed(child)
        start = time.perf_counter_ns()
        for child in children:
            if child.stdin is not None:
                child.stdin.write("go\n")
                child.stdin.close()
        # Each child prints its figures as it finishes: the last line read ends the wall time.
        lines = [child.stdout.readline() if child.stdout else "" for child in children]
        wall = time.perf_counter_ns() - start
        samples: list[int] = []
        errors = 0
        for child, line in zip(children, lines, strict=True):
            if not line:
                raise _failed(child)
            figures = json.loads(line)
            samples += figures["samples"]
            errors += figures["errors"]
            child.wait(timeout=60)
    finally:
        for child in children:
            child.kill()  # a no-op for one that has exited
            child.wait()
            for stream in (child.stdin, child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
    return samples, errors, wall


def _failed(child: subprocess.Popen[str]) -> EffectPersistenceError:
    child.kill()
    child.wait()
    err = child.stderr.read() if child.stderr is not None else ""
    last = err.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
    return EffectPersistenceError(f"a benchmark worker process failed: {last[0]}")


# --------------------------------------------------------------------------- scale builders


def _fill(log: EffectLog, records: int, *, unsettled: int = 0, observe_every: int = 5) -> int:
    """Append about ``records`` records to a new run; return how many it wrote.

    Claims with an obligation, each followed by its outcome, and an observation of
    every ``observe_every``-th claimed file, in transactions of thousands of records.
    A fifth of the files are claimed twice, so that effects overlap. ``unsettled``
    more claims at the end get no outcome.
    """
    claims = max(1, (records - unsettled) * observe_every // (2 * observe_every + 1))
    files = max(1, claims * 4 // 5)
    written = 0
    for start in range(0, claims, _BATCH):
        ids = range(start, min(start + _BATCH, claims))
        log.claim_many(_request(f"e{i}", _ref(i % files)) for i in ids)
        done = fx.ExecutionOutcome.REPORTED_SUCCESS
        log.outcome_many(
            OutcomeRequest(effect_id=f"e{i}", execution=done, impact=fx.Impact.CERTAIN) for i in ids
        )
        for i in ids[::observe_every]:
            log.observe(
                observation_id=f"o{i}",
                resource=_ref(i % files),
                mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
                coverage=fx.Coverage.COMPLETE,
                source_action_id="bench",
                exists=True,
            )
        written += 2 * len(ids) + len(ids[::observe_every])
    unsettle(log, "u", unsettled)
    return written + unsettled


def unsettle(log: EffectLog, prefix: str, count: int) -> None:
    log.claim_many(_request(f"{prefix}{i}", _ref(i, "/bench/u")) for i in range(count))


def built(builds: list[dict[str, Any]], name: str, directory: Path, make: Callable[[], int]) -> int:
    """Build the store in ``directory`` without fsync, to save time; it is measured FULL."""
    start = time.perf_counter()
    with _unsynchronised(directory):
        records = make()
    os.sync()  # the build's dirty pages must not reach the disk during the measurements
    builds.append(
        {"name": name, "records": records, "seconds": round(time.perf_counter() - start, 1)}
    )
    return records


def read_through(directory: Path) -> None:
    """Read a store's files, so that both stores are measured on a warm page cache."""
    for path in directory.iterdir():
        with path.open("rb") as f:
            while f.read(1 << 20):
                pass


def new_run(directory: Path, records: int, **fill: int) -> tuple[str, int]:
    run_id = new_run_id()
    with EffectLog(run_id, directory) as log:
        return run_id, _fill(log, records, **fill)


def build_store(directory: Path, records: int, targets: int) -> tuple[list[str], int]:
    """About ``records`` records: ``targets`` runs to recover, in the middle of other runs."""
    filler = max(0, records - targets * SMALL_RUN)
    count = math.ceil(filler / 20_000)
    others = [filler // count] * count if count else []
    half = len(others) // 2
    written = sum(new_run(directory, n, observe_every=20)[1] for n in others[:half])
    found = [new_run(directory, SMALL_RUN, unsettled=UNSETTLED) for _ in range(targets)]
    written += sum(new_run(directory, n, observe_every=20)[1] for n in others[half:])
    return [run_id for run_id, _ in found], written + sum(n for _, n in found)


def spread(log: EffectLog, count: int) -> list[str]:
    """``count`` settled effects of a run, spread over it."""
    ids = [c.effect_id for c in log.history().claims if c.effect_id.startswith("e")]
    return [ids[r * len(ids) // count] for r in range(count)]


if __name__ == "__main__":
    worker(Path(sys.argv[1]), int(sys.argv[2]))
