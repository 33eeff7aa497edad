"""Durability on the SQLite backend: fsync, uncommitted and torn WAL frames, corrupt files.

Every scenario uses real files and real child processes; nothing under test is mocked.
What a claim promises across a SIGKILL on any backend is in
``tests/contract/test_durability.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from tests.builders import (
    CHILD_LOG_PRELUDE,
    CHILD_TIMEOUT,
    PYTHON,
    claim_small,
    effect_ids,
    gap_free,
    listing,
    missing,
    require_tool,
    run_child,
    run_of_forty_claims,
    subprocess_env,
)

DB = "ledger.sqlite3"

# --------------------------------------------------------------------------- fsync in claim

STRACE_CHILD = """
store = Path(sys.argv[1])
marker = os.open(os.devnull, os.O_WRONLY)
with EffectLog(sys.argv[2], store) as log:
    os.write(marker, b"FIRST-START")
    claim(log, "e1")
    os.write(marker, b"FIRST-END")
    os.write(marker, b"CLAIM-START")
    claim(log, "e2")
    os.write(marker, b"CLAIM-END")
"""

SYNC = re.compile(r"\b(?:fsync|fdatasync)\(\d+<(?P<path>[^>]*)>\)\s+=\s+0")


@pytest.fixture(scope="module")
def claim_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The strace of a child that creates a store with one claim, then claims again."""
    strace = require_tool("strace")
    base = tmp_path_factory.mktemp("strace")
    trace = base / "trace.txt"
    store = base / "store"
    result = subprocess.run(
        [
            strace,
            "-f",
            "-y",
            "-e",
            "trace=fsync,fdatasync,write,openat",
            "-o",
            str(trace),
            PYTHON,
            "-c",
            CHILD_LOG_PRELUDE + textwrap.dedent(STRACE_CHILD),
            str(store),
            new_run_id(),
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if result.returncode != 0 and "ptrace" in result.stderr:
        missing(f"strace cannot trace here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    return trace.read_text().splitlines(), Path(os.path.realpath(store))


def between(lines: list[str], start: bytes, end: bytes) -> list[str]:
    """The trace lines strictly between the write of marker ``start`` and that of ``end``."""

    def index(marker: bytes) -> int:
        needle = f'"{marker.decode()}"'
        hits = [i for i, line in enumerate(lines) if "write(" in line and needle in line]
        assert len(hits) == 1, f"marker {marker!r} written {len(hits)} times"
        return hits[0]

    first, last = index(start), index(end)
    assert first < last
    return lines[first + 1 : last]


def synced_paths(lines: list[str]) -> list[str]:
    """The paths of every successful fsync/fdatasync in ``lines``, in order."""
    return [m["path"] for line in lines if (m := SYNC.search(line))]


def test_claim_fsyncs_the_wal_before_returning(claim_trace: tuple[list[str], Path]) -> None:
    """A claim on an existing store fsyncs the database's WAL before `claim` returns."""
    lines, store = claim_trace
    synced = synced_paths(between(lines, b"CLAIM-START", b"CLAIM-END"))
    assert str(store / f"{DB}-wal") in synced, synced


def test_first_claim_fsyncs_the_wal_and_the_store_directory(
    claim_trace: tuple[list[str], Path],
) -> None:
    """The store-creating claim fsyncs its WAL, and fsyncs the directory after creating the file."""
    lines, store = claim_trace
    window = between(lines, b"FIRST-START", b"FIRST-END")
    assert str(store / f"{DB}-wal") in synced_paths(window)
    created = [
        i
        for i, line in enumerate(window)
        if "openat(" in line and "O_EXCL" in line and f'/{DB}"' in line and "= -1" not in line
    ]
    assert len(created) == 1, "the library itself creates the database file, exactly once"
    assert "0600" in window[created[0]]
    # The library's own directory fsync: before SQLite opens any store file (SQLite's
    # later directory syncs, for its journals, do not count).
    after = window[created[0] + 1 :]
    sqlite_opens = [i for i, line in enumerate(after) if "openat(" in line and f"/{DB}" in line]
    assert sqlite_opens, "SQLite opened the database after the library created it"
    assert str(store) in synced_paths(after[: sqlite_opens[0]])


# --------------------------------------------------------------------------- SIGKILL


# --------------------------------------------------------------------------- torn transactions

UNCOMMITTED_CHILD = """
import sqlite3
db, run_id = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db, isolation_level=None)
con.row_factory = sqlite3.Row
assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
# A one-page cache spills the transaction's pages into the WAL before any commit.
con.execute("PRAGMA cache_size = 1")
con.execute("BEGIN IMMEDIATE")
con.execute("DROP TRIGGER claims_guard")  # rolled back with the rest
# Forged rows copy the last committed claim, so they pass every constraint and guard
# whatever columns the schema has; only seq and the identifiers change.
row = dict(con.execute(
    "SELECT * FROM claims WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
).fetchone())
insert = "INSERT INTO claims ({}) VALUES ({})".format(", ".join(row), ", ".join("?" * len(row)))
for i in range(200):
    row.update(seq=row["seq"] + 1, effect_id=f"forged{i}", action_id="x" * 190)
    con.execute(insert, list(row.values()))
(page_size,) = con.execute("PRAGMA page_size").fetchone()
wal_size = os.stat(db + "-wal").st_size
print(json.dumps({"wal_size": wal_size, "frames": (wal_size - 32) // (24 + page_size)}))
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_uncommitted_transaction_is_absent_after_sigkill(store_dir: Path, run_id: str) -> None:
    """Rows of a transaction killed before COMMIT are absent on load, even when they hit the WAL."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        claim_small(log, "e2")
        committed = log.history()
    wal = store_dir / f"{DB}-wal"
    assert not wal.exists(), "the last connection checkpointed and removed the WAL"

    out = run_child(
        UNCOMMITTED_CHILD,
        store_dir / DB,
        run_id,
        signal_exit=signal.SIGKILL,
    )
    spilled = json.loads(out)
    assert spilled["frames"] > 10, "the uncommitted pages were spilled into the WAL"
    assert wal.stat().st_size == spilled["wal_size"]

    with EffectLog.load(run_id, store_dir) as loaded:
        assert loaded.history() == committed
        claim_small(loaded, "e3")  # the store is writable again: the dead writer's lock is gone
    with EffectLog.load(run_id, store_dir) as again:
        assert effect_ids(again.history()) == ["e1", "e2", "e3"]
        assert gap_free(again.history())


TORN_WAL_CHILD = """
log = EffectLog(sys.argv[2], Path(sys.argv[1]))
wal = log.path.with_name(log.path.name + "-wal")
sizes = []
for i in range(1, 6):
    claim(log, f"e{i}")
    sizes.append(os.stat(wal).st_size)
print(json.dumps(sizes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close: the WAL is never checkpointed
"""


@pytest.fixture(scope="module")
def crashed_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[int]]:
    """A store whose writer died after five claims, with every commit still in the WAL.

    Returns the store, the run id, and the WAL's size after each claim.
    """
    store = tmp_path_factory.mktemp("crashed") / "store"
    run_id = new_run_id()
    sizes = json.loads(run_child(TORN_WAL_CHILD, store, run_id, signal_exit=signal.SIGKILL))
    assert sizes == sorted(set(sizes)), "every claim appended frames to the WAL"
    return store, run_id, sizes


def wal_frame_size(wal: bytes) -> int:
    """The size of one WAL frame: a 24-byte header and one page (page size at bytes 8-12)."""
    return 24 + int.from_bytes(wal[8:12], "big")


def _truncate_mid_frame(wal: bytearray, start: int, end: int) -> bytearray:
    return wal[: start + (end - start) // 2 + 7]


def _flip_commit_checksum(wal: bytearray, start: int, end: int) -> bytearray:
    frame = end - wal_frame_size(wal)  # the commit frame is the transaction's last
    wal[frame + 16 : frame + 24] = bytes(b ^ 0xFF for b in wal[frame + 16 : frame + 24])
    return wal


def _flip_payload_bit(wal: bytearray, start: int, end: int) -> bytearray:
    wal[start + 24 + 1000] ^= 0x01  # inside the transaction's first page image
    return wal


@pytest.mark.parametrize(
    "tear",
    [_truncate_mid_frame, _flip_commit_checksum, _flip_payload_bit],
    ids=lambda f: f.__name__.lstrip("_"),
)
def test_torn_wal_tail_loads_the_committed_prefix(
    crashed_store: tuple[Path, str, list[int]],
    tmp_path: Path,
    tear: Callable[[bytearray, int, int], bytearray],
) -> None:
    """A torn last commit in the WAL is absent: load returns exactly the claims committed before it."""
    store, run_id, sizes = crashed_store
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)  # -shm too: its stale index must not be believed
    wal = copy / f"{DB}-wal"
    data = bytearray(wal.read_bytes())
    assert len(data) == sizes[-1]
    wal.write_bytes(bytes(tear(data, sizes[-2], sizes[-1])))

    with EffectLog.load(run_id, copy) as loaded:
        history = loaded.history()
    assert effect_ids(history) == ["e1", "e2", "e3", "e4"]
    assert history.outcomes == history.observations == ()
    assert gap_free(history)


def test_garbled_earlier_commit_drops_it_and_every_later_one(
    crashed_store: tuple[Path, str, list[int]], tmp_path: Path
) -> None:
    """A garbled commit frame inside the WAL ends the log there: load returns the shorter prefix."""
    # SQLite's behaviour, noted in STORAGE.md (Pitfalls): every later commit is silently
    # dropped; the loaded prefix is shorter, but it never holds an invented record.
    store, run_id, sizes = crashed_store
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    wal = copy / f"{DB}-wal"
    wal.write_bytes(bytes(_flip_commit_checksum(bytearray(wal.read_bytes()), 0, sizes[2])))

    with EffectLog.load(run_id, copy) as loaded:
        assert effect_ids(loaded.history()) == ["e1", "e2"]
        assert gap_free(loaded.history())


def test_intact_crashed_wal_loads_every_commit(
    crashed_store: tuple[Path, str, list[int]], tmp_path: Path
) -> None:
    """Control: the untouched copy of the crashed store loads all five committed claims."""
    store, run_id, _ = crashed_store
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    with EffectLog.load(run_id, copy) as loaded:
        assert effect_ids(loaded.history()) == ["e1", "e2", "e3", "e4", "e5"]


# --------------------------------------------------------------------------- corrupt files


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A checkpointed store (no WAL) with 40 claims of one run, and that run's id."""
    store = tmp_path_factory.mktemp("good") / "store"
    run_id = run_of_forty_claims(store)
    assert sorted(os.listdir(store)) == ["ledger.lock", DB]
    return store, run_id


def _page_size(db: bytes) -> int:
    size = int.from_bytes(db[16:18], "big")
    return 65536 if size == 1 else size


def _garbage(length: int) -> bytes:
    # 0xde is no b-tree page type, so no garbage page can pass for a valid one.
    return (b"\xde\xad\xbe\xef" * (length // 4 + 1))[:length]


def _random_bytes(good: bytes, _root: int) -> bytes:
    return os.urandom(16384)


def _text_file(good: bytes, _root: int) -> bytes:
    return b"this is a text file, not a database\n" * 100


def _header_overwritten(good: bytes, _root: int) -> bytes:
    return _garbage(100) + good[100:]


def _pages_overwritten(good: bytes, _root: int) -> bytes:
    page = _page_size(good)
    return good[:page] + _garbage(len(good) - page)


def _claims_root_overwritten(good: bytes, root: int) -> bytes:
    # Only the claims table's root page: the store opens, reading the run fails.
    page = _page_size(good)
    start = (root - 1) * page
    return good[:start] + _garbage(page) + good[start + page :]


@pytest.mark.parametrize(
    "corrupt",
    [
        _random_bytes,
        _text_file,
        _header_overwritten,
        _pages_overwritten,
        _claims_root_overwritten,
    ],
    ids=lambda f: f.__name__.lstrip("_"),
)
def test_corrupt_database_is_refused_at_load_and_claim(
    good_store: tuple[Path, str],
    tmp_path: Path,
    corrupt: Callable[[bytes, int], bytes],
) -> None:
    """A corrupt or non-database file makes load and claim raise EffectPersistenceError only."""
    store, run_id = good_store
    good = (store / DB).read_bytes()
    with sqlite3.connect(f"file:{store / DB}?mode=ro", uri=True) as con:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'claims'").fetchone()
    con.close()
    bad = tmp_path / "store"
    bad.mkdir(mode=0o700)
    fd = os.open(bad / DB, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, corrupt(good, root))
    os.close(fd)
    before = (bad / DB).read_bytes()

    # pytest.raises(EffectPersistenceError) would also fail on a raw sqlite3/SQLAlchemy error.
    with pytest.raises(EffectPersistenceError):
        EffectLog.load(run_id, bad)
    with EffectLog(new_run_id(), bad) as log, pytest.raises(EffectPersistenceError):
        claim_small(log, "e1")
    assert log.history() == fx.History((), (), ())
    assert (bad / DB).read_bytes() == before, "a corrupt store is never rewritten"


# --------------------------------------------------------------------------- missing stores


def test_store_directory_without_database_loads_empty_and_creates_nothing(
    store_dir: Path, run_id: str
) -> None:
    """An empty store directory loads as empty and gets no database file."""
    store_dir.mkdir(mode=0o700)
    with EffectLog.load(run_id, store_dir) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert listing(store_dir) == []
