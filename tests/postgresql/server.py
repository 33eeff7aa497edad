"""A private PostgreSQL server for the test session, and a fresh database per test.

The first test of a process that needs PostgreSQL starts a server of its own: ``initdb``
into a temporary directory (in memory, under ``/dev/shm``, where that has room: see
:func:`_parent`), ``fsync`` on, listening on a Unix socket in that directory
only (``listen_addresses=''``: nothing on the network can reach it); it is stopped when
the process exits. Under pytest-xdist every worker has its own. Each store a test asks
for is a new database of that server, so tests never see each other's rows.

The server binaries are found on ``PATH``, in ``pg_config --bindir`` or in Debian's
``/usr/lib/postgresql/*/bin``; when they are
missing the test fails saying what to install (``make tools`` installs them), never
skips. PostgreSQL refuses to run as root, so as root the server runs as the ``postgres``
user (or ``nobody``), which owns the data directory.

A run that ends without its exit handlers (SIGKILL, SIGTERM from a timeout, a crashed
xdist controller) must not leave its servers running: each server has a watchdog, a
process of its own session, that stops it (``pg_ctl stop -m immediate``) and removes its
directory once the test process that started it, or that process's xdist controller, is
gone. Each server is also entered in a registry (``REGISTRY``) with those owners, and
the next server started reaps every entry whose owners are gone, should a watchdog
itself have been killed.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.builders import missing

SUPERUSER = "ledger_test"
PACKAGE = "postgresql-15 (Debian: apt-get install postgresql-15, or postgresql)"

# Where each running server is entered, one JSON file per server: a fixed place, so that
# the next run finds what a killed one left. Per user, as the servers' owners are.
REGISTRY = Path(tempfile.gettempdir()) / f"ledger-pg-servers-{os.geteuid()}"

# The watchdog (``watch ENTRY``) and the reaper (``reap REGISTRY``): standard library
# only, run with ``python -I`` so that nothing of the killed run is imported. An owner is
# a pid and its start time (field 22 of /proc/PID/stat), so a pid reused by another
# process does not count as the owner still running.
WATCHDOG = r"""
import json, os, shutil, subprocess, sys, time

def started(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[19])

def owned(entry):
    return all(started(pid) == start for pid, start in entry["owners"])

def reap(path, entry):
    # Immediate: nothing of a dead run's databases is worth a checkpoint.
    subprocess.run([*entry["pg_ctl"], "-w", "-t", "120", "-m", "immediate", "stop"],
                   stdin=subprocess.DEVNULL, capture_output=True, check=False)
    shutil.rmtree(entry["root"], ignore_errors=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

if sys.argv[1] == "watch":
    path = sys.argv[2]
    entry = load(path)
    # The server removed as usual takes its directory (and its entry) with it.
    while entry is not None and os.path.isdir(entry["root"]) and owned(entry):
        time.sleep(0.5)
    if entry is not None and os.path.isdir(entry["root"]):
        reap(path, entry)
elif sys.argv[1] == "reap":
    for name in sorted(os.listdir(sys.argv[2])):
        path = os.path.join(sys.argv[2], name)
        entry = load(path) if name.endswith(".json") else None
        if entry is not None and not owned(entry):
            reap(path, entry)
"""


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


def _started(pid: int) -> int:
    """The start time of process ``pid`` (clock ticks since boot): with the pid, one process."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return int(fields[19])


def _owners() -> list[tuple[int, int]]:
    """The processes whose end ends this process's servers: itself, and its xdist controller.

    A worker whose controller was killed may linger a while; its servers go with the run.
    """
    pids = [os.getpid()]
    if "PYTEST_XDIST_WORKER" in os.environ:
        pids.append(os.getppid())
    return [(pid, _started(pid)) for pid in pids]


def _registry() -> Path:
    """The registry directory, 0700 and this user's: entries name commands root runs."""
    REGISTRY.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(REGISTRY)
    if not REGISTRY.is_dir() or REGISTRY.is_symlink() or st.st_uid != os.geteuid():
        raise RuntimeError(f"{REGISTRY} is not a directory of this user's; remove it")
    return REGISTRY


def reap_stale() -> None:
    """Stop and remove every registered server whose owners are gone (a killed run's)."""
    subprocess.run(
        [sys.executable, "-I", "-c", WATCHDOG, "reap", str(_registry())],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
    )


# What a server may hold at once in memory: its WAL (max_wal_size, 1 GiB) and the
# databases a long property test makes before its test ends and they are dropped.
_ROOM = 8 << 30


def _parent() -> str | None:
    """Where the servers' directories go: ``/dev/shm`` when it has room, else the temp dir.

    The ledger's PostgreSQL store refuses a server with ``fsync`` off, so the servers
    fsync every commit, and the tests make hundreds of databases: on a disk, those
    flushes took a fifth of the time of the tests that use PostgreSQL. On a file system
    in memory they cost nothing, and nothing the tests do depends on them: a server
    stopped with ``-m immediate`` loses what a killed process loses, and no test cuts
    the power under PostgreSQL (``tests/power`` does that to SQLite stores).
    """
    shm = Path("/dev/shm")
    try:
        free = os.statvfs(shm)
    except OSError:
        return None
    if not os.access(shm, os.W_OK | os.X_OK) or free.f_bavail * free.f_frsize < _ROOM:
        return None
    return str(shm)


class Server:
    """One running server: its socket directory, and the databases made on it."""

    def __init__(self) -> None:
        bins = bindir()
        prefix, uid, gid = _runner()
        reap_stale()
        self.root = Path(tempfile.mkdtemp(prefix="ledger-pg-", dir=_parent()))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self._pg_ctl = [*prefix, str(bins / "pg_ctl"), "-D", str(self.data)]
        self._names = itertools.count(1)
        self._made: list[str] = []  # databases not dropped yet (see drop_databases)
        self._lock = threading.Lock()
        # Watched from before initdb: a run killed while the server starts leaves nothing.
        self.entry = _registry() / f"{self.root.name}.json"
        self.entry.write_text(
            json.dumps({"root": str(self.root), "pg_ctl": self._pg_ctl, "owners": _owners()})
        )
        self.watchdog = subprocess.Popen(
            [sys.executable, "-I", "-c", WATCHDOG, "watch", str(self.entry)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of reach of the run's Ctrl-C
        )
        self.running = False
        try:
            self._initdb(bins, prefix, uid, gid)
        except BaseException:
            self.remove()
            raise

    def _initdb(self, bins: Path, prefix: list[str], uid: int | None, gid: int | None) -> None:
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
            self._made.append(name)
        with self.connect(autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def drop_databases(self) -> list[str]:
        """Drop the databases made since the last call; returns those still in use, kept.

        Each database costs about 7 MiB of the temporary directory, and a session makes
        hundreds: kept to its end, they take gigabytes of the disk that other tests, and
        other users' programs, write to. A database a connection still uses (a log a test left
        open) is kept for the next call rather than forced: closing that log later must
        not fail.
        """
        with self._lock:
            names, self._made = self._made, []
        kept = list(names)
        # A server its test left stopped or broken keeps them: that test fails for it.
        with contextlib.suppress(psycopg.OperationalError):
            if names and self.running:
                with self.connect(autocommit=True) as conn:
                    # Not one in use: DROP would wait 5 s for its sessions before failing.
                    used = conn.execute(
                        "SELECT DISTINCT datname FROM pg_stat_activity WHERE datname = ANY(%s)",
                        (names,),
                    ).fetchall()
                    for name in set(names) - {row[0] for row in used}:
                        with contextlib.suppress(psycopg.errors.ObjectInUse):
                            conn.execute(f"DROP DATABASE IF EXISTS {name}")
                            kept.remove(name)
        with self._lock:
            self._made[:0] = kept
        return kept

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
        """Stop the server and remove its directory; its watchdog then ends."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self.entry.unlink(missing_ok=True)
        try:
            self.watchdog.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()
            self.watchdog.wait()


_server: Server | None = None
_started_in = 0
_lock = threading.Lock()


def drop_test_databases() -> None:
    """Drop the databases this process's server made for the test that just ended."""
    with _lock:
        found = _server if _started_in == os.getpid() else None
    if found is not None:
        found.drop_databases()


def server() -> Server:
    """This process's server, started on first use and stopped when the process exits."""
    global _server, _started_in  # noqa: PLW0603 - one server per test process
    with _lock:
        if _server is None or _started_in != os.getpid():
            _server = Server()
            _started_in = os.getpid()
            atexit.register(_server.remove)
        return _server
