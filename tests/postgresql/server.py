"""A private PostgreSQL server for the test session, and a fresh database per test.

The first test of a process that needs PostgreSQL starts a server of its own: ``initdb``
into a temporary directory, ``fsync`` on, listening on a Unix socket in that directory
only (``listen_addresses=''``: nothing on the network can reach it); it is stopped when
the process exits. Under pytest-xdist every worker has its own. Each store a test asks
for is a new database of that server, so tests never see each other's rows.

The server binaries are found on ``PATH``, in ``pg_config --bindir`` or in Debian's
``/usr/lib/postgresql/*/bin``; when they are
missing the test fails saying what to install (``make tools`` installs them), never
skips. PostgreSQL refuses to run as root, so as root the server runs as the ``postgres``
user (or ``nobody``), which owns the data directory.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.builders import missing

SUPERUSER = "ledger_test"
PACKAGE = "postgresql-15 (Debian: apt-get install postgresql-15, or postgresql)"


def _candidates() -> Iterator[Path]:
    found = shutil.which("pg_ctl")
    if found is not None:
        yield Path(found).parent
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        yield Path(out.stdout.strip())
    # Debian's package keeps them off PATH, under its major version: the newest first.
    yield from sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parts)[::-1]


def bindir() -> Path:
    """The directory of the server binaries, or the test fails saying what to install."""
    found = next(
        (d for d in _candidates() if (d / "pg_ctl").is_file() and (d / "initdb").is_file()), None
    )
    if found is None:
        missing(f"the PostgreSQL server (initdb, pg_ctl) is not installed: install {PACKAGE}")
    return found


def _runner() -> tuple[list[str], int | None, int | None]:
    """How to run the server's programs: as this user, or as root as an unprivileged one."""
    if os.geteuid() != 0:
        return [], None, None
    users = []
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            users.append(pwd.getpwnam(name))
    setpriv = shutil.which("setpriv")
    if not users or setpriv is None:
        missing(
            "as root, the PostgreSQL server runs as the user postgres or nobody with setpriv "
            "(package util-linux): one of them is missing"
        )
    entry = users[0]
    return (
        [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"],
        entry.pw_uid,
        entry.pw_gid,
    )


class Server:
    """One running server: its socket directory, and the databases made on it."""

    def __init__(self) -> None:
        bins = bindir()
        prefix, uid, gid = _runner()
        self.root = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self._pg_ctl = [*prefix, str(bins / "pg_ctl"), "-D", str(self.data)]
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        if uid is not None and gid is not None:
            # The server's user owns its directory (0700); root, running the tests, can
            # still reach the socket inside it.
            os.chown(self.root, uid, gid)
        self.root.chmod(0o700)
        subprocess.run(
            [
                *prefix,
                str(bins / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "TZ": "UTC"},
        )
        # In the configuration file, not on the command line: a restart keeps them.
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "fsync": "on",
            "synchronous_commit": "on",
            "max_connections": "300",
            "shared_buffers": "'32MB'",
            # Which rows one transaction committed, savepoints and all: the commit time of
            # a row's xmin (tests/postgresql/test_group_commit.py).
            "track_commit_timestamp": "on",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self.running = False
        self.start()

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """The URL of ``database`` on this server, as a worker would name its store."""
        return f"postgresql://{user}@/{database}?host={self.socket_dir}"

    def connect(self, database: str = "postgres", **kwargs: object) -> psycopg.Connection:
        """A plain psycopg connection to ``database``, outside the library."""
        return psycopg.connect(host=str(self.socket_dir), dbname=database, user=SUPERUSER, **kwargs)

    def new_database(self) -> str:
        """The URL of a new, empty database of its own."""
        with self._lock:
            name = f"ledger_{os.getpid()}_{next(self._names)}"
        with self.connect(autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as if killed, with recovery at the next start)."""
        if self.running:
            subprocess.run(
                [*self._pg_ctl, "-w", "-m", mode, "stop"], check=True, capture_output=True
            )
            self.running = False

    def kill(self) -> None:
        """SIGKILL the server and every process of it, as a power cut would stop it."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in (postmaster, *map(int, children)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in (postmaster, *map(int, children)):
            deadline = time.monotonic() + 30
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.01)
        self.running = False

    def start(self) -> None:
        """Start the stopped server again, on the same data and socket."""
        if not self.running:
            # A start after a crash replays the WAL first: allow it time on a loaded machine.
            subprocess.run(
                [*self._pg_ctl, "-w", "-t", "300", "-l", str(self.root / "server.log"), "start"],
                check=True,
                capture_output=True,
            )
            self.running = True

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The server is down while the block runs, then up again."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def remove(self) -> None:
        """Stop the server and remove its directory."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


_server: Server | None = None
_started_in = 0
_lock = threading.Lock()


def server() -> Server:
    """This process's server, started on first use and stopped when the process exits."""
    global _server, _started_in  # noqa: PLW0603 - one server per test process
    with _lock:
        if _server is None or _started_in != os.getpid():
            _server = Server()
            _started_in = os.getpid()
            atexit.register(_server.remove)
        return _server
