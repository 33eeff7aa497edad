"""``ledger bench --store postgresql://...``: what a durable claim costs on a PostgreSQL server.

Everything is measured in a scratch schema created for the run and dropped afterwards
(the URL's ``search_path`` points there), so that the user's tables are never touched:
the floor (a raw psycopg INSERT and COMMIT of one row, on one connection), the ledger's
claim latency on the same server, claims per second from 1, 4 and 16 processes, each
writing its own run, and from 1 and 8 threads of this process, each with a log of its own
(whose writes the store can group into shared transactions).
"""

from __future__ import annotations

import secrets
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from ledger.effect_log import EffectLog, new_run_id
from ledger.effects import OperationRef
from ledger.errors import EffectPersistenceError
from ledger.storage import describe

Progress = Callable[[str], None]

_OP = OperationRef("bench", "bench/1", "0" * 64)

_WORKER = """
import sys, time
from ledger.effect_log import EffectLog, new_run_id
from ledger.effects import OperationRef
url, count = sys.argv[1], int(sys.argv[2])
op = OperationRef("bench", "bench/1", "0" * 64)
with EffectLog(new_run_id(), url) as log:
    log.claim(effect_id="warm", action_id="a", operation=op, impact_scope=())
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        log.claim(effect_id=f"e{i}", action_id="a", operation=op, impact_scope=())
print("done", flush=True)
"""


def _scoped(url: str, schema: str) -> str:
    """``url`` with every session's search_path set to ``schema``."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    query.append(("options", f"-c search_path={schema}"))
    # Percent-encoded spaces: libpq does not read "+" as one.
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=encoded))


def _connect(url: str) -> Any:
    import psycopg  # noqa: PLC0415 - the optional driver, needed only here

    parts = urllib.parse.urlsplit(url.replace("postgresql+psycopg://", "postgresql://", 1))
    return psycopg.connect(urllib.parse.urlunsplit(parts), autocommit=False)


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "samples": len(ordered),
    }


def _raw(url: str, count: int) -> list[float]:
    with _connect(url) as conn:
        conn.execute("CREATE TABLE bench_raw (id integer PRIMARY KEY, body text NOT NULL)")
        conn.commit()
        samples = []
        body = "x" * 300  # about a claim row's size
        for i in range(count):
            started = time.perf_counter()
            conn.execute("INSERT INTO bench_raw VALUES (%s, %s)", (i, body))
            conn.commit()
            samples.append(time.perf_counter() - started)
        return samples


def _claims(url: str, count: int) -> list[float]:
    samples = []
    with EffectLog(new_run_id(), url) as log:
        log.claim(effect_id="warm", action_id="a", operation=_OP, impact_scope=())
        for i in range(count):
            started = time.perf_counter()
            log.claim(effect_id=f"e{i}", action_id="a", operation=_OP, impact_scope=())
            samples.append(time.perf_counter() - started)
    return samples


def _throughput(url: str, processes: int, count: int) -> float:
    """Claims per second from ``processes`` processes, each claiming ``count`` times."""
    workers = [
        subprocess.Popen(  # noqa: S603 - this Python, running the script above
            [sys.executable, "-c", _WORKER, url, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None  # noqa: S101 - set by PIPE
            if worker.stdout.readline().strip() != "ready":
                raise EffectPersistenceError("a benchmark worker failed to start")
        started = time.perf_counter()
        for worker in workers:
            assert worker.stdin is not None  # noqa: S101 - set by PIPE
            worker.stdin.write("go\n")
            worker.stdin.flush()
        for worker in workers:
            assert worker.stdout is not None  # noqa: S101 - set by PIPE
            if worker.stdout.readline().strip() != "done":
                raise EffectPersistenceError("a benchmark worker failed")
        seconds = time.perf_counter() - started
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
            for stream in (worker.stdin, worker.stdout):
                if stream is not None:
                    stream.close()
    return round(processes * count / seconds, 1)


def _thread_throughput(url: str, threads: int, count: int) -> float:
    """Claims per second from ``threads`` threads of this process, each claiming ``count`` times."""
    logs = [EffectLog(new_run_id(), url) for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def work(log: EffectLog) -> None:
        try:
            start.wait()
            for i in range(count):
                log.claim(effect_id=f"e{i}", action_id="a", operation=_OP, impact_scope=())
        except BaseException as e:  # reported by the measuring thread
            failures.append(e)

    try:
        for log in logs:  # each run exists, and its lease is held, before the clock starts
            log.claim(effect_id="warm", action_id="a", operation=_OP, impact_scope=())
        workers = [threading.Thread(target=work, args=(log,)) for log in logs]
        for worker in workers:
            worker.start()
        start.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - started
    finally:
        for log in logs:
            log.close()
    if failures:
        raise EffectPersistenceError(f"a benchmark thread failed: {failures[0]}") from failures[0]
    return round(threads * count / seconds, 1)


def run(url: str, *, quick: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Measure on the server of ``url`` in a scratch schema, drop it, return the report.

    The server's own errors (met by the raw measurements) are raised as
    :class:`EffectPersistenceError`, as the library's are.
    """
    import psycopg  # noqa: PLC0415 - the optional driver, needed only here

    try:
        return _run(url, quick=quick, progress=progress)
    except psycopg.Error as e:
        raise EffectPersistenceError(f"cannot benchmark {describe(url)}: {e}") from e


def _run(url: str, *, quick: bool, progress: Progress | None) -> dict[str, Any]:
    say = progress or (lambda _: None)
    count = 50 if quick else 500
    per_process = 20 if quick else 200
    schema = f"ledger_bench_{secrets.token_hex(6)}"
    started = time.perf_counter()
    with _connect(url) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.commit()
    scoped = _scoped(url, schema)
    try:
        say("raw psycopg INSERT + COMMIT")
        raw = _summary(_raw(scoped, count))
        say("ledger claims")
        claims = _summary(_claims(scoped, count))
        rates = {}
        for processes in (1, 4, 16):
            say(f"claims/s with {processes} processes")
            rates[str(processes)] = _throughput(scoped, processes, per_process)
        threaded = {}
        for threads in (1, 8):
            say(f"claims/s with {threads} threads of one process, a log each")
            threaded[str(threads)] = _thread_throughput(scoped, threads, per_process)
    finally:
        with _connect(url) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.commit()
    return {
        "store": describe(url),
        "quick": quick,
        "raw_insert_commit": raw,
        "claim": claims,
        "claim_vs_raw": round(claims["median_ms"] / raw["median_ms"], 2),
        "claims_per_second": rates,
        "claims_per_second_threads": threaded,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(report: dict[str, Any], echo: Callable[[str], None]) -> None:
    """The report for people."""
    raw, claim = report["raw_insert_commit"], report["claim"]
    echo(f"store: {report['store']}")
    echo(f"raw INSERT + COMMIT: median {raw['median_ms']} ms, p99 {raw['p99_ms']} ms")
    echo(
        f"ledger claim:        median {claim['median_ms']} ms, p99 {claim['p99_ms']} ms "
        f"({report['claim_vs_raw']}x the raw commit)"
    )
    for processes, rate in report["claims_per_second"].items():
        echo(f"claims/s, {processes:>2} processes: {rate}")
    for threads, rate in report["claims_per_second_threads"].items():
        echo(f"claims/s, {threads:>2} threads:   {rate}")
