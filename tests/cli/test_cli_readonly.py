"""Reading a store never writes: every read command of `ledger`, as real processes on real stores.

Each command runs through the console script (or, for uid 65534, see ``nobody``) against
a store built by a real worker process. Every file under the test's directory is
fingerprinted (sha256, mode, owner, links, mtime_ns) before and after the command: a read
command must leave every byte, mode and mtime as it was and create no file, also for a
user who may read the store but not write it, and on a store that a live worker holds
open (where only SQLite's ``-shm`` index may change).

One documented exception (docs/forensics.md): ``ledger sql`` opens the shell ``mode=ro``
whenever its user can write the store's directory, and on a store with no ``-wal``
SQLite then creates an empty ``-wal`` and a ``-shm`` with the database file's owner and
mode. Those two files, exactly so, are all it may add; it still changes no byte.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.builders import (
    LEDGER,
    PYTHON,
    REPO,
    Fingerprint,
    fingerprint,
    ledger,
    missing,
    python_stdout,
    subprocess_env,
)

DB = "ledger.sqlite3"
WAL = DB + "-wal"
SHM = DB + "-shm"
NOBODY = 65534
TIMEOUT = 60

RUN_A = "3f9a1c0e7b2d4e8f9a0b1c2d3e4f5a6b"
RUN_B = "8d2e4f6a0b1c3d5e7f9a1b3c5d7e9f0a"
RUN_LIVE = "c0ffee00c0ffee00c0ffee00c0ffee00"

_PRELUDE = """
import hashlib, sys
from ledger import effects as fx
from ledger.effect_log import EffectLog

def op(name):
    return fx.OperationRef(name, "test/1", hashlib.sha256(name.encode()).hexdigest())

def fs(path):
    return fx.ResourceRef("fs", path, "target")
"""

# A worker that writes two runs and exits: its store is closed (no -wal, no -shm) and
# its recorded writer is dead, so `recover --dead` would want to recover RUN_A.
BUILD_STORE = (
    _PRELUDE
    + """
store, run_a, run_b = sys.argv[1:4]
with EffectLog(run_a, store) as log:
    plan = fs("/sandbox/plan.md")
    log.claim(effect_id="write-plan", action_id="a1", operation=op("write_file"),
              impact_scope=(plan,), obligations=(fx.Postcondition(plan, fx.Predicate.EXISTS),))
    log.outcome(effect_id="write-plan", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                impact=fx.Impact.CERTAIN)
    log.observe(observation_id="saw-plan", resource=plan,
                mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
                coverage=fx.Coverage.COMPLETE, source_action_id="a2", exists=True)
    log.claim(effect_id="write-report", action_id="a3", operation=op("write_file"),
              impact_scope=(fs("/sandbox/report.txt"),))
with EffectLog(run_b, store) as log:
    log.claim(effect_id="delete-lock", action_id="b1", operation=op("delete_file"),
              impact_scope=(fs("/sandbox/stale.lock"),))
    log.outcome(effect_id="delete-lock", execution=fx.ExecutionOutcome.FAILED,
                impact=fx.Impact.NONE)
"""
)

# A worker that claims one effect and keeps its log (and SQLite connection) open until
# its standard input closes: the store has a live -wal holding the claim.
LIVE_WRITER = (
    _PRELUDE
    + """
store, run = sys.argv[1:3]
log = EffectLog(run, store)
log.claim(effect_id="live-write", action_id="l1", operation=op("write_file"),
          impact_scope=(fs("/sandbox/live.txt"),))
print("ready", flush=True)
sys.stdin.read()
log.close()
"""
)

# The console script's body, for an interpreter other than the venv's (see `nobody`).
LAUNCH = "import sys; from ledger.cli import main; sys.argv[0] = 'ledger'; sys.exit(main())"


# --------------------------------------------------------------------------- expectations


@dataclasses.dataclass(frozen=True)
class Expect:
    """What a store holds, as the read commands should report it."""

    runs: tuple[str, ...]  # oldest first
    main_run: str  # the run given to `show` and `export`
    main_effects: tuple[str, ...]
    main_records: int
    effects: dict[str, bool]  # effect id -> unresolved impact
    records: int

    @property
    def unresolved(self) -> set[str]:
        """The effects `status --unresolved` lists."""
        return {effect for effect, unresolved in self.effects.items() if unresolved}


CLOSED = Expect(
    runs=(RUN_A, RUN_B),
    main_run=RUN_A,
    main_effects=("write-plan", "write-report"),
    main_records=4,
    effects={"write-plan": False, "write-report": True, "delete-lock": False},
    records=6,
)
LIVE = Expect(
    runs=(RUN_LIVE,),
    main_run=RUN_LIVE,
    main_effects=("live-write",),
    main_records=1,
    effects={"live-write": True},
    records=1,
)


def _runs_text(out: str, e: Expect, store: Path) -> None:
    assert all(run in out for run in e.runs), out


def _runs_json(out: str, e: Expect, store: Path) -> None:
    rows = json.loads(out)
    assert [r["run_id"] for r in rows] == list(e.runs)
    assert sum(r["claims"] for r in rows) == len(e.effects)


def _show_text(out: str, e: Expect, store: Path) -> None:
    assert f"run {e.main_run}" in out, out
    assert all(effect in out for effect in e.main_effects), out


def _show_json(out: str, e: Expect, store: Path) -> None:
    data = json.loads(out)
    assert data["run_id"] == e.main_run
    assert [a["effect_id"] for a in data["effects"]] == list(e.main_effects)
    assert len(data["records"]) == e.main_records


def _status_text(out: str, e: Expect, store: Path) -> None:
    assert all(effect in out for effect in e.effects), out


def _status_json(out: str, e: Expect, store: Path) -> None:
    assert {r["effect_id"]: r["unresolved_impact"] for r in json.loads(out)} == e.effects


def _unresolved_text(out: str, e: Expect, store: Path) -> None:
    assert {effect for effect in e.effects if effect in out} == e.unresolved, out


def _unresolved_json(out: str, e: Expect, store: Path) -> None:
    assert {r["effect_id"] for r in json.loads(out)} == e.unresolved


def _verify_text(out: str, e: Expect, store: Path) -> None:
    assert out.startswith(f"ok: {len(e.runs)} runs, {e.records} records, schema current"), out


def _verify_json(out: str, e: Expect, store: Path) -> None:
    assert json.loads(out) == {
        "ok": True,
        "runs": len(e.runs),
        "records": e.records,
        "problems": [],
    }


def _export(out: str, e: Expect, store: Path) -> None:
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == e.main_records
    assert all(line["v"] == 1 for line in lines)
    claims = [line["record"]["effect_id"] for line in lines if line["type"] == "claim"]
    assert claims == list(e.main_effects)


def _path_text(out: str, e: Expect, store: Path) -> None:
    assert out == f"{store / DB}\n"


def _path_json(out: str, e: Expect, store: Path) -> None:
    assert json.loads(out) == {"path": str(store / DB), "exists": True}


def _approvals_text(out: str, e: Expect, store: Path) -> None:
    assert out == "no approval request is pending\n"


def _approvals_json(out: str, e: Expect, store: Path) -> None:
    assert json.loads(out) == []  # the scenario asks for no approval


def _sql(out: str, e: Expect, store: Path) -> None:
    assert out.strip() == str(len(e.effects))


# The page directories made for the test running, removed after it (_pages_removed).
_PAGES: list[Path] = []


def _page_dir() -> str:
    """A new directory for a report's page, outside every fingerprinted tree.

    World-writable and sticky, like /tmp, so that uid 65534 may write its page there.
    """
    directory = Path(tempfile.mkdtemp(prefix="ledger-page-"))
    directory.chmod(0o1777)
    _PAGES.append(directory)
    return str(directory)


@pytest.fixture(autouse=True)
def _pages_removed() -> Iterator[None]:
    # A command refused writes no page, and its directory would stay behind in /tmp.
    yield
    while _PAGES:
        shutil.rmtree(_PAGES.pop(), ignore_errors=True)


def _report_page(out: str, e: Expect, store: Path) -> None:
    page = Path(out.strip())
    try:
        html = page.read_text(encoding="utf-8")
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        assert e.main_run in html
        assert "ledger verify: ok." in html
    finally:
        shutil.rmtree(page.parent)


@dataclasses.dataclass(frozen=True)
class Command:
    """One read command: its words ({run} is a prefix of the main run) and its content check."""

    words: tuple[str, ...]
    check: Callable[[str, Expect, Path], None]

    @property
    def name(self) -> str:
        """The test id."""
        return "sql" if self.words[0] == "sql" else " ".join(self.words).replace("{run}", "RUN")

    def sql_session(self, store: str) -> str | None:
        """``store`` for `sql` run by a user who can write the store's directory, else None."""
        return store if self.words[0] == "sql" else None

    def argv(self, e: Expect, store: Path) -> list[str]:
        """The arguments after `ledger`."""
        words = [w.replace("{run}", e.main_run[:8]) for w in self.words]
        words = [w.replace("{out}", f"{_page_dir()}/page.html") for w in words]
        return [*words, "--store", str(store)]


COUNT_CLAIMS = "SELECT count(*) FROM claims"
ALL_COMMANDS = (
    Command(("runs",), _runs_text),
    Command(("runs", "--json"), _runs_json),
    Command(("show", "{run}"), _show_text),
    Command(("show", "{run}", "--json"), _show_json),
    Command(("status",), _status_text),
    Command(("status", "--json"), _status_json),
    Command(("status", "--unresolved"), _unresolved_text),
    Command(("status", "--unresolved", "--json"), _unresolved_json),
    Command(("approvals",), _approvals_text),
    Command(("approvals", "--all", "--json"), _approvals_json),
    Command(("verify",), _verify_text),
    Command(("verify", "--json"), _verify_json),
    Command(("export", "{run}"), _export),
    Command(("path",), _path_text),
    Command(("path", "--json"), _path_json),
    Command(("sql", COUNT_CLAIMS), _sql),
    Command(("report", "-o", "{out}"), _report_page),
)
# One form of each command (the text and --json forms make the same library call): for
# the scenarios where each invocation is about the store's state, not the rendering.
BY_NAME = {c.name: c for c in ALL_COMMANDS}
# One form of each command that reads the store (the text and --json forms make the
# same library call; `path` only joins a path): for the scenarios that are about the
# store's state and the user, not the rendering.
EACH_COMMAND = tuple(
    BY_NAME[name]
    for name in (
        "runs --json",
        "show RUN --json",
        "status --json",
        "status --unresolved --json",
        "approvals --all --json",
        "verify --json",
        "export RUN",
        "sql",
        "report -o {out}",
    )
)


def _params(commands: tuple[Command, ...]) -> list[pytest.ParameterSet]:
    return [pytest.param(c, id=c.name) for c in commands]


# --------------------------------------------------------------------------- files


def copy_store(source: Path, target: Path, *, dir_mode: int, file_mode: int) -> Path:
    """Copy a closed store's files into a new directory ``target`` with the given modes."""
    target.mkdir()
    for path in source.iterdir():
        shutil.copyfile(path, target / path.name)
        (target / path.name).chmod(file_mode)
    target.chmod(dir_mode)
    return target


def make_public_dir(parent: Path, name: str) -> Path:
    """A root-owned 0755 directory: uid 65534 may enter and read it, not write it."""
    path = parent / name
    path.mkdir()
    path.chmod(0o755)
    return path


def assert_unchanged(
    before: Fingerprint, after: Fingerprint, *, sql_session_in: str | None = None
) -> None:
    """Every file as it was and no file created.

    ``sql_session_in`` (the store's name relative to the fingerprinted root) allows what
    a ``mode=ro`` shell documentedly leaves on a store with no ``-wal``: an empty
    ``-wal`` and a ``-shm`` with the database file's owner and mode, and so a new mtime
    on the store directory.
    """
    if sql_session_in is not None and set(after) != set(before):
        db = before[f"{sql_session_in}/{DB}"]
        wal, shm = f"{sql_session_in}/{WAL}", f"{sql_session_in}/{SHM}"
        assert set(after) - set(before) == {wal, shm}
        assert after[wal][0] == hashlib.sha256(b"").hexdigest()
        for name in (wal, shm):
            assert after[name][1:5] == db[1:5], name  # mode, owner, group, links
        after = {k: v for k, v in after.items() if k not in {wal, shm, sql_session_in}}
        before = {k: v for k, v in before.items() if k != sql_session_in}
    assert after == before


def _traversable_by_others(path: Path) -> bool:
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


# --------------------------------------------------------------------------- processes


def ledger_at_home(args: list[str], *, home: Path) -> subprocess.CompletedProcess[str]:
    """Run the console script as this (root) user, with ``home`` as $HOME."""
    env = subprocess_env() | {"HOME": str(home)}
    env.pop("XDG_STATE_HOME", None)
    return ledger(*args, env=env, cwd=home)


@dataclasses.dataclass(frozen=True)
class Unprivileged:
    """How uid 65534 runs `ledger`: an argv prefix, its PYTHONPATH, and which way it is."""

    prefix: tuple[str, ...]
    pythonpath: str
    how: str

    def run(self, args: list[str], *, home: Path) -> subprocess.CompletedProcess[str]:
        """Run `ledger args` as uid/gid 65534 with no supplementary groups."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LEDGER_DIR": str(home / "default-store"),
            "PYTHONPATH": self.pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return subprocess.run(
            [*self.prefix, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=home,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            timeout=TIMEOUT,
            check=False,
        )


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    """Exit 0 and no traceback."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """Exit 1 with one `Error: ...` line and nothing on stdout; returns the line."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def closed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store written by a worker that has exited: just ledger.sqlite3, no -wal or -shm."""
    directory = tmp_path_factory.mktemp("template") / "store"
    env = subprocess_env() | {"LEDGER_DIR": str(directory.parent / "default")}
    python_stdout(BUILD_STORE, directory, RUN_A, RUN_B, env=env, timeout=TIMEOUT)
    assert sorted(p.name for p in directory.iterdir()) == ["ledger.lock", DB]
    # The lock file holds no data, and no process uses the store any more: the template
    # is the database file alone, as a store copied elsewhere would be.
    (directory / "ledger.lock").unlink()
    return directory


def _claims_in_the_database_file_alone(db: Path) -> int:
    """How many claims ``db`` holds without its -wal (read immutable: no file touched)."""
    uri = f"file:{db}?mode=ro&immutable=1"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM claims").fetchone()[0])
        except sqlite3.DatabaseError:  # no schema yet: everything is in the -wal
            return 0


@pytest.fixture(scope="module")
def live_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A store a worker process holds open, its claim committed but still in the -wal."""
    directory = tmp_path_factory.mktemp("live") / "store"
    env = subprocess_env() | {"LEDGER_DIR": str(directory.parent / "default")}
    with subprocess.Popen(
        [PYTHON, "-c", LIVE_WRITER, str(directory), RUN_LIVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as writer:
        assert writer.stdin is not None
        assert writer.stdout is not None
        try:
            ready = writer.stdout.readline()
            assert ready == "ready\n", writer.stderr.read() if writer.stderr else ""
            assert (directory / WAL).stat().st_size > 0
            assert _claims_in_the_database_file_alone(directory / DB) == 0
            yield directory, writer
        finally:
            writer.stdin.close()
            try:
                writer.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()


@pytest.fixture(scope="module")
def public_tmp() -> Iterator[Path]:
    """A root-owned 0755 scratch directory that uid 65534 can reach (pytest's tmp is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ledger-readonly-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:  # undo chmod a-w so that rmtree can delete
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(path)


@pytest.fixture
def public_dir(public_tmp: Path) -> Path:
    """A fresh root-owned 0755 directory for one test, inside ``public_tmp``."""
    path = Path(tempfile.mkdtemp(dir=public_tmp))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def nobody(public_tmp: Path) -> Unprivileged:
    """How to run `ledger` as uid 65534, found by trying; skips when there is no way.

    First the venv's own console script. Its interpreter may live where uid 65534 cannot
    go (a pyenv build under /root, mode 0700): then the system interpreter of the same
    Python minor version (same ABI for the venv's compiled packages) runs the console
    script's body with the repository and the venv's site-packages on PYTHONPATH, so
    the same ledger code and the same SQLAlchemy, Alembic and click run.
    """
    if os.geteuid() != 0:
        missing("running a command as uid 65534 needs root")
    if not _traversable_by_others(public_tmp):
        missing(f"uid 65534 cannot reach the temporary directory {public_tmp}")
    if not _traversable_by_others(REPO):
        missing(f"uid 65534 cannot reach the repository {REPO}")
    home = make_public_dir(public_tmp, "probe-home")
    candidates = [Unprivileged((LEDGER,), str(REPO), "the venv's console script")]
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(minor, path="/usr/bin:/bin:/usr/local/bin")
    if system is not None and os.path.realpath(system) != os.path.realpath(PYTHON):
        site = sysconfig.get_paths()["purelib"]
        candidates.append(
            Unprivileged(
                (system, "-S", "-c", LAUNCH),
                os.pathsep.join((str(REPO), site)),
                f"{system} with {REPO} and {site}",
            )
        )
    expected = f"ledger, version {version('tool-ledger')}\n"
    failures = []
    for candidate in candidates:
        try:
            result = candidate.run(["--version"], home=home)
        except OSError as e:
            failures.append(f"{candidate.how}: {e}")
            continue
        if result.returncode == 0 and result.stdout == expected:
            return candidate
        failures.append(f"{candidate.how}: exit {result.returncode}, {result.stderr[-300:]!r}")
    return missing("uid 65534 cannot run ledger: " + "; ".join(failures))


# --------------------------------------------------------------------------- 1. closed store


@pytest.mark.parametrize("command", _params(ALL_COMMANDS))
def test_a_read_command_changes_and_creates_nothing(
    command: Command, closed_store: Path, tmp_path: Path
) -> None:
    """A read command on a closed store prints its content, changes no file and creates none (`sql`, whose user may write the directory, only its documented empty -wal and -shm)."""
    store = tmp_path / "store"
    shutil.copytree(closed_store, store)
    home = tmp_path / "home"
    home.mkdir()
    before = fingerprint(tmp_path, relative_to=tmp_path)
    result = ledger_at_home(command.argv(CLOSED, store), home=home)
    assert_ok(result)
    command.check(result.stdout, CLOSED, store)
    assert_unchanged(
        before,
        fingerprint(tmp_path, relative_to=tmp_path),
        sql_session_in=command.sql_session("store"),
    )


# --------------------------------------------------------------------------- 2. live writer


@pytest.mark.parametrize("command", _params(EACH_COMMAND))
def test_a_read_command_sees_a_live_writers_claim_and_changes_neither_database_nor_wal(
    command: Command, live_store: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    """With a worker holding the store open, a read command sees its claim (still in the -wal) and leaves ledger.sqlite3 and its -wal byte-identical and creates no file; only the -shm, SQLite's shared-memory index that every reader uses, may change."""
    store, writer = live_store
    home = tmp_path / "home"
    home.mkdir()
    before = fingerprint(store, relative_to=store)
    assert set(before) == {".", DB, WAL, SHM, "ledger.lock"}
    result = ledger_at_home(command.argv(LIVE, store), home=home)
    after = fingerprint(store, relative_to=store)
    assert_ok(result)
    command.check(result.stdout, LIVE, store)
    assert writer.poll() is None, "the writer must still hold the store open"
    assert set(after) == set(before)
    assert {k: v for k, v in after.items() if k != SHM} == {
        k: v for k, v in before.items() if k != SHM
    }
    assert list(home.iterdir()) == []


# --------------------------------------------------------------------------- 3. another user


@pytest.mark.parametrize("command", _params(EACH_COMMAND))
def test_a_user_who_may_only_read_the_store_can_read_it(
    command: Command, closed_store: Path, public_dir: Path, nobody: Unprivileged
) -> None:
    """Uid 65534, who may read a root-owned store (dir 0755, files 0644) but not write it, gets exit 0 and the right content (read from a private copy), and every file stays as it was."""
    store = copy_store(closed_store, public_dir / "store", dir_mode=0o755, file_mode=0o644)
    home = make_public_dir(public_dir, "home")
    before = fingerprint(public_dir, relative_to=public_dir)
    result = nobody.run(command.argv(CLOSED, store), home=home)
    assert_ok(result)
    command.check(result.stdout, CLOSED, store)
    if command.words[0] == "sql":
        assert "private copy" in result.stderr  # the store is root's, not uid 65534's
    assert fingerprint(public_dir, relative_to=public_dir) == before


# --------------------------------------------------------------------------- 4. read-only copy


def _read_only_copy(closed_store: Path, parent: Path) -> Path:
    """A copy of the store with every write bit cleared (`chmod -R a-w`)."""
    store = copy_store(closed_store, parent / "store", dir_mode=0o755, file_mode=0o644)
    subprocess.run(["chmod", "-R", "a-w", str(store)], check=True, timeout=TIMEOUT)
    assert stat.S_IMODE(store.stat().st_mode) == 0o555
    assert stat.S_IMODE((store / DB).stat().st_mode) == 0o444
    return store


def _read_only_params() -> list[pytest.ParameterSet]:
    # uid 65534 runs each command. Root ignores permission bits, so it takes the same
    # paths as in test 1: it runs `verify` (two reads, an integrity check) and `sql`
    # (whose mode=ro or immutable choice asks whether the directory is writable).
    return [
        pytest.param(command, user, id=f"{command.name}-{user}")
        for command in EACH_COMMAND
        for user in ("uid 65534", "root")
        if user == "uid 65534" or command.name in {"verify --json", "sql"}
    ]


@pytest.mark.parametrize(("command", "user"), _read_only_params())
def test_a_read_command_reads_a_read_only_copy(
    command: Command,
    user: str,
    closed_store: Path,
    public_dir: Path,
    request: pytest.FixtureRequest,
) -> None:
    """On a copy made read-only with `chmod -R a-w`, a read command succeeds with the right content and changes nothing, as root (who ignores permission bits, so `sql` may leave its documented -wal/-shm) and as uid 65534 (who cannot write there)."""
    store = _read_only_copy(closed_store, public_dir)
    home = make_public_dir(public_dir, "home")
    before = fingerprint(public_dir, relative_to=public_dir)
    if user == "root":
        result = ledger_at_home(command.argv(CLOSED, store), home=home)
        session = command.sql_session("store")  # root may write a 0555 directory
    else:
        result = request.getfixturevalue("nobody").run(command.argv(CLOSED, store), home=home)
        session = None
    assert_ok(result)
    command.check(result.stdout, CLOSED, store)
    assert_unchanged(
        before, fingerprint(public_dir, relative_to=public_dir), sql_session_in=session
    )


# --------------------------------------------------------------------------- 5. no store


@pytest.mark.parametrize(
    # read() checks the directory for every library command; verify counts runs first,
    # export goes through _jsonl, and sql checks for itself before starting the shell.
    "command",
    _params(tuple(BY_NAME[name] for name in ("status", "verify", "export RUN", "sql"))),
)
def test_a_read_command_on_a_missing_store_creates_nothing(
    command: Command, tmp_path: Path
) -> None:
    """A read command given a store directory that does not exist exits 1 with one line and creates no directory and no file."""
    store = tmp_path / "absent" / "store"
    home = tmp_path / "home"
    home.mkdir()
    default = Path(os.environ["LEDGER_DIR"])
    before = fingerprint(tmp_path, relative_to=tmp_path)
    result = ledger_at_home(command.argv(CLOSED, store), home=home)
    line = assert_one_line_error(result)
    assert "no store" in line
    assert fingerprint(tmp_path, relative_to=tmp_path) == before
    assert not (tmp_path / "absent").exists()
    assert not default.exists()


# --------------------------------------------------------------------------- 6. recover


@pytest.mark.parametrize(
    "how", [["recover", RUN_A[:8]], ["recover", "--dead"]], ids=["RUN", "--dead"]
)
def test_recover_on_a_read_only_copy_fails_in_one_line_and_changes_nothing(
    how: list[str], closed_store: Path, public_dir: Path, nobody: Unprivileged
) -> None:
    """`recover` (which writes) on a read-only copy, as uid 65534, exits 1 with one line naming the store and changes nothing."""
    store = _read_only_copy(closed_store, public_dir)
    home = make_public_dir(public_dir, "home")
    before = fingerprint(public_dir, relative_to=public_dir)
    result = nobody.run([*how, "--store", str(store)], home=home)
    line = assert_one_line_error(result)
    assert str(store) in line
    assert fingerprint(public_dir, relative_to=public_dir) == before


# --------------------------------------------------------------------------- empty -wal


# An empty -wal holds no commit: every commit is in the database file, which can be read
# `immutable` (docs/forensics.md: "only if there is no -wal file or it is empty"). A
# `sqlite3 -readonly` session, as that guide advises, leaves an empty -wal and a -shm;
# a copy that follows "never copy ledger.sqlite3 without its -wal" takes the -wal only.


@pytest.mark.parametrize("user", ["root", "uid 65534"])
def test_an_empty_wal_without_its_shm_is_read_like_a_closed_store(
    user: str, closed_store: Path, public_dir: Path, request: pytest.FixtureRequest
) -> None:
    """A store copied with its empty -wal but no -shm (the -shm holds no records) is read, with no file created, by root in a writable directory and by uid 65534 who cannot write it."""
    store = copy_store(closed_store, public_dir / "store", dir_mode=0o755, file_mode=0o644)
    (store / WAL).touch(mode=0o644)
    home = make_public_dir(public_dir, "home")
    command = Command(("status", "--json"), _status_json)
    before = fingerprint(public_dir, relative_to=public_dir)
    if user == "root":
        result = ledger_at_home(command.argv(CLOSED, store), home=home)
    else:
        result = request.getfixturevalue("nobody").run(command.argv(CLOSED, store), home=home)
    after = fingerprint(public_dir, relative_to=public_dir)
    assert set(after) - set(before) == set(), "a read command created a file"
    assert_ok(result)
    command.check(result.stdout, CLOSED, store)
    assert after == before
