"""Liveness without pids on PostgreSQL, and appends serialised by the server across processes."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ledger.effect_log import EffectLog
from ledger.storage import Mode
from tests.builders import CHILD_TIMEOUT, Child, gap_free, ledger, orphan_run, run_python
from tests.postgresql import driver


def test_recover_dead_recovers_exactly_the_runs_whose_holder_is_gone(
    url: str, spawn: type[Child]
) -> None:
    """A run whose worker was SIGKILLed is recovered; one a live worker holds is not, from any process."""
    dead, alive = orphan_run(url), orphan_run(url)
    killed = spawn("load", url, dead)
    living = spawn("load", url, alive)
    assert killed.answer == living.answer == {"claims": ["e1"]}
    killed.kill()  # its session ends with its socket: the server drops its locks
    done = ledger("recover", "--dead", "--json", "--store", url)
    assert done.returncode == 0, done.stderr
    recovered = {r["run_id"] for r in json.loads(done.stdout) if r["outcomes"]}
    assert dead in recovered
    assert alive not in recovered
    living.finish()
    with EffectLog.load(alive, url) as log:
        assert log.history().outcomes == ()


WRITER = """
import sys
from ledger.effect_log import EffectLog, EffectPersistenceError
from tests.builders import claim_bare
url, run_id, name = sys.argv[1:4]
written = 0
for i in range(10):
    try:
        with EffectLog.load(run_id, url) as log:
            claim_bare(log, f"{name}-{i}")
            written += 1
    except EffectPersistenceError:
        pass  # another writer extended the run after this one loaded it
print(written)
"""


WRITERS = 16


def test_many_writers_on_one_run_keep_its_seqs_gap_free_and_its_chain_linear(url: str) -> None:
    """Sixteen processes (as on as many hosts: own connections) appending to one run at once: every acknowledged claim is there, in one chain."""
    run_id = orphan_run(url)
    with ThreadPoolExecutor(WRITERS) as pool:
        done = list(pool.map(lambda n: run_python(WRITER, url, run_id, f"w{n}"), range(WRITERS)))
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr[-400:] for d in done]
    acknowledged = sum(int(d.stdout) for d in done)
    assert acknowledged > 0
    with EffectLog.load(run_id, url) as log:  # validates every row and the whole chain
        history = log.history()
    assert gap_free(history)
    assert len(history.claims) == 1 + acknowledged
    seqs = driver.POSTGRESQL.query(
        url, "SELECT seq FROM claims WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    assert [s for (s,) in seqs] == list(range(1, 2 + acknowledged))


class Relay:
    """A relay to the server that keeps a session open after its client has closed it.

    As when a network loses the client's goodbye (a host cut off as it closes): the
    server keeps the session, and every lock it has not been given back, until it
    notices. The relay forwards every message but the client's Terminate, and keeps the
    server's side of each connection open until :meth:`close`.
    """

    def __init__(self, url: str, directory: Path) -> None:
        parts = urlsplit(url)
        upstream = Path(parse_qs(parts.query)["host"][0])
        self._socket = upstream / _SOCKET
        directory.mkdir()
        self.url = urlunsplit(parts._replace(query=f"host={directory}"))
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(str(directory / _SOCKET))
        self._listener.listen()
        self._kept: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.socket(socket.AF_UNIX)
            server.connect(str(self._socket))
            self._kept.append(server)
            for pump in (self._to_server, self._to_client):
                thread = threading.Thread(target=pump, args=(client, server), daemon=True)
                self._threads.append(thread)
                thread.start()

    @staticmethod
    def _to_server(client: socket.socket, server: socket.socket) -> None:
        pending = b""
        started = False  # past the startup message, which alone has no type byte
        while data := client.recv(65536):
            pending += data
            while True:
                if not started:
                    if len(pending) < 8 or len(pending) < int.from_bytes(pending[:4], "big"):
                        break
                    size = int.from_bytes(pending[:4], "big")
                    started = int.from_bytes(pending[4:8], "big") not in _NEGOTIATIONS
                else:
                    if len(pending) < 5 or len(pending) < 1 + int.from_bytes(pending[1:5], "big"):
                        break
                    size = 1 + int.from_bytes(pending[1:5], "big")
                    if pending[:1] == b"X":
                        return  # the goodbye is lost; the session stays
                server.sendall(pending[:size])
                pending = pending[size:]

    @staticmethod
    def _to_client(client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                client.sendall(data)
        client.close()

    def close(self) -> None:
        """End every session the relay kept: now the server sees them gone."""
        # A close alone does not wake the thread blocked in accept(); a shutdown does.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for server in self._kept:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        for thread in self._threads:
            thread.join(CHILD_TIMEOUT)


_SOCKET = ".s.PGSQL.5432"
_NEGOTIATIONS = {80877103, 80877104}  # SSLRequest, GSSENCRequest: the startup message follows


def test_a_closed_log_gives_its_run_back_before_its_session_ends(url: str, tmp_path: Path) -> None:
    """A closed log's run is free at once, even while the server has not seen its session end."""
    run_id = orphan_run(url)
    relay = Relay(url, tmp_path / "relay")
    try:
        log = EffectLog.load(run_id, relay.url)
        holder = log._journal.store.holder._raw.driver_connection.info.backend_pid
        log.close()
        sessions = driver.POSTGRESQL.query(
            url, "SELECT pid FROM pg_stat_activity WHERE datname = ?", (driver.database(url),)
        )
        assert (holder,) in sessions  # the closed log's session lingers on the server
        other = driver.Elsewhere(url, run_id)
        try:
            assert other.could_hold(Mode.EXCLUSIVE)
        finally:
            other.close()
    finally:
        relay.close()
