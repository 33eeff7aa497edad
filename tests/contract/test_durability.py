"""Durability: what a claim promises survives fsync, SIGKILL, torn WAL tails and corrupt files.

Every scenario uses real files and real child processes; nothing under test is mocked.
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
from tests.builders import PYTHON, fs_ref, missing, op, require_tool, subprocess_env

DB = "ledger.sqlite3"
CHILD_TIMEOUT = 60

# Imports and builders every child script starts with; arguments arrive in sys.argv.
PRELUDE = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, EffectPersistenceError

    OP = fx.OperationRef("write_file", "test/1", "0" * 64)
    REF = fx.ResourceRef("fs", "/sandbox/a.txt", "target")

    def claim(log, effect_id):
        return log.claim(effect_id=effect_id, action_id="a-" + effect_id, operation=OP,
                         impact_scope=[REF])
    """
)


def run_child(script: str, *args: object, signal_exit: int | None = None) -> str:
    """Run ``script`` in a child Python; return its stdout, failing with its stderr."""
    result = subprocess.run(
        [PYTHON, "-c", PRELUDE + textwrap.dedent(script), *map(str, args)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    expected = 0 if signal_exit is None else -signal_exit
    assert result.returncode == expected, result.stderr
    return result.stdout


def claim(log: EffectLog, effect_id: str) -> fx.EffectClaim:
    """Claim a small write effect in ``log``."""
    return log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=op(),
        impact_scope=[fs_ref("/sandbox/a.txt")],
    )


def effect_ids(history: fx.History) -> list[str]:
    """The claimed effect ids of ``history``, in seq order."""
    return [c.effect_id for c in history.claims]


def assert_gap_free(history: fx.History) -> None:
    """The history's records carry seq 1, 2, 3, … with no gap or repeat."""
    assert [r.seq for r in history.records()] == list(range(1, len(history.records()) + 1))


def tree(path: Path) -> list[str]:
    """Every entry under ``path``, relative, sorted."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


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
            PRELUDE + textwrap.dedent(STRACE_CHILD),
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

KILLED_LOOP_CHILD = """
log = EffectLog(sys.argv[2], Path(sys.argv[1]))
for i in range(100_000):
    claim(log, f"e{i}")
    print(f"claim e{i}", flush=True)
    if i % 2 == 0:
        log.outcome(effect_id=f"e{i}", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
        print(f"outcome e{i}", flush=True)
"""


def test_acknowledged_claims_survive_sigkill(store_dir: Path, run_id: str) -> None:
    """Every record acknowledged before a SIGKILL loads after it (at most one more), gap-free."""
    child = subprocess.Popen(
        [PYTHON, "-c", PRELUDE + textwrap.dedent(KILLED_LOOP_CHILD), str(store_dir), run_id],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed: list[str] = []
    try:
        assert child.stdout is not None
        while len(printed) < 40:
            line = child.stdout.readline()
            assert line, "the child stopped before it was killed"
            printed.append(line)
        child.send_signal(signal.SIGKILL)
        rest, errors = child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, errors
    # Lines still in the pipe were printed after their call returned: acknowledged too.
    acknowledged = [line.split() for line in [*printed, *rest.splitlines()]]
    acked_claims = [effect for kind, effect in acknowledged if kind == "claim"]
    acked_outcomes = [effect for kind, effect in acknowledged if kind == "outcome"]

    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
        claimed = effect_ids(history)
        assert claimed[: len(acked_claims)] == acked_claims
        assert len(claimed) <= len(acked_claims) + 1
        assert claimed == [f"e{i}" for i in range(len(claimed))]
        with_outcome = [o.effect_id for o in history.outcomes]
        assert with_outcome[: len(acked_outcomes)] == acked_outcomes
        assert len(history.records()) <= len(acknowledged) + 1
        assert_gap_free(history)

        recovered = loaded.recover_interrupted()
        assert [o.effect_id for o in recovered] == [e for e in claimed if e not in with_outcome]
        assert [o.seq for o in recovered] == list(
            range(len(history.records()) + 1, len(history.records()) + len(recovered) + 1)
        )
        assert all(o.execution is fx.ExecutionOutcome.INTERRUPTED for o in recovered)
    with EffectLog.load(run_id, store_dir) as again:
        assert again.recover_interrupted() == ()
        assert_gap_free(again.history())
        for effect in claimed:
            assert again.assess(effect).execution is not None


def test_recover_after_sigkill_marks_only_claims_without_outcome(
    store_dir: Path, run_id: str
) -> None:
    """After a SIGKILL, recovery marks every loaded claim without an outcome, and only those."""
    out = run_child(
        """
        log = EffectLog(sys.argv[2], Path(sys.argv[1]))
        for i in range(6):
            claim(log, f"e{i}")
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                    impact=fx.Impact.CERTAIN)
        log.outcome(effect_id="e3", execution=fx.ExecutionOutcome.RUNNING,
                    impact=fx.Impact.POSSIBLE)
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        store_dir,
        run_id,
        signal_exit=signal.SIGKILL,
    )
    assert out == "ready\n"
    with EffectLog.load(run_id, store_dir) as loaded:
        recovered = loaded.recover_interrupted()
        assert [o.effect_id for o in recovered] == ["e0", "e2", "e4", "e5"]
        assert [o.seq for o in recovered] == [9, 10, 11, 12]
        for o in recovered:
            assert (o.execution, o.impact, o.replayed) == (
                fx.ExecutionOutcome.INTERRUPTED,
                fx.Impact.POSSIBLE,
                True,
            )
        assert loaded.recover_interrupted() == ()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.recover_interrupted() == ()
        assert_gap_free(again.history())
        assert again.assess("e3").verdict is fx.EffectVerdict.PENDING


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
con.execute("DROP TRIGGER claims_guard_chain")  # rolled back with the rest
con.execute("DROP TRIGGER claims_guard_hash")  # same
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
        claim(log, "e1")
        claim(log, "e2")
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
        claim(loaded, "e3")  # the store is writable again: the dead writer's lock is gone
    with EffectLog.load(run_id, store_dir) as again:
        assert effect_ids(again.history()) == ["e1", "e2", "e3"]
        assert_gap_free(again.history())


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
    assert_gap_free(history)


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
        assert_gap_free(loaded.history())


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
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        for i in range(40):
            log.claim(
                effect_id=f"e{i}",
                action_id="a" * 150,
                operation=op(),
                impact_scope=[fs_ref(f"/sandbox/{i}-{j}.txt") for j in range(4)],
            )
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
        claim(log, "e1")
    assert log.history() == fx.History((), (), ())
    assert (bad / DB).read_bytes() == before, "a corrupt store is never rewritten"


# --------------------------------------------------------------------------- missing stores


def test_missing_store_loads_empty_and_creates_nothing(tmp_path: Path, run_id: str) -> None:
    """Loading from a store that does not exist is empty and creates no directory at all."""
    store = tmp_path / "parent" / "store"
    with EffectLog.load(run_id, store) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert tree(tmp_path) == []


def test_store_directory_without_database_loads_empty_and_creates_nothing(
    store_dir: Path, run_id: str
) -> None:
    """An empty store directory loads as empty and gets no database file."""
    store_dir.mkdir(mode=0o700)
    with EffectLog.load(run_id, store_dir) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert tree(store_dir) == []


def test_run_without_rows_loads_empty_and_writes_nothing(good_store: tuple[Path, str]) -> None:
    """A run the store has never seen loads as empty and leaves the store's rows unchanged."""
    store, _ = good_store
    other = new_run_id()

    def runs() -> list[tuple[str]]:
        with sqlite3.connect(f"file:{store / DB}?mode=ro", uri=True) as con:
            rows = con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
        con.close()
        return rows

    before = runs()
    with EffectLog.load(other, store) as loaded:
        assert loaded.history() == fx.History((), (), ())
    assert runs() == before
    assert (other,) not in before


def test_loaded_empty_run_starts_at_seq_one(store_dir: Path, run_id: str) -> None:
    """A run loaded as empty from a missing store can be continued, starting at seq 1."""
    with EffectLog.load(run_id, store_dir) as loaded:
        assert claim(loaded, "e1").seq == 1
    with EffectLog.load(run_id, store_dir) as again:
        assert effect_ids(again.history()) == ["e1"]
