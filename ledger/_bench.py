"""``ledger bench``: what a claim costs on this disk, next to what it cannot beat.

Every figure comes from one run in a fresh scratch directory, removed afterwards.
The latency cases run interleaved, a chunk of each per round in rotating order, so
that noise from the rest of the machine falls on all of them alike. Every SQLite
database measured is first written until its WAL has been checkpointed once: until
then each commit also grows the file, which is not the steady state of a store.

A worker process of the ``processes4`` case runs as ``python -m ledger._bench DIR N``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import effects as fx
from ledger._paths import effects_dir
from ledger._store import synchronous_off
from ledger.effect_log import (
    ClaimRequest,
    EffectLog,
    EffectPersistenceError,
    OutcomeRequest,
    new_run_id,
)

__all__ = ["RATIOS", "default_directory", "render", "run", "threads", "worker"]

Progress = Callable[[str], None]
Table = Callable[[Sequence[str], Sequence[Sequence[object]]], None]

# The target of each ratio, in the order of the report.
RATIOS: dict[str, tuple[str, float]] = {
    "claim_vs_raw": ("<=", 1.15),
    "claim_vs_jsonl": ("<=", 1.0),
    "claim_many8_vs_claim": ("<=", 0.2),
    "threads8_vs_single": (">=", 4.0),
    "cpu_off_vs_raw_off": ("<=", 3.0),
    "assess_100k_vs_1k": ("<=", 2.0),
    "recovery_1m_vs_10k": ("<=", 2.0),
}
_PROCESSES_TARGET = "errors == 0, max_wait_s < 1"

_OP = fx.OperationRef("write_file", "fs/1", hashlib.sha256(b'{"path": "f"}').hexdigest())
_WAL_BYTES = 1000 * 4096  # SQLite's default wal_autocheckpoint and page size, kept by the store
_BATCH = 2000  # claims per transaction when building runs and stores
_SMALL_RUN = 1_000
_SMALL_STORE = 10_000
_UNSETTLED = 100


@dataclass(frozen=True)
class _Plan:
    rounds: int  # latency rounds
    chunk: int  # samples of each latency case per round
    thread_rounds: int
    thread_claims: int  # per thread and round
    process_claims: int  # per process
    big_run: int  # records
    big_store: int  # records
    repeats: int  # recoveries per size; the 10k store holds as many runs of 1k
    assessments: int  # per size


_FULL = _Plan(150, 10, 7, 60, 250, 100_000, 1_000_000, 7, 101)
_QUICK = _Plan(20, 10, 3, 20, 50, 10_000, 100_000, 5, 15)


def _label(records: int) -> str:
    return f"{records // 1_000_000}m" if records >= 1_000_000 else f"{records // 1000}k"


# --------------------------------------------------------------------------- helpers


def _timed(step: Callable[[int], object], indices: Iterable[int]) -> list[int]:
    samples = []
    for i in indices:
        start = time.perf_counter_ns()
        step(i)
        samples.append(time.perf_counter_ns() - start)
    return samples


def _alternate(
    repeats: int,
    first: Callable[[int], object],
    second: Callable[[int], object],
    prepare: Callable[[int], object] = lambda _: None,
) -> tuple[list[int], list[int]]:
    """Time ``first(r)`` and ``second(r)`` for each repeat, which goes first alternating."""
    a: list[int] = []
    b: list[int] = []
    for r in range(repeats):
        prepare(r)
        order = ((a, first), (b, second)) if r % 2 == 0 else ((b, second), (a, first))
        for samples, step in order:
            samples.extend(_timed(step, (r,)))
    return a, b


def _case(what: str, samples: Sequence[int], per_s: float | None = None) -> dict[str, Any]:
    """n, median and p99 in microseconds, operations per second of the time they took."""
    ordered = sorted(samples)
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
    return {
        "what": what,
        "n": len(ordered),
        "p50_us": round(statistics.median(ordered) / 1000, 1),
        "p99_us": round(p99 / 1000, 1),
        "per_s": round(per_s if per_s is not None else len(ordered) * 1e9 / sum(ordered), 1),
    }


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


def _warm(db: Path, bulk: Callable[[], object], step: Callable[[], object]) -> None:
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


def _warm_log(log: EffectLog, name: str) -> None:
    ids = iter(range(10**9))
    _warm(
        log.path,
        lambda: log.claim_many(_request(f"{name}{next(ids)}", _ref(0)) for _ in range(50)),
        lambda: _claim(log, f"{name}{next(ids)}", _ref(0)),
    )


# --------------------------------------------------------------------------- latency


class _Raw:
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
        _warm(db, lambda: self.insert(200), lambda: self.insert(1))

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
        samples = _timed(lambda _: self.insert(1), range(count))
        if not self.durable:
            _flush(self.db)
        return samples


class _Jsonl:
    """The file-based effect log: a claim's JSON line appended, then fsync."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self.seq = 0

    def append(self, ref: fx.ResourceRef) -> None:
        self.seq += 1
        claim = fx.EffectClaim(
            effect_id=f"e{self.seq}",
            seq=self.seq,
            action_id="bench",
            operation=_OP,
            impact_scope=(ref,),
            obligations=(fx.Postcondition(ref, fx.Predicate.EXISTS),),
            recorded_at=fx.utc_now(),
        )
        os.write(self.fd, (json.dumps(claim.to_dict(), separators=(",", ":")) + "\n").encode())
        os.fsync(self.fd)

    def chunk(self, count: int) -> list[int]:
        refs = [_ref(self.seq + i) for i in range(count)]
        return _timed(lambda i: self.append(refs[i]), range(count))


class _Library:
    """claim, claim + outcome, claim_many of 8: each its own run in one warmed store."""

    def __init__(self, directory: Path) -> None:
        self.logs = [EffectLog(new_run_id(), directory) for _ in range(3)]
        self.single, self.pairs, self.batches = self.logs
        _warm_log(self.single, "w")
        for log in (self.pairs, self.batches):
            _claim(log, "first", _ref(0))  # a run's first write also records the run
        self.next = 0

    def close(self) -> None:
        for log in self.logs:
            log.close()

    def _ids(self, count: int) -> range:
        self.next += count
        return range(self.next - count, self.next)

    def claim(self, count: int) -> list[int]:
        refs = {i: _ref(i) for i in self._ids(count)}
        return _timed(lambda i: _claim(self.single, f"e{i}", refs[i]), refs)

    def claim_outcome(self, count: int) -> list[int]:
        refs = {i: _ref(i) for i in self._ids(count)}

        def pair(i: int) -> None:
            _claim(self.pairs, f"e{i}", refs[i])
            self.pairs.outcome(
                effect_id=f"e{i}",
                execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN,
            )

        return _timed(pair, refs)

    def claim_many8(self, count: int) -> list[int]:
        batches = {
            i: [_request(f"e{i}-{k}", _ref(8 * i + k)) for k in range(8)] for i in self._ids(count)
        }
        return _timed(lambda i: self.batches.claim_many(batches[i]), batches)


class _CpuOff:
    """claim with synchronous=OFF: the library's own cost, with the disk taken out."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.next = 0
        with synchronous_off(), EffectLog(new_run_id(), directory) as log:
            _warm_log(log, "w")
            # Held open, so that closing the last log neither checkpoints nor deletes the WAL.
            self.keeper = sqlite3.connect(log.path, check_same_thread=False)
            self.keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def chunk(self, count: int) -> list[int]:
        # synchronous_off reaches the connections opened inside it: the log lives there.
        with synchronous_off(), EffectLog(new_run_id(), self.directory) as log:
            _claim(log, "first", _ref(0))  # opens the store and records the run
            self.next += count
            refs = {i: _ref(i) for i in range(self.next - count, self.next)}
            samples = _timed(lambda i: _claim(log, f"e{i}", refs[i]), refs)
        _flush(log.path)
        return samples


_WHAT = {
    "raw": "sqlite3: BEGIN IMMEDIATE, INSERT one claim-shaped row, COMMIT",
    "jsonl": "a claim as a JSON line: O_APPEND write, fsync",
    "claim": "EffectLog.claim: one resource, one postcondition",
    "claim_outcome": "claim, then outcome: the pair",
    "claim_many8": "claim_many of 8 claims: the batch",
    "raw_off": "raw with synchronous=OFF",
    "cpu_off": "claim with synchronous=OFF",
}


def _writes(scratch: Path, plan: _Plan, say: Progress) -> dict[str, dict[str, Any]]:
    """The latency cases, interleaved, then threads and processes on the same warm store."""
    say("warming up: writing every database until its WAL is checkpointed")
    with contextlib.ExitStack() as stack:
        raw = _Raw(scratch / "raw.sqlite3", "FULL")
        stack.callback(raw.conn.close)
        raw_off = _Raw(scratch / "raw_off.sqlite3", "OFF")
        stack.callback(raw_off.conn.close)
        jsonl = _Jsonl(scratch / "claims.jsonl")
        stack.callback(os.close, jsonl.fd)
        library = _Library(scratch / "store")
        stack.callback(library.close)
        off = _CpuOff(scratch / "store_off")
        stack.callback(off.keeper.close)
        cases: dict[str, Callable[[int], list[int]]] = {
            "raw": raw.chunk,
            "jsonl": jsonl.chunk,
            "claim": library.claim,
            "claim_outcome": library.claim_outcome,
            "claim_many8": library.claim_many8,
            "raw_off": raw_off.chunk,
            "cpu_off": off.chunk,
        }
        names = list(cases)
        samples: dict[str, list[int]] = {name: [] for name in names}
        for r in range(plan.rounds):
            if r % 10 == 0:
                say(f"latency rounds {r + 1} to {min(r + 10, plan.rounds)} of {plan.rounds}")
            turn = r % len(names)
            for name in names[turn:] + names[:turn]:
                samples[name] += cases[name](plan.chunk)
        found = {name: _case(_WHAT[name], samples[name]) for name in names}
        found["claim_many8"]["per_claim_p50_us"] = round(found["claim_many8"]["p50_us"] / 8, 1)
        # Still open: the store and its WAL stay as warm as the cases above found them.
        return found | _concurrency(scratch / "store", plan, say)


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
            samples[k] = _timed(lambda i: _claim(log, f"t{k}-{i}", refs[i]), refs)
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

        samples = _timed(claim, refs)
        sys.stdout.write(json.dumps({"samples": samples, "errors": errors}) + "\n")
        sys.stdout.flush()


def _processes(directory: Path, count: int, claims: int) -> tuple[list[int], int, int]:
    """``count`` processes, started together, claim into one store: (latencies, errors, wall)."""
    argv = [sys.executable, "-m", "ledger._bench", str(directory), str(claims)]
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


def _concurrency(directory: Path, plan: _Plan, say: Progress) -> dict[str, dict[str, Any]]:
    say("1 thread and 8 threads, own logs, in turn")
    found: dict[int, tuple[list[int], int]] = {1: ([], 0), 8: ([], 0)}
    for r in range(plan.thread_rounds):
        for count in (1, 8) if r % 2 == 0 else (8, 1):
            samples, wall = threads(directory, count, plan.thread_claims)
            found[count] = (found[count][0] + samples, found[count][1] + wall)
    cases = {}
    for count, (samples, wall) in found.items():
        what = "1 thread" if count == 1 else f"{count} threads started together, each"
        what += " with its own log; per_s is claims/s"
        cases[f"threads{count}"] = _case(what, samples, len(samples) * 1e9 / wall)
    say("4 processes into one store")
    samples, errors, wall = _processes(directory, 4, plan.process_claims)
    what = "4 processes into one store, started together; per_s is claims/s"
    cases["processes4"] = _case(what, samples, len(samples) * 1e9 / wall) | {
        "errors": errors,
        "max_wait_s": round(max(samples) / 1e9, 4),
    }
    return cases


# --------------------------------------------------------------------------- scale


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
    _unsettle(log, "u", unsettled)
    return written + unsettled


def _unsettle(log: EffectLog, prefix: str, count: int) -> None:
    log.claim_many(_request(f"{prefix}{i}", _ref(i, "/bench/u")) for i in range(count))


def _built(builds: list[dict[str, Any]], name: str, make: Callable[[], int]) -> int:
    """Build without fsync, to save time; every measurement on it runs with FULL."""
    start = time.perf_counter()
    with synchronous_off():
        records = make()
    os.sync()  # the build's dirty pages must not reach the disk during the measurements
    builds.append(
        {"name": name, "records": records, "seconds": round(time.perf_counter() - start, 1)}
    )
    return records


def _read_through(directory: Path) -> None:
    """Read a store's files, so that both stores are measured on a warm page cache."""
    for path in directory.iterdir():
        with path.open("rb") as f:
            while f.read(1 << 20):
                pass


def _new_run(directory: Path, records: int, **fill: int) -> tuple[str, int]:
    run_id = new_run_id()
    with EffectLog(run_id, directory) as log:
        return run_id, _fill(log, records, **fill)


def _store(directory: Path, records: int, targets: int) -> tuple[list[str], int]:
    """About ``records`` records: ``targets`` runs to recover, in the middle of other runs."""
    filler = max(0, records - targets * _SMALL_RUN)
    count = math.ceil(filler / 20_000)
    others = [filler // count] * count if count else []
    half = len(others) // 2
    written = sum(_new_run(directory, n, observe_every=20)[1] for n in others[:half])
    found = [_new_run(directory, _SMALL_RUN, unsettled=_UNSETTLED) for _ in range(targets)]
    written += sum(_new_run(directory, n, observe_every=20)[1] for n in others[half:])
    return [run_id for run_id, _ in found], written + sum(n for _, n in found)


def _spread(log: EffectLog, count: int) -> list[str]:
    """``count`` settled effects of a run, spread over it."""
    ids = [c.effect_id for c in log.history().claims if c.effect_id.startswith("e")]
    return [ids[r * len(ids) // count] for r in range(count)]


def _pair(
    kind: str, what: str, sizes: dict[str, int], times: tuple[list[int], list[int]]
) -> dict[str, dict[str, Any]]:
    return {
        f"{kind}_{label}": _case(what.format(records), samples) | {"records": records}
        for (label, records), samples in zip(sizes.items(), times, strict=True)
    }


def _scale(
    scratch: Path, plan: _Plan, builds: list[dict[str, Any]], say: Progress
) -> dict[str, dict[str, Any]]:
    small, big = _label(_SMALL_RUN), _label(plan.big_run)
    runs_dir = scratch / "runs"
    runs: dict[str, list[tuple[str, int]]] = {small: [], big: []}

    def make_runs() -> int:
        for _ in range(plan.repeats):
            runs[small].append(_new_run(runs_dir, _SMALL_RUN, unsettled=_UNSETTLED))
        runs[big].append(_new_run(runs_dir, plan.big_run, unsettled=_UNSETTLED))
        return sum(n for found in runs.values() for _, n in found)

    say(f"building runs of {small} and {big} records")
    _built(builds, f"{plan.repeats} runs of {small} and one of {big}", make_runs)
    stores = {_label(_SMALL_STORE): _SMALL_STORE, _label(plan.big_store): plan.big_store}
    targets: dict[str, list[str]] = {}
    for label, records in stores.items():
        say(f"building a store of {label} records")

        def make_store(label: str = label, records: int = records) -> int:
            targets[label], written = _store(scratch / f"store_{label}", records, plan.repeats)
            return written

        stores[label] = _built(builds, f"store of {label}", make_store)

    say("assess and recover_interrupted on loaded runs")
    with contextlib.ExitStack() as stack:
        few = [stack.enter_context(EffectLog.load(run_id, runs_dir)) for run_id, _ in runs[small]]
        many = stack.enter_context(EffectLog.load(runs[big][0][0], runs_dir))
        picks = [_spread(few[0], plan.assessments), _spread(many, plan.assessments)]
        assessed = _alternate(
            plan.assessments,
            lambda r: few[0].assess(picks[0][r]),
            lambda r: many.assess(picks[1][r]),
        )
        # Recovery settles a run: each repeat has a small run of its own, while the large
        # run gets new unsettled claims before every repeat but the first.
        recovered = _alternate(
            plan.repeats,
            lambda r: few[r].recover_interrupted(),
            lambda _: many.recover_interrupted(),
            lambda r: _unsettle(many, f"u{r}-", _UNSETTLED if r else 0),
        )
    sizes = {small: runs[small][0][1], big: runs[big][0][1]}
    cases = _pair("assess", "log.assess, a loaded run of {:,} records", sizes, assessed)
    what = f"recover_interrupted of {_UNSETTLED} claims, a loaded run of {{:,}} records"
    cases |= _pair("recover", what, sizes, recovered)

    say("EffectLog.load + recover_interrupted in a small and a large store")
    for label in stores:
        _read_through(scratch / f"store_{label}")
    opened: list[EffectLog] = []

    def recovery(label: str) -> Callable[[int], None]:
        def step(r: int) -> None:
            opened.append(EffectLog.load(targets[label][r], scratch / f"store_{label}"))
            opened[-1].recover_interrupted()

        return step

    def close(_: int) -> None:  # not timed: closing a store's last log checkpoints its WAL
        while opened:
            opened.pop().close()

    small_store, big_store = stores
    try:
        recoveries = _alternate(plan.repeats, recovery(small_store), recovery(big_store), close)
    finally:
        close(0)
    what = f"load + recover a run of {_SMALL_RUN:,} records in a store of {{:,}}"
    return cases | _pair("recovery", what, stores, recoveries)


# --------------------------------------------------------------------------- the report


def default_directory() -> Path:
    """Where the scratch directory goes by default: beside the default store, on its disk."""
    path = effects_dir().parent
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def _checked(directory: Path | None) -> Path:
    path = (directory if directory is not None else default_directory()).absolute()
    if not path.exists():
        raise EffectPersistenceError(f"cannot benchmark in {path}: no such directory")
    if not path.is_dir():
        raise EffectPersistenceError(f"cannot benchmark in {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise EffectPersistenceError(f"cannot benchmark in {path}: not writable")
    return path


def run(
    directory: Path | None = None, *, quick: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Measure in a new scratch directory under ``directory``, remove it, return the report.

    ``directory`` defaults to :func:`default_directory`. A directory that is missing,
    not a directory or not writable raises :class:`EffectPersistenceError`; trouble
    writing the scratch files raises ``OSError`` or :class:`EffectPersistenceError`.
    """
    say = progress or (lambda _: None)
    plan = _QUICK if quick else _FULL
    base = _checked(directory)
    started = time.perf_counter()
    try:
        scratch = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=base))
    except OSError as e:
        raise EffectPersistenceError(f"cannot benchmark in {base}: {e.strerror or e}") from e
    builds: list[dict[str, Any]] = []
    try:
        cases = _writes(scratch, plan, say) | _scale(scratch, plan, builds, say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - started
    return _report(
        base=base,
        scratch=scratch,
        plan=plan,
        quick=quick,
        cases=cases,
        builds=builds,
        seconds=seconds,
    )


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3)


def _report(
    *,
    base: Path,
    scratch: Path,
    plan: _Plan,
    quick: bool,
    cases: dict[str, dict[str, Any]],
    builds: list[dict[str, Any]],
    seconds: float,
) -> dict[str, Any]:
    def p50(name: str) -> float:
        return float(cases[name]["p50_us"])

    small, big = _label(_SMALL_RUN), _label(plan.big_run)
    small_store, big_store = _label(_SMALL_STORE), _label(plan.big_store)
    ratios = {
        "claim_vs_raw": _ratio(p50("claim"), p50("raw")),
        "claim_vs_jsonl": _ratio(p50("claim"), p50("jsonl")),
        "claim_many8_vs_claim": _ratio(p50("claim_many8") / 8, p50("claim")),
        "threads8_vs_single": _ratio(cases["threads8"]["per_s"], cases["threads1"]["per_s"]),
        "cpu_off_vs_raw_off": _ratio(p50("cpu_off"), p50("raw_off")),
        "assess_100k_vs_1k": _ratio(p50(f"assess_{big}"), p50(f"assess_{small}")),
        "recovery_1m_vs_10k": _ratio(p50(f"recovery_{big_store}"), p50(f"recovery_{small_store}")),
    }
    met = {
        name: value <= RATIOS[name][1] if RATIOS[name][0] == "<=" else value >= RATIOS[name][1]
        for name, value in ratios.items()
    }
    procs = cases["processes4"]
    notes = [
        (
            f"Latency cases ran interleaved: {plan.rounds} rounds of {plan.chunk} samples of "
            "each, in rotating order, so that noise from the rest of the machine fell on all "
            "alike."
        ),
        (
            "Before measuring, every SQLite database (raw, raw_off, the library's stores) was "
            "written until its WAL had been checkpointed once and stopped growing: all measure "
            "the steady state. The JSONL file grows with every line, as such a log does."
        ),
        (
            "raw_off and cpu_off run with synchronous=OFF: the cost of the SQL and of the "
            "library with the disk taken out. Nothing written so is durable."
        ),
        (
            "The runs and stores of the scale cases were built with synchronous=OFF to save "
            "time (not counted, see the build times); every measurement on them ran with "
            "synchronous=FULL, on a warm page cache."
        ),
        (
            f"recover_{big} repeats on one run, which gets {_UNSETTLED} new claims before each "
            f"repeat; recover_{small} uses a run of its own each time."
        ),
        f"The scratch directory {scratch} was removed.",
    ]
    if quick:
        notes.append(
            f"--quick: fewer samples; the {big}-record run stands in for the 100k one in "
            f"assess_100k_vs_1k and the {big_store}-record store for the 1m one in "
            "recovery_1m_vs_10k."
        )
    return {
        "quick": quick,
        "store": str(base),
        "seconds": round(seconds, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
        "notes": notes,
        "cases": cases,
        "builds": builds,
        "ratios": ratios,
        "targets": {name: f"{op} {bound:g}" for name, (op, bound) in RATIOS.items()},
        "met": met,
        "processes4": {
            "claims_per_s": procs["per_s"],
            "errors": procs["errors"],
            "max_wait_s": procs["max_wait_s"],
            "p99_us": procs["p99_us"],
            "target": _PROCESSES_TARGET,
            "met": procs["errors"] == 0 and procs["max_wait_s"] < 1,
        },
    }


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def render(report: dict[str, Any], table: Table, echo: Callable[[str], None]) -> None:
    """Print ``report`` for people: the cases, the ratios against their targets, the notes."""
    machine = report["machine"]
    mode = " --quick" if report["quick"] else ""
    echo(f"ledger bench{mode} in {report['store']}, {report['seconds']} s")
    echo(
        f"{machine['cpus']} CPUs, {machine['platform']}, Python {machine['python']}, "
        f"SQLite {machine['sqlite']}\n"
    )
    table(
        ("CASE", "N", "P50 µs", "P99 µs", "PER SECOND", "WHAT"),
        [
            (
                name,
                c["n"],
                _number(c["p50_us"]),
                _number(c["p99_us"]),
                _number(c["per_s"]),
                c["what"],
            )
            for name, c in report["cases"].items()
        ],
    )
    echo("")
    verdict = {True: "met", False: "missed"}
    procs = report["processes4"]
    rows: list[tuple[object, ...]] = [
        (name, f"{value:.3f}", report["targets"][name], verdict[report["met"][name]])
        for name, value in report["ratios"].items()
    ]
    rows.append(
        (
            "processes4",
            f"{procs['errors']} errors, max wait {procs['max_wait_s']:.3f} s",
            procs["target"],
            verdict[procs["met"]],
        )
    )
    table(("RATIO", "VALUE", "TARGET", "RESULT"), rows)
    echo("")
    table(
        ("BUILT (NOT TIMED)", "RECORDS", "SECONDS"),
        [(b["name"], f"{b['records']:,}", b["seconds"]) for b in report["builds"]],
    )
    echo("")
    for note in report["notes"]:
        echo(textwrap.fill(note, 88, initial_indent="- ", subsequent_indent="  "))


if __name__ == "__main__":
    worker(Path(sys.argv[1]), int(sys.argv[2]))
