"""Reliability: a concurrency soak with real SIGKILLs (API behaviours 6, 7 and 9).

P child processes write R records each, every one its own run, into one store. They
start together (a barrier of files, as in test_concurrency). While they write, the
parent SIGKILLs some of them at random points and restarts each one at once: the new
process continues the run with ``EffectLog.load`` and ``recover_interrupted``. Every
child prints each record it was given back (acknowledged) with the call's latency.
No error may reach a caller: a child that was not killed exits 0, and no child's
stderr mentions ``locked`` or a traceback. Afterwards every acknowledged record is in
the store, every run is gap-free and its chain verifies, and ``verify`` finds nothing.

Profiles: ``make test`` runs a quick one (4 x 100); ``LEDGER_RELIABILITY=long`` the long
one (16 x 500). ``LEDGER_RELIABILITY_SEED`` overrides the seed;
``LEDGER_RELIABILITY_REPORT`` names a file that gets one JSON line of figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ledger import effects as fx
from ledger._inspect import verify
from ledger.effect_log import EffectLog
from tests.builders import PYTHON, REPO, subprocess_env
from tests.reliability.figures import report

LONG = os.environ.get("LEDGER_RELIABILITY") == "long"
SEED = int(os.environ.get("LEDGER_RELIABILITY_SEED", "20240917"))
PROCESSES, RECORDS, KILLS = (16, 500, 40) if LONG else (4, 100, 6)
DEADLINE = 1200.0 if LONG else 120.0  # the whole soak; a deadlock fails instead of hanging
POLL = 0.002


# --------------------------------------------------------------------------- the child

# argv: store, barrier dir ("-": none, a restart), name, run id, records, seed, mode
# (new|load). Stdout: one JSON object per line, flushed at once: "ack" for every record
# the library gave back (with the call's latency in seconds), "done" at the end.
# Writes until the run holds `records` records, then settles every open claim.
CHILD = textwrap.dedent(
    """
    import json, random, sys, time
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import EffectLog

    store, gate, name, run_id, target, seed, mode = sys.argv[1:8]
    target = int(target)
    rng = random.Random(int(seed))
    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    E = fx.ExecutionOutcome

    def emit(event, **fields):
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\\n")
        sys.stdout.flush()

    def call(kind, function, **kwargs):
        started = time.perf_counter()
        result = function(**kwargs)
        latency = time.perf_counter() - started
        if log.degraded:
            sys.exit(f"child {name}: run {run_id} is degraded after a {kind}")
        for record in result if isinstance(result, tuple) else (result,):
            emit("ack", kind=kind, record=record.to_dict(), latency=latency)
        return result

    if mode == "new":
        log = EffectLog(run_id, store)  # writes nothing yet
    else:
        started = time.perf_counter()
        log = EffectLog.load(run_id, store)
        emit("loaded", records=len(log.history().records()),
             latency=time.perf_counter() - started)
    if gate != "-":
        (Path(gate) / f"ready-{name}").touch()
        deadline = time.monotonic() + 120
        while not (Path(gate) / "go").exists():
            if time.monotonic() > deadline:
                sys.exit(f"child {name}: the barrier never opened")
            time.sleep(0.002)
    if mode == "load":
        call("recovery", log.recover_interrupted)

    history = log.history()
    claims = len(history.claims)
    observations = len(history.observations)
    settled = {o.effect_id for o in history.outcomes if o.terminal}
    running = {o.effect_id for o in history.outcomes if o.execution is E.RUNNING}
    unsettled = [c.effect_id for c in history.claims if c.effect_id not in settled]

    def ref():
        return fx.ResourceRef("fs", f"/sandbox/{name}/{rng.randrange(8)}.txt", "target")

    def outcome(effect_id, terminal):
        choices = [E.REPORTED_SUCCESS, E.FAILED, E.INTERRUPTED] if terminal else [E.RUNNING]
        execution = rng.choice(choices)
        impact = fx.Impact.POSSIBLE if execution is E.INTERRUPTED else rng.choice(list(fx.Impact))
        call("outcome", log.outcome, effect_id=effect_id, execution=execution, impact=impact)
        if execution is E.RUNNING:
            running.add(effect_id)
        else:
            unsettled.remove(effect_id)

    while len(log.history().records()) < target:
        roll = rng.random()
        if claims == 0 or roll < 0.4 or (roll < 0.75 and not unsettled):
            target_ref = ref()
            duties = [fx.Postcondition(target_ref, fx.Predicate.EXISTS)] if rng.random() < 0.5 else []
            call("claim", log.claim, effect_id=f"e{claims}", action_id=f"a{claims}",
                 operation=OP, impact_scope=[target_ref], obligations=duties)
            unsettled.append(f"e{claims}")
            claims += 1
        elif roll < 0.75:
            effect_id = rng.choice(unsettled)
            outcome(effect_id, effect_id in running or rng.random() < 0.8)
        else:
            call("observation", log.observe, observation_id=f"o{observations}", resource=ref(),
                 mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
                 coverage=fx.Coverage.COMPLETE, source_action_id=f"look{observations}",
                 exists=rng.random() < 0.8)
            observations += 1
    for effect_id in list(unsettled):
        outcome(effect_id, True)
    log.close()
    emit("done")
    """
)


@dataclass
class Worker:
    """One run, and the processes (incarnations) that have written it so far."""

    name: str
    run_id: str
    kill_at: list[int]  # kill when this many records are acknowledged (sorted, popped)
    acked: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> record
    replayed: int = 0  # acknowledged recovery outcomes
    latencies: list[float] = field(default_factory=list)
    load_latencies: list[float] = field(default_factory=list)
    incarnations: list[tuple[subprocess.Popen[bytes], Path, Path, bool]] = field(
        default_factory=list
    )  # (process, stdout file, stderr file, killed by us)
    stdout: IO[str] | None = None
    partial: str = ""
    said_done: bool = False  # the current incarnation printed "done"
    done: bool = False  # ... and exited
    kills: int = 0


def _spawn(worker: Worker, work: Path, store: Path, gate: Path | None, seed: int) -> None:
    n = len(worker.incarnations)
    out_path = work / f"{worker.name}-{n}.out"
    err_path = work / f"{worker.name}-{n}.err"
    args = [str(RECORDS), str(seed), "new" if n == 0 else "load"]
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [PYTHON, "-c", CHILD, str(store), str(gate or "-"), worker.name, worker.run_id, *args],
            stdout=out,
            stderr=err,
            env=subprocess_env(),
            cwd=REPO,
        )
    if worker.stdout is not None:
        worker.stdout.close()
    worker.stdout = out_path.open(encoding="utf-8")
    worker.partial = ""
    worker.said_done = False
    worker.incarnations.append((proc, out_path, err_path, False))


def _read(worker: Worker) -> None:
    """Take in the whole lines the current incarnation has printed since the last call."""
    assert worker.stdout is not None
    worker.partial += worker.stdout.read()
    *lines, worker.partial = worker.partial.split("\n")
    for line in lines:
        event = json.loads(line)
        if event["event"] == "ack":
            worker.acked[event["record"]["seq"]] = event["record"]
            worker.latencies.append(event["latency"])
            worker.replayed += event["kind"] == "recovery"
        elif event["event"] == "loaded":
            worker.load_latencies.append(event["latency"])
        elif event["event"] == "done":
            worker.said_done = True


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _soak(tmp_path: Path, rng: random.Random, workers: list[Worker]) -> list[str]:
    """Run the workers to completion, killing and restarting them; return what went wrong."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    problems: list[str] = []
    for worker in workers:
        _spawn(worker, tmp_path, store, gate, rng.getrandbits(32))
    deadline = time.monotonic() + DEADLINE
    while len(list(gate.glob("ready-*"))) < len(workers):
        dead = [w for w in workers if w.incarnations[0][0].poll() is not None]
        if dead:
            return [
                f"{w.name} died before the barrier: {w.incarnations[0][2].read_text()}"
                for w in dead
            ]
        if time.monotonic() > deadline:
            return ["the children never reached the barrier"]
        time.sleep(POLL)
    (gate / "go").touch()
    while not all(w.done for w in workers):
        if time.monotonic() > deadline:
            return [f"the soak did not finish in {DEADLINE} s (deadlock?)"]
        for worker in workers:
            if worker.done:
                continue
            proc, _, err_path, _ = worker.incarnations[-1]
            _read(worker)
            if worker.kill_at and len(worker.acked) >= worker.kill_at[0]:
                worker.kill_at.pop(0)
                time.sleep(rng.uniform(0, 0.005))  # land anywhere in the next call
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    _read(worker)
                    worker.incarnations[-1] = (*worker.incarnations[-1][:3], True)
                    worker.kills += 1
                    if worker.said_done:  # killed after its last write: nothing to continue
                        worker.done = True
                    else:
                        _spawn(worker, tmp_path, store, None, rng.getrandbits(32))
                continue
            if proc.poll() is not None:
                _read(worker)
                if proc.returncode != 0 or not worker.said_done:
                    problems.append(
                        f"{worker.name} exited {proc.returncode} unkilled, "
                        f"done={worker.said_done}: " + err_path.read_text()
                    )
                worker.done = True
        time.sleep(POLL)
    return problems


def _finish(workers: list[Worker]) -> None:
    for worker in workers:
        for proc, *_ in worker.incarnations:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if worker.stdout is not None:
            worker.stdout.close()


def test_killed_and_restarted_writers_lose_nothing_and_never_see_a_locked_database(
    tmp_path: Path,
) -> None:
    """Many processes writing one store, some SIGKILLed and restarted, lose no acknowledged record and meet no error."""
    rng = random.Random(SEED)
    workers = [Worker(f"w{p}", f"{rng.getrandbits(128):032x}", []) for p in range(PROCESSES)]
    for _ in range(KILLS):
        rng.choice(workers).kill_at.append(rng.randrange(RECORDS - 5))
    for worker in workers:
        worker.kill_at.sort()
    started = time.monotonic()
    problems: list[str] = []
    figures: dict[str, Any] = {}
    try:
        problems += _soak(tmp_path, rng, workers)
        problems += _check(tmp_path / "store", workers, figures)
    finally:
        _finish(workers)
        latencies = [x for w in workers for x in w.latencies]
        report(
            {
                "test": "soak",
                "profile": "long" if LONG else "quick",
                "seed": SEED,
                "iterations": PROCESSES * RECORDS,
                "processes": PROCESSES,
                "records_per_process": RECORDS,
                "kills": sum(w.kills for w in workers),
                "incarnations": sum(len(w.incarnations) for w in workers),
                "acknowledged": sum(len(w.acked) for w in workers),
                "replayed": sum(w.replayed for w in workers),
                **figures,
                "latency_max_s": round(max(latencies, default=0.0), 4),
                "latency_p99_s": round(_percentile(latencies, 0.99), 4),
                "latency_p50_s": round(_percentile(latencies, 0.5), 4),
                "load_latency_max_s": round(
                    max((x for w in workers for x in w.load_latencies), default=0.0), 4
                ),
                "problems": len(problems),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    assert not problems, f"seed {SEED}:\n" + "\n".join(problems[:20])


def _check(store: Path, workers: list[Worker], figures: dict[str, Any]) -> list[str]:
    """Check the children's stderr and the store against what they acknowledged."""
    problems: list[str] = []
    figures.update(lost=0, unacknowledged_durable=0, database_locked_errors=0, tracebacks=0)
    for worker in workers:
        for proc, _, err_path, killed in worker.incarnations:
            err = err_path.read_text()
            figures["database_locked_errors"] += err.count("locked")
            figures["tracebacks"] += err.count("Traceback")
            if "locked" in err or "Traceback" in err or (err and not killed):
                problems.append(f"{worker.name} (pid {proc.pid}) wrote to stderr:\n{err}")
            if not killed and proc.returncode != 0:
                problems.append(f"{worker.name} (pid {proc.pid}) exited {proc.returncode}")

    records = 0
    for worker in workers:
        with EffectLog.load(worker.run_id, store) as log:  # validates every row and the chain
            history = log.history()
        durable = {r.seq: r.to_dict() for r in history.records()}
        records += len(durable)
        if sorted(durable) != list(range(1, len(durable) + 1)):
            problems.append(f"{worker.name}: seqs are not gap-free: {sorted(durable)}")
        lost = {seq: r for seq, r in worker.acked.items() if durable.get(seq) != r}
        figures["lost"] += len(lost)
        if lost:
            problems.append(f"{worker.name}: acknowledged records lost or changed: {lost}")
        # A kill takes at most one call in flight with it (a claim, an outcome or an
        # observation that committed unacknowledged); a recovery cut short may add several
        # replayed outcomes, which the next incarnation then finds and acknowledges no more.
        extra = [
            r
            for seq, r in durable.items()
            if seq not in worker.acked and not r.get("replayed", False)
        ]
        figures["unacknowledged_durable"] += len(extra)
        if len(extra) > worker.kills:
            problems.append(f"{worker.name}: {len(extra)} records nobody acknowledged: {extra}")
        if len(durable) < RECORDS:
            problems.append(f"{worker.name}: the run holds {len(durable)} < {RECORDS} records")
        pending = [
            c.effect_id
            for c in history.claims
            if fx.assess(c, history).verdict is fx.EffectVerdict.PENDING
        ]
        if pending:
            problems.append(f"{worker.name}: claims left pending after the last writer: {pending}")

    result = verify(store)
    figures["durable_records"] = result.records
    if result.problems:
        problems.append(f"verify found problems: {result.problems}")
    if (result.runs, result.records) != (len(workers), records):
        problems.append(f"verify counts {result.runs} runs, {result.records} records")
    return problems
