"""File trust: what SQLite is given, by writers and readers, on real files and real processes."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.errors import StoreFileRefusedError
from ledger.sqlite import trust as _trust
from ledger.sqlite.reads import needs_copy
from tests.builders import LEDGER, PYTHON, fingerprint, ledger, require_tool, subprocess_env
from tests.sqlite.trust_helpers import (
    DB,
    SHM,
    WAL,
    as_other,
    assert_refused,
    build_store,
    other_uid,
    public_dir,
)

__all__ = ["public_dir"]  # a fixture, used by name

SQLITE3 = shutil.which("sqlite3")
needs_shell = pytest.mark.usefixtures("sqlite3_shell")


_OP = fx.OperationRef("write_file", "test/1", hashlib.sha256(b"{}").hexdigest())


def _claim(directory: Path, run_id: str) -> None:
    with EffectLog(run_id, directory) as log:
        log.claim(
            effect_id="another",
            action_id="b1",
            operation=_OP,
            impact_scope=(fx.ResourceRef("fs", "/sandbox/b.txt", "target"),),
        )


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    """A closed store written by a worker process, and its run id."""
    directory = tmp_path / "store"
    return directory, build_store(directory)


# --------------------------------------------------------------------------- modes


@pytest.mark.parametrize(
    ("name", "mode"),
    [(".", 0o777), (".", 0o720), (DB, 0o666), (DB, 0o620), (WAL, 0o646), (SHM, 0o662)],
)
@pytest.mark.program
def test_a_file_or_directory_writable_by_others_is_refused_by_readers_and_writers(
    store: tuple[Path, str], name: str, mode: int
) -> None:
    """A group- or other-writable directory, database, -wal or -shm is refused before SQLite opens it, by a read command and by a writer, naming the file and `chmod go-w`."""
    directory, run_id = store
    path = directory / name
    if not path.exists():
        path.touch(mode=0o600)
    path.chmod(mode)
    before = fingerprint(directory)
    line = assert_refused(ledger("status", "--store", str(directory)), "chmod go-w", str(path))
    assert "writable by group or others" in line
    with pytest.raises(EffectPersistenceError, match="chmod go-w"):
        _claim(directory, run_id)
    assert fingerprint(directory) == before


@pytest.mark.program
def test_new_store_files_get_owner_only_modes_whatever_the_umask(tmp_path: Path) -> None:
    """With umask 000 a new store is 0700; its database, -wal, -shm and lock file 0600 (SQLite copies the database's mode)."""
    directory = tmp_path / "store"
    code = (
        "import os, sys; os.umask(0); "
        "from ledger.effect_log import EffectLog, new_run_id; "
        "log = EffectLog(new_run_id(), sys.argv[1]); "
        "from ledger import effects as fx; import hashlib; "
        "log.claim(effect_id='e', action_id='a', operation=fx.OperationRef('w', 't/1', "
        "hashlib.sha256(b'').hexdigest()), impact_scope=()); "
        "print(sorted((n, oct(os.stat(os.path.join(sys.argv[1], n)).st_mode & 0o777)) "
        "for n in os.listdir(sys.argv[1])), oct(os.stat(sys.argv[1]).st_mode & 0o777))"
    )
    out = subprocess.run(
        [PYTHON, "-c", code, str(directory)], capture_output=True, text=True, check=True
    ).stdout
    names = ["ledger.lock", DB, WAL, SHM]
    assert out.strip() == f"{sorted((n, '0o600') for n in names)} 0o700"


# --------------------------------------------------------------------------- links


@pytest.mark.program
@pytest.mark.parametrize("name", [DB, WAL, SHM])
def test_a_symlinked_store_file_is_refused_by_readers_and_its_target_untouched(
    store: tuple[Path, str], tmp_path: Path, name: str
) -> None:
    """A store file that is a symlink is refused by a read command and by `sql`; the file it points to keeps owner, mode, bytes and mtime."""
    directory, _run_id = store
    target = tmp_path / "elsewhere"
    if name == DB:
        (directory / DB).rename(target)
    else:
        target.write_bytes(b"not a wal")
        target.chmod(0o600)
    (directory / name).symlink_to(target)
    before = fingerprint(directory, target)
    assert_refused(ledger("runs", "--store", str(directory)), "symlink", name)
    if SQLITE3 is not None:
        assert_refused(ledger("sql", "--store", str(directory), "SELECT 1"), "symlink")
    assert fingerprint(directory, target) == before


@pytest.mark.program
@pytest.mark.parametrize("name", [DB, WAL, SHM])
def test_a_hard_linked_store_file_is_refused_and_the_other_name_untouched(
    store: tuple[Path, str], tmp_path: Path, name: str
) -> None:
    """A database, -wal or -shm with a second hard link is refused by readers and writers; the file behind the other link is unchanged."""
    directory, run_id = store
    outside = tmp_path / "outside"
    if name == DB:
        os.link(directory / DB, outside)
    else:
        outside.write_bytes(b"\0" * 32768)
        outside.chmod(0o600)
        os.link(outside, directory / name)
    before = fingerprint(directory, outside)
    assert_refused(ledger("status", "--store", str(directory)), "hard links")
    with pytest.raises(EffectPersistenceError, match="hard links"):
        _claim(directory, run_id)
    assert fingerprint(directory, outside) == before


@pytest.mark.program
@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("name", [WAL, SHM])
def test_a_fifo_or_directory_in_place_of_a_sidecar_is_refused_without_hanging(
    store: tuple[Path, str], name: str, kind: str
) -> None:
    """A fifo or a directory named like the -wal or -shm is refused at once (nothing blocks on the fifo)."""
    directory, _run_id = store
    if kind == "fifo":
        os.mkfifo(directory / name, 0o600)
    else:
        (directory / name).mkdir(mode=0o700)
    assert_refused(ledger("verify", "--store", str(directory)), "not a regular file")


@pytest.mark.program
def test_a_symlinked_store_directory_is_refused_by_readers(store: tuple[Path, str]) -> None:
    """A store directory given through a symlink is refused by a read command."""
    directory, _run_id = store
    link = directory.with_name("link")
    link.symlink_to(directory)
    assert_refused(ledger("status", "--store", str(link)), "symlink")


# --------------------------------------------------------------------------- paths


@pytest.mark.program
def test_a_store_path_that_is_not_utf8_works_for_every_read_command(tmp_path: Path) -> None:
    """A store directory whose name is not UTF-8 is read by runs, show, status, verify, export, path and sql."""
    directory = os.fsencode(tmp_path) + b"/st\xff\xfeore"
    run_id = build_store(directory)
    store = os.fsdecode(directory)
    for args in (["runs"], ["show", run_id[:8]], ["status"], ["verify"], ["export", run_id]):
        result = ledger(*args, "--store", store)
        assert result.returncode == 0, result.stderr
        assert any(s in result.stdout for s in (run_id, "write-it", "ok: 1 runs")), result.stdout
    path = subprocess.run(
        [LEDGER, "path", "--store", store], capture_output=True, check=True, timeout=60
    )
    assert path.stdout == directory + b"/" + DB.encode() + b"\n"
    if SQLITE3 is not None:
        sql = ledger("sql", "--store", store, "SELECT count(*) FROM claims")
        assert (sql.returncode, sql.stdout.strip()) == (0, "1"), sql.stderr


# --------------------------------------------------------------------------- rendering


FORGED = "/sandbox/x\n99   2020-01-01T00:00:00+00:00  claim  forged  \x1b[2J\x9b31m\u202eevil\x7f"


@pytest.mark.program
@pytest.mark.parametrize("command", [["show", "{run}"], ["status"], ["show", "{run}", "--json"]])
def test_control_characters_in_a_locator_neither_forge_rows_nor_reach_the_terminal(
    tmp_path: Path, command: list[str]
) -> None:
    """A locator holding a newline, ESC, a C1 CSI, DEL and a bidi override is shown escaped: no extra line, no control character in the output, and --json still decodes to the locator."""
    directory = tmp_path / "store"
    run_id = build_store(directory, FORGED)
    clean = ledger(*[w.replace("{run}", run_id) for w in command], "--store", str(directory))
    assert clean.returncode == 0, clean.stderr
    assert all(c.isprintable() for c in clean.stdout.replace("\n", "")), repr(clean.stdout)
    if "--json" in command:
        records = json.loads(clean.stdout)["records"]
        assert records[0]["record"]["impact_scope"][0]["locator"] == FORGED
    elif command[0] == "show":
        timeline = clean.stdout.split("\n\n")[1].splitlines()
        # The header and the one claim (whose text may go on, indented, under its column).
        rows = [line for line in timeline if not line.startswith(" ")]
        assert len(rows) == 2, clean.stdout
        # The locator's end is shown (its start, with the newline, is cut): escaped.
        assert "claim  forged  \\x1b[2J\\x9b31m\\u202eevil\\x7f" in clean.stdout
    else:
        assert len(clean.stdout.splitlines()) == 2, clean.stdout


# --------------------------------------------------------------------------- sql


@needs_shell
@pytest.mark.parametrize(
    "statement",
    [".open {dir}/other.db", "ATTACH '{dir}/other.db' AS o", ".shell touch {dir}/other.db"],
)
@pytest.mark.program
def test_sql_runs_the_shell_in_safe_mode(
    store: tuple[Path, str], tmp_path: Path, statement: str
) -> None:
    """`ledger sql` refuses .open, ATTACH and .shell (the shell's -safe mode), and creates no file."""
    directory, _run_id = store
    result = ledger("sql", "--store", str(directory), statement.format(dir=tmp_path))
    assert result.returncode != 0
    assert "safe mode" in result.stderr
    assert not (tmp_path / "other.db").exists()


# --------------------------------------------------------------------------- verify


@pytest.mark.program
def test_verify_anchor_of_a_run_that_is_gone_is_a_verify_problem(store: tuple[Path, str]) -> None:
    """An anchor whose run is no longer in the store is reported (exit 1, in the report and --json), not a usage error."""
    directory, _run_id = store
    gone = "f" * 32
    anchor = f"{gone}:3:{'a' * 64}"
    result = ledger("verify", "--anchor", anchor, "--store", str(directory))
    assert result.returncode == 1, result.stderr
    assert f"run {gone}: anchor at seq 3: the run is gone" in result.stdout
    report = json.loads(
        ledger("verify", "--json", "--anchor", anchor, "--store", str(directory)).stdout
    )
    assert report["ok"] is False
    assert report["problems"] == [f"run {gone}: anchor at seq 3: the run is gone"]


# --------------------------------------------------------------------------- other users


@pytest.mark.program
def test_a_read_only_user_reads_a_crashed_store_without_its_shm(public_dir: Path) -> None:
    """Uid nobody reads root's crashed store (its claim only in the -wal, the -shm gone) from a private copy: it sees the claim and no file of the store changes or appears."""
    directory = public_dir / "store"
    run_id = build_store(directory, crash=True)
    (directory / SHM).unlink()
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)
    assert (directory / WAL).stat().st_size > 0
    before = fingerprint(public_dir)
    result = as_other(LEDGER, "status", "--json", "--store", str(directory))
    assert result.returncode == 0, result.stderr
    assert [row["run_id"] for row in json.loads(result.stdout)] == [run_id]
    assert fingerprint(public_dir) == before


@pytest.mark.program
def test_root_reading_another_users_store_changes_no_file_of_it(public_dir: Path) -> None:
    """Root reads a crashed store of uid nobody from a copy: every file keeps owner, mode, bytes and mtime, and no -shm or -wal is created or rebuilt in place."""
    directory = public_dir / "store"
    directory.mkdir(mode=0o700)
    os.chown(directory, other_uid(), -1)
    result = as_other(PYTHON, "-c", _WORKER_AS_OTHER, str(directory))
    assert result.returncode == -signal.SIGKILL, result.stderr
    run_id = result.stdout.strip()
    before = fingerprint(public_dir)
    assert {Path(p).name for p in before} >= {DB, WAL, SHM}
    shown = ledger("show", run_id[:8], "--json", "--store", str(directory))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == run_id
    assert fingerprint(public_dir) == before
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


_WORKER_AS_OTHER = """
import hashlib, os, signal, sys
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
run_id = new_run_id()
log = EffectLog(run_id, sys.argv[1])
log.claim(effect_id="e", action_id="a",
          operation=fx.OperationRef("w", "t/1", hashlib.sha256(b"").hexdigest()),
          impact_scope=())
print(run_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


# --------------------------------------------------------------------------- the checks, in-process
# The same checks called directly on real files, so that `make mutants` sees them.


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[tuple[Path, EffectLog]]:
    """A store whose writer is still open: database, -wal and -shm all present."""
    directory = tmp_path / "store"
    with EffectLog(new_run_id(), directory) as log:
        log.claim(
            effect_id="open",
            action_id="a1",
            operation=fx.OperationRef("write_file", "test/1", hashlib.sha256(b"{}").hexdigest()),
            impact_scope=(fx.ResourceRef("fs", "/sandbox/a.txt", "target"),),
        )
        yield directory, log


def _refusal(directory: Path, *, writer: bool = False) -> str:
    with pytest.raises(EffectPersistenceError) as refused:
        _trust.check_store(directory, directory / DB, writer=writer)
    return str(refused.value)


def test_check_store_says_what_it_saw_of_a_store_in_use_and_of_a_closed_one(
    open_store: tuple[Path, EffectLog],
) -> None:
    """An open store has its -wal (with its size) and -shm seen; a closed one has neither."""
    directory, log = open_store
    db = directory / DB
    st = directory.stat()
    identity = (st.st_dev, st.st_ino)
    for writer in (False, True):
        checked = _trust.check_store(directory, db, writer=writer)
        wal_size = (directory / WAL).stat().st_size
        assert wal_size > 0
        assert checked == _trust.Checked(
            directory, db, os.geteuid(), wal_size, has_shm=True, identity=identity
        )
        assert checked.ours
    log.close()
    assert _trust.check_store(directory, db, writer=True) == _trust.Checked(
        directory, db, os.geteuid(), -1, has_shm=False, identity=identity
    )
    assert _trust.store_files(db) == (db, directory / WAL, directory / SHM)


def test_each_refused_directory_is_named_with_the_reason(tmp_path: Path) -> None:
    """A symlinked, non-directory or group/other-writable store directory: each its own message."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _refusal(link) == (
        f"store directory {link} is a symlink; refusing it: give the real directory"
    )
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert _refusal(plain) == f"store directory {plain} is not a directory"
    for mode in (0o720, 0o702):
        real.chmod(mode)
        assert _refusal(real, writer=True) == (
            f"store directory {real} is writable by group or others (mode {mode:04o}), so "
            f"others could plant files in it; check its files, then run: chmod go-w {real}"
        )


@pytest.mark.parametrize("name", [DB, WAL, SHM])
def test_each_refused_store_file_is_named_with_the_reason(
    open_store: tuple[Path, EffectLog], tmp_path: Path, name: str
) -> None:
    """A symlink, a fifo, a second link, a group or other write bit: refused, saying which."""
    directory, _ = open_store
    path = directory / name
    saved = tmp_path / "saved"
    shutil.copy2(path, saved)
    path.unlink()
    path.symlink_to(saved)
    assert _refusal(directory) == f"database file {path} is a symlink; refusing it"
    path.unlink()
    os.mkfifo(path, 0o600)
    assert _refusal(directory) == f"database file {path} is not a regular file; refusing it"
    path.unlink()
    shutil.copy2(saved, path)
    os.link(path, tmp_path / "second")
    assert _refusal(directory) == (
        f"database file {path} has 2 hard links; a store file must have one: remove the other links"
    )
    (tmp_path / "second").unlink()
    for mode in (0o620, 0o602):
        path.chmod(mode)
        assert _refusal(directory, writer=True) == (
            f"database file {path} is writable by group or others (mode {mode:04o}); "
            f"run: chmod go-w {path}"
        )
    path.chmod(0o600)
    _trust.check_store(directory, directory / DB, writer=True)


def test_a_missing_database_is_refused_and_missing_sidecars_are_not(tmp_path: Path) -> None:
    """The database file must exist; its -wal and -shm may be absent."""
    directory = tmp_path / "store"
    directory.mkdir(mode=0o700)
    assert _refusal(directory) == f"database file {directory / DB} is missing"
    assert _trust.check_file(directory / WAL, owner=os.geteuid(), required=False) is None


@pytest.mark.usefixtures("root")
def test_files_or_a_directory_of_another_owner_are_refused_naming_both_uids(
    open_store: tuple[Path, EffectLog],
) -> None:
    """A writer needs the directory to be its own; everyone needs the files to be the owner's."""
    directory, _ = open_store
    uid = other_uid()
    os.chown(directory / SHM, uid, -1)
    assert _refusal(directory) == (
        f"database file {directory / SHM} is owned by uid {uid}, not by uid {os.geteuid()} "
        "(the store's owner); refusing it"
    )
    os.chown(directory, uid, -1)
    assert _refusal(directory, writer=True) == (
        f"store directory {directory} is owned by uid {uid}, not by this user "
        f"(uid {os.geteuid()}); write to it as its owner"
    )
    for name in (DB, WAL):
        os.chown(directory / name, uid, -1)
    checked = _trust.check_store(directory, directory / DB, writer=False)
    assert checked.owner == uid
    assert not checked.ours


def _records_in(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM claims").fetchone()[0])
    finally:
        conn.close()


def test_a_private_copy_holds_the_committed_records_and_is_removed_afterwards(
    open_store: tuple[Path, EffectLog],
) -> None:
    """The copy of a store in use (records still in its -wal) reads them; the store is untouched."""
    directory, log = open_store
    before = fingerprint(directory)
    checked = _trust.check_store(directory, directory / DB, writer=False)
    with _trust.private_copy(checked) as copy:
        assert copy.name == DB
        assert stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
        for name in (DB, WAL):  # private whatever the umask: only the reader may read it
            assert stat.S_IMODE((copy.parent / name).stat().st_mode) == 0o600
        assert (copy.parent / WAL).read_bytes() == (directory / WAL).read_bytes()
        assert copy.read_bytes() == (directory / DB).read_bytes()
        assert _records_in(copy) == 1
    assert not copy.parent.exists()
    assert fingerprint(directory) == before
    log.close()
    checked = _trust.check_store(directory, directory / DB, writer=False)
    with _trust.private_copy(checked) as copy:
        assert not (copy.parent / WAL).exists()
        assert _records_in(copy) == 1


def test_a_private_copy_refuses_files_swapped_after_the_check(
    open_store: tuple[Path, EffectLog], tmp_path: Path
) -> None:
    """Files are checked again on the descriptor that is copied: a swap after the check is refused."""
    directory, _ = open_store
    checked = _trust.check_store(directory, directory / DB, writer=False)
    db, wal = directory / DB, directory / WAL
    saved = tmp_path / "saved"
    db.rename(saved)
    db.symlink_to(saved)
    with pytest.raises(EffectPersistenceError) as refused, _trust.private_copy(checked):
        pass
    assert str(refused.value) == f"database file {db} is a symlink; refusing it"
    db.unlink()
    saved.rename(db)
    os.link(wal, tmp_path / "second")
    with pytest.raises(EffectPersistenceError) as linked, _trust.private_copy(checked):
        pass
    assert str(linked.value) == (
        f"database file {wal} has 2 hard links; a store file must have one: remove the other links"
    )
    (tmp_path / "second").unlink()
    directory.chmod(0o777)
    mode_0777 = r"writable by group or others \(mode 0777\)"
    with pytest.raises(EffectPersistenceError, match=mode_0777), _trust.private_copy(checked):
        pass
    directory.chmod(0o700)
    (directory / DB).rename(tmp_path / "moved")
    with pytest.raises(EffectPersistenceError) as missing_db, _trust.private_copy(checked):
        pass
    assert str(missing_db.value) == f"database file {directory / DB} is missing"
    assert not list(Path(tempfile.gettempdir()).glob("ledger-read-*"))


def test_the_wal_salt_is_read_from_a_whole_header_only() -> None:
    """The salts that tell one WAL generation from the next: bytes 16-23 of its 32-byte header."""
    header = bytes(range(32))
    assert _trust._salt(header) == bytes(range(16, 24))
    assert _trust._salt(header + b"frames") == bytes(range(16, 24))
    assert _trust._salt(header[:31]) is None  # a WAL cut short has no generation yet
    assert _trust._salt(b"") is None


def test_a_copy_is_never_written_through_a_name_that_exists(tmp_path: Path) -> None:
    """A copy's file is created new: a link planted at its name is refused, and what it points to is untouched."""
    source = tmp_path / "source"
    source.write_bytes(b"records" * 10)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    planted = tmp_path / "planted"
    planted.symlink_to(victim)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    fd = os.open(source, os.O_RDONLY)
    try:
        for name in (planted, dangling, victim):
            with pytest.raises(FileExistsError):
                _trust._copy_fd(fd, name)
    finally:
        os.close(fd)
    assert victim.read_bytes() == b"keep me"
    assert not (tmp_path / "nowhere").exists()


class _ShortReads:
    """The ``os`` module as the copy sees it, but whose reads return a few bytes at a time.

    A read may legally return fewer bytes than asked (a file system over a network, a
    signal); the copy must then still copy every byte and the whole ``-wal`` header.
    Every other call, and every descriptor, is the real one.
    """

    def __init__(self, step: int) -> None:
        self.step = step
        self.reads = 0
        self.flags: list[int] = []  # F_GETFD of each descriptor written to

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def read(self, fd: int, size: int) -> bytes:
        self.reads += 1
        return os.read(fd, min(size, self.step))

    def write(self, fd: int, data: bytes) -> int:
        self.flags.append(fcntl.fcntl(fd, fcntl.F_GETFD))
        return os.write(fd, data)


@pytest.mark.parametrize("step", [1, 7, 31, 33, 4096])
def test_a_copy_made_of_short_reads_is_whole_and_keeps_the_wal_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """Short reads: every byte is copied, the header is the first 32, the copy's descriptor is close-on-exec."""
    data = bytes(range(256)) * 40 + b"tail"
    source = tmp_path / "source"
    source.write_bytes(data)
    short = _ShortReads(step)
    monkeypatch.setattr(_trust, "os", short)
    fd = os.open(source, os.O_RDONLY)
    try:
        head = _trust._copy_fd(fd, tmp_path / "copy")
    finally:
        os.close(fd)
    monkeypatch.undo()
    assert short.reads > len(data) // max(step, 1 << 20)
    assert head == data[:32]  # a WAL header
    assert (tmp_path / "copy").read_bytes() == data
    assert (tmp_path / "copy").stat().st_mode & 0o777 == 0o600
    assert short.flags
    assert all(flags & fcntl.FD_CLOEXEC for flags in short.flags)


_COPY_IN_SMALL_TMP = """
import os, sys
from pathlib import Path
from ledger.sqlite import trust
store, tmp = Path(sys.argv[1]), sys.argv[2]
checked = trust.check_store(store, store / "ledger.sqlite3", writer=False)
try:
    with trust.private_copy(checked) as copy:
        print("copied", copy.stat().st_size)
except Exception as e:
    print(type(e).__name__, e)
print("left:", os.listdir(tmp))
"""


@pytest.mark.program
@pytest.mark.parametrize("size", ["64k", "16m"])
def test_a_copy_that_cannot_fit_where_temporary_files_go_is_refused_before_writing(
    store: tuple[Path, str], tmp_path: Path, size: str
) -> None:
    """TMPDIR on a real 64 KiB tmpfs (a mount namespace of its own): refused, naming TMPDIR; 16 MiB: copied."""
    require_tool("unshare")
    directory, _ = store
    small = tmp_path / "small"
    small.mkdir()
    shell = 'mount -t tmpfs -o "size=$1" none "$2" && TMPDIR="$2" exec "$3" -c "$4" "$5" "$2"'
    result = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            shell,
            "sh",
            size,
            small,
            PYTHON,
            _COPY_IN_SMALL_TMP,
            directory,
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    first, left = result.stdout.splitlines()
    assert left == "left: []"
    if size == "16m":
        assert first == f"copied {(directory / DB).stat().st_size}"
    else:
        assert first.startswith(
            f"StoreUnavailableError the store {directory} is read from a private copy"
        )
        assert "set TMPDIR to a directory with room" in first


# --------------------------------------------------------------------------- copies and swaps
# A -wal swapped after the check, and a store that changes while it is copied. The files
# and the writers are real; a change "while it is copied" is made at a chosen step of the
# copy by wrapping the function that opens each file (it changes when, not what).

TIMEOUT = 10.0


@pytest.fixture
def closed_store(tmp_path: Path) -> tuple[Path, _trust.Checked]:
    """A store of one claim, written in this process and closed (no -wal), as a reader checked it."""
    directory = tmp_path / "store"
    _claim(directory, new_run_id())
    assert not (directory / WAL).exists()
    return directory, _trust.check_store(directory, directory / DB, writer=False)


def test_a_wal_swapped_for_a_fifo_after_the_check_is_refused_without_hanging(
    open_store: tuple[Path, EffectLog], tmp_path: Path
) -> None:
    """A fifo put in place of the -wal after the check: the copy fails at once instead of waiting for a writer."""
    directory, _ = open_store
    checked = _trust.check_store(directory, directory / DB, writer=False)
    wal = directory / WAL
    wal.rename(tmp_path / "saved-wal")
    os.mkfifo(wal, 0o600)
    errors: list[BaseException] = []

    def copy() -> None:
        try:
            with _trust.private_copy(checked):
                pass
        except BaseException as e:  # handed to the test
            errors.append(e)

    copying = threading.Thread(target=copy, daemon=True)
    copying.start()
    copying.join(TIMEOUT)
    try:
        if copying.is_alive():
            os.close(os.open(wal, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked open go
            copying.join(TIMEOUT)
            pytest.fail("the copy blocked on a fifo in place of the -wal")
        (error,) = errors
        assert isinstance(error, StoreFileRefusedError), error
    finally:
        wal.unlink()
        (tmp_path / "saved-wal").rename(wal)


def _reads_leave_a_trace(path: Path) -> int:
    """Make the next read of ``path`` change its access time (relatime); the access time now."""
    st = path.stat()
    os.utime(path, ns=(st.st_mtime_ns - 3600 * 10**9, st.st_mtime_ns))
    return path.stat().st_atime_ns


def test_a_wal_swapped_for_a_symlink_after_the_check_is_refused_without_reading_its_target(
    open_store: tuple[Path, EffectLog], tmp_path: Path
) -> None:
    """A symlink put in place of the -wal after the check is never followed: its target is not read."""
    directory, _ = open_store
    checked = _trust.check_store(directory, directory / DB, writer=False)
    wal = directory / WAL
    target = tmp_path / "target"
    target.write_bytes(wal.read_bytes())
    # Control: on this file system a read shows in the access time, or the test proves nothing.
    control = tmp_path / "control"
    control.write_bytes(b"x" * 64)
    before = _reads_leave_a_trace(control)
    control.read_bytes()
    if control.stat().st_atime_ns == before:
        pytest.fail(f"reads leave no access time on {tmp_path} (noatime?): nothing to observe")
    before = _reads_leave_a_trace(target)
    wal.rename(tmp_path / "saved-wal")
    wal.symlink_to(target)
    try:
        with (
            pytest.raises((OSError, EffectPersistenceError)),
            _trust.private_copy(checked),
        ):
            pass
    finally:
        wal.unlink()
        (tmp_path / "saved-wal").rename(wal)
    assert target.stat().st_atime_ns == before


def _before_opening(
    monkeypatch: pytest.MonkeyPatch, name: str, change: Callable[[], None]
) -> list[str]:
    """Call ``change`` once, just before the copy opens the store file ``name`` to copy it.

    That is its first opening after the database's (the -wal is also opened before, to
    read its salts). Returns the names of the files opened, in order.
    """
    opened: list[str] = []
    changed: list[bool] = []
    open_checked = _trust._open_checked

    def opening(dir_fd: int, path: Path, *, owner: int) -> int | None:
        opened.append(path.name)
        if path.name == name and (name == DB or DB in opened) and not changed:
            changed.append(True)
            change()
        return open_checked(dir_fd, path, owner=owner)

    monkeypatch.setattr(_trust, "_open_checked", opening)
    return opened


def test_a_wal_that_appears_while_the_store_is_copied_makes_it_copy_again(
    closed_store: tuple[Path, _trust.Checked], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer starts (its -wal appears) after the database was copied: the copy is made again, with its claim."""
    directory, checked = closed_store
    writers: list[EffectLog] = []

    def writer_starts() -> None:
        writer = EffectLog(new_run_id(), directory)
        writers.append(writer)
        writer.claim(effect_id="e2", action_id="a2", operation=_OP, impact_scope=())

    opened = _before_opening(monkeypatch, WAL, writer_starts)
    try:
        with _trust.private_copy(checked) as copy:
            assert _records_in(copy) == 2
        assert opened.count(DB) == 2  # the first copy was not taken
    finally:
        for writer in writers:
            writer.close()


def test_a_store_written_while_it_is_copied_is_copied_again(
    closed_store: tuple[Path, _trust.Checked], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer comes and goes (no -wal before or after) while the copy is made: the copy holds its claim."""
    directory, checked = closed_store
    opened = _before_opening(monkeypatch, WAL, lambda: _claim(directory, new_run_id()))
    with _trust.private_copy(checked) as copy:
        assert _records_in(copy) == 2
    assert opened.count(DB) == 2  # the first copy was not taken


def test_a_database_swapped_for_a_symlink_while_it_is_copied_is_refused(
    closed_store: tuple[Path, _trust.Checked], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database becomes a symlink to itself once copied: the copy is not taken, and the link is refused."""
    directory, checked = closed_store
    db = directory / DB
    moved = tmp_path / "moved"

    def swap() -> None:
        db.rename(moved)
        db.symlink_to(moved)

    _before_opening(monkeypatch, WAL, swap)
    with pytest.raises(EffectPersistenceError) as refused, _trust.private_copy(checked):
        pass
    assert str(refused.value) == f"database file {db} is a symlink; refusing it"


# --------------------------------------------------------------------------- directories above
# SQLite opens a store by path after it is checked: a directory above it that another
# user may write lets them swap the path in between (tests/reliability/test_swap_race.py
# runs that race). Such a path is refused to writers and read from a copy by readers.


def _above(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """A store of ours (one claim) two levels below ``above``, which is then made ``how``."""
    above = tmp_path / "above"
    store = above / "mid" / "store"
    _claim(store, new_run_id())
    if how == "owned":
        os.chown(above, other_uid(), -1)
    elif how == "sticky, entry another's":
        above.chmod(0o1777)
        os.chown(above / "mid", other_uid(), -1)
    else:
        above.chmod(int(how, 8))
    return above, store


_EXPOSED = {
    "owned": "owned by uid {uid}",
    "0777": "writable by group or others (mode 0777)",
    "0775": "writable by group or others (mode 0775)",
    "sticky, entry another's": "shared (mode 1777) and mid in it is owned by uid {uid}",
}


@pytest.mark.usefixtures("root")
@pytest.mark.parametrize("how", list(_EXPOSED))
def test_a_store_under_a_directory_another_user_may_replace_it_in_is_refused_to_writers(
    tmp_path: Path, how: str
) -> None:
    """A writer is refused, in one line naming the directory above and what to do; a reader sees why and reads a copy."""
    above, store = _above(tmp_path, how)
    reason = _EXPOSED[how].format(uid=other_uid())
    fix = "" if how in ("owned", "sticky, entry another's") else f", or run: chmod go-w {above}"
    expected = (
        f"store directory {store} lies under {above}, which is {reason}, so another user "
        "could swap the store's path while it is opened; move the store under directories "
        f"only you and root may write{fix}"
    )
    assert _refusal(store, writer=True) == expected
    with pytest.raises(StoreFileRefusedError, match="lies under"):
        _trust.check_directory(store, writer=True)
    with pytest.raises(EffectPersistenceError) as written:
        _claim(store, new_run_id())
    assert expected in str(written.value)
    checked = _trust.check_store(store, store / DB, writer=False)
    assert checked.exposure == _trust.Exposure(above, reason, fix.removeprefix(", or run: "))
    assert checked.ours
    assert needs_copy(checked)


def test_a_sticky_directory_protects_the_entries_of_this_user_and_root(tmp_path: Path) -> None:
    """Under a sticky, world-writable directory (as /tmp), a store whose path is ours is a writer's."""
    _, store = _above(tmp_path, "1777")
    checked = _trust.check_store(store, store / DB, writer=True)
    assert checked.exposure is None
    assert not needs_copy(checked)
    _claim(store, new_run_id())


@pytest.mark.usefixtures("root")
def test_a_symlink_above_the_store_is_followed_by_hand_and_where_it_leads_is_checked(
    tmp_path: Path,
) -> None:
    """A link above the store is followed, and the directories it leads through are checked like any other."""
    above, store = _above(tmp_path, "0755")
    link = tmp_path / "link"
    link.symlink_to(above / "mid")
    via = link / "store"
    st = store.stat()
    checked = _trust.check_store(via, via / DB, writer=True)
    assert (checked.exposure, checked.identity) == (None, (st.st_dev, st.st_ino))
    relative = tmp_path / "relative"
    relative.symlink_to(Path("above") / ".." / "above" / "mid")
    assert _trust.check_store(relative / "store", store / DB, writer=True).identity == (
        st.st_dev,
        st.st_ino,
    )
    os.chown(above, other_uid(), -1)
    assert "lies under " + str(above) + ", which is owned by uid" in _refusal(via, writer=True)
    os.chown(above, 0, -1)
    # A link in a sticky directory that another user owns may be replaced by them.
    tmp_path.chmod(0o1777)
    os.lchown(link, other_uid(), -1)
    assert f"lies under {tmp_path}, which is shared (mode 1777) and link in it" in _refusal(
        via, writer=True
    )


def test_a_private_copy_reads_only_the_directory_that_was_checked(tmp_path: Path) -> None:
    """The store's directory replaced by another valid store after the check: the copy refuses it rather than read the other."""
    store = tmp_path / "store"
    _claim(store, new_run_id())
    checked = _trust.check_store(store, store / DB, writer=False)
    store.rename(tmp_path / "moved")
    _claim(store, new_run_id())
    _claim(store, new_run_id())
    with pytest.raises(StoreFileRefusedError) as refused, _trust.private_copy(checked):
        pass
    assert str(refused.value) == (
        f"store directory {store} was replaced since it was checked; refusing it"
    )
    assert not list(Path(tempfile.gettempdir()).glob("ledger-read-*"))


@pytest.mark.program
@pytest.mark.usefixtures("root")
def test_the_commands_read_a_store_under_another_users_directory_from_a_copy(
    tmp_path: Path,
) -> None:
    """`status` reads the store whole and changes no file of it; `sql` says it reads a copy, and why."""
    above, store = _above(tmp_path, "owned")
    before = fingerprint(store)
    shown = ledger("status", "--json", "--store", str(store))
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)) == 1
    assert fingerprint(store) == before
    if SQLITE3 is not None:
        queried = ledger("sql", "--store", str(store), "SELECT count(*) FROM claims")
        assert queried.returncode == 0, queried.stderr
        assert queried.stdout.strip() == "1"
        assert f"note: {above} above the store is owned by uid {other_uid()}" in queried.stderr
    assert fingerprint(store) == before
