"""Fault injection: a full disk, refused files and permissions, with real limits and real files.

Disk-full runs in a child process under a real ``RLIMIT_FSIZE``; links, symlinks and
foreign owners are made with the real system calls. Nothing under test is mocked.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, effects_dir, new_run_id
from ledger.resources import FilesystemResource, FilesystemRoot
from tests.builders import claim_small, effect_ids, listing, run_child, settle

DB = "ledger.sqlite3"
NOBODY = 65534

needs_root = pytest.mark.usefixtures("root")  # chown to another uid


def mode(path: Path) -> int:
    """The permission bits of ``path`` (not following a symlink)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


DISK_ERROR = r"(?i)disk|I/O|full|too large"


# --------------------------------------------------------------------------- full disk

# After the first claim the WAL may not grow by one byte more: every later commit
# must append frames to it, so each one meets EFBIG (SIGXFSZ ignored, as a server would).
FULL_DISK_SETUP = """
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
errors = []
class Keep(logging.Handler):
    def emit(self, record):
        errors.append(record.getMessage())
logging.getLogger("ledger").addHandler(Keep())

log = EffectLog(sys.argv[2], Path(sys.argv[1]))
claim(log, "e0")
wal = log.path.with_name(log.path.name + "-wal")
limit = wal.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
before = sizes(log.directory)
"""

FAILED_CLAIM_CHILD = """
result = {"limit": limit}
try:
    claim(log, "e1", "a-failed")
except EffectPersistenceError as e:
    result["error"] = str(e)
result["sizes_unchanged"] = sizes(log.directory) == before
result["claims"] = [c.effect_id for c in log.history().claims]
result["degraded"] = log.degraded
# Space comes back: the same effect id is free, at the next seq, because the failed
# claim exists nowhere.
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
result["retry_seq"] = claim(log, "e1", "a-retry").seq
log.close()
print(json.dumps(result))
"""


def test_claim_on_a_full_disk_raises_and_leaves_no_trace(store_dir: Path, run_id: str) -> None:
    """A claim that meets a full disk raises EffectPersistenceError and exists nowhere."""
    result = json.loads(run_child(FULL_DISK_SETUP + FAILED_CLAIM_CHILD, store_dir, run_id))
    assert result["limit"] > 0
    assert result["error"].startswith(f"cannot record claim 'e1' in run {run_id}")
    assert re.search(DISK_ERROR, result["error"]), result["error"]
    assert result["sizes_unchanged"], "not one byte of the failed claim reached a file"
    assert result["claims"] == ["e0"]
    assert result["degraded"] is False
    assert result["retry_seq"] == 2

    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
    assert effect_ids(history) == ["e0", "e1"]
    assert [c.action_id for c in history.claims] == ["a-e0", "a-retry"]
    assert [r.seq for r in history.records()] == [1, 2]


DEGRADED_CHILD = """
result = {"limit": limit}
outcome = log.outcome(effect_id="e0", execution=fx.ExecutionOutcome.REPORTED_SUCCESS,
                      impact=fx.Impact.CERTAIN)
result["degraded"] = log.degraded
result["errors"] = errors
result["outcome_in_history"] = outcome in log.history().outcomes
result["assessed_execution"] = log.assess("e0").execution.value
observation = log.observe(observation_id="o1", resource=REF,
                          mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
                          coverage=fx.Coverage.COMPLETE, source_action_id="a-check", exists=True)
result["observation_in_history"] = observation in log.history().observations
# Degraded is sticky: with space back, the log still refuses to start an effect.
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
refused = []
for attempt in (lambda: claim(log, "e1"), log.recover_interrupted):
    try:
        attempt()
    except EffectPersistenceError as e:
        refused.append(str(e))
result["refused"] = refused
result["claims"] = [c.effect_id for c in log.history().claims]
result["sizes_unchanged"] = sizes(log.directory) == before
print(json.dumps(result), flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
log.close()
"""


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_outcome_on_a_full_disk_degrades_the_log(store_dir: Path, run_id: str, ending: str) -> None:
    """An outcome that meets a full disk degrades the log: kept in memory, never durable success."""
    killed = signal.SIGKILL if ending == "kill" else None
    result = json.loads(
        run_child(FULL_DISK_SETUP + DEGRADED_CHILD, store_dir, run_id, ending, signal_exit=killed)
    )
    assert result["degraded"] is True
    assert len(result["errors"]) == 1
    assert re.search(DISK_ERROR, result["errors"][0]), result["errors"]
    assert result["outcome_in_history"] is True
    assert result["assessed_execution"] == "reported_success"
    assert result["observation_in_history"] is True
    assert len(result["refused"]) == 2
    assert all("degraded" in message for message in result["refused"])
    assert result["claims"] == ["e0"]
    assert result["sizes_unchanged"], "a degraded log writes nothing more"

    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
        assert effect_ids(history) == ["e0"]
        assert history.outcomes == history.observations == ()
        assessment = loaded.assess("e0")
        assert assessment.verdict is fx.EffectVerdict.PENDING
        assert assessment.execution is None
        (recovered,) = loaded.recover_interrupted()
        assert recovered.execution is fx.ExecutionOutcome.INTERRUPTED


FIRST_CLAIM_CHILD = """
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = Path(sys.argv[1])
log = EffectLog(sys.argv[2], store)
observation = log.observe(observation_id="o1", resource=REF,
                          mechanism=fx.ObservationMechanism.FILESYSTEM_STAT,
                          coverage=fx.Coverage.COMPLETE, source_action_id="a-look", exists=False)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
result = {}
try:
    claim(log, "e1")
except EffectPersistenceError as e:
    result["error"] = str(e)
result["claims"] = [c.effect_id for c in log.history().claims]
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
result["retry_seq"] = claim(log, "e1").seq
log.close()
print(json.dumps(result))
"""


@pytest.mark.parametrize("limit", [0, 60_000], ids=["no-byte", "mid-migration"])
def test_first_claim_on_a_full_disk_fails_cleanly_and_can_be_retried(
    store_dir: Path, run_id: str, limit: int
) -> None:
    """A first claim that cannot create the store raises; once space returns it succeeds whole."""
    result = json.loads(run_child(FIRST_CLAIM_CHILD, store_dir, run_id, limit))
    assert re.search(DISK_ERROR, result["error"]), result["error"]
    assert result["claims"] == []
    # The observation made before it is still unwritten, and goes in with the retried claim.
    assert result["retry_seq"] == 2

    with EffectLog.load(run_id, store_dir) as loaded:
        history = loaded.history()
    assert [o.observation_id for o in history.observations] == ["o1"]
    assert effect_ids(history) == ["e1"]
    assert [r.seq for r in history.records()] == [1, 2]


# --------------------------------------------------------------------------- store is not a directory


def test_store_directory_that_is_a_file_is_refused(tmp_path: Path, run_id: str) -> None:
    """A store path that is a regular file makes claim and load raise, and creates nothing."""
    store = tmp_path / "store"
    store.write_bytes(b"not a directory\n")
    with EffectLog(run_id, store) as log:
        with pytest.raises(EffectPersistenceError, match="not a directory"):
            claim_small(log, "e1")
        assert log.history() == fx.History((), (), ())
    with pytest.raises(EffectPersistenceError):
        EffectLog.load(run_id, store)
    assert listing(tmp_path) == ["store"]
    assert store.read_bytes() == b"not a directory\n"


def test_store_under_a_file_is_refused(tmp_path: Path, run_id: str) -> None:
    """A store whose parent path is a regular file makes claim raise EffectPersistenceError."""
    (tmp_path / "file").write_bytes(b"x")
    with EffectLog(run_id, tmp_path / "file" / "store") as log:
        with pytest.raises(EffectPersistenceError):
            claim_small(log, "e1")
        assert log.history() == fx.History((), (), ())
    assert listing(tmp_path) == ["file"]


# --------------------------------------------------------------------------- hard links


@pytest.mark.parametrize("suffix", ["", "-wal"], ids=["database", "wal"])
def test_hard_link_added_after_first_claim_is_refused(
    store_dir: Path, run_id: str, tmp_path: Path, suffix: str
) -> None:
    """A hard link to a store file made after the first claim fails the next claim, degrades, refuses load."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        target = store_dir / f"{DB}{suffix}"
        os.link(target, tmp_path / "stolen")
        assert os.stat(target).st_nlink == 2

        with pytest.raises(EffectPersistenceError, match="hard links"):
            claim_small(log, "e2")
        assert effect_ids(log.history()) == ["e1"]
        with pytest.raises(EffectPersistenceError, match="hard links"):
            log.recover_interrupted()
        assert log.degraded is False  # a failed claim or recovery raises; it does not degrade

        outcome = settle(log, "e1")  # does not raise
        assert log.degraded is True
        assert log.history().outcomes == (outcome,)
        with pytest.raises(EffectPersistenceError, match="hard links"):
            EffectLog.load(run_id, store_dir)
    if suffix == "":
        with pytest.raises(EffectPersistenceError, match="hard links"):
            EffectLog.load(run_id, store_dir)

    (tmp_path / "stolen").unlink()
    with EffectLog.load(run_id, store_dir) as loaded:
        assert effect_ids(loaded.history()) == ["e1"]
        assert loaded.history().outcomes == ()
        assert loaded.assess("e1").verdict is fx.EffectVerdict.PENDING


# --------------------------------------------------------------------------- symlinks


@pytest.fixture
def real_store(tmp_path: Path) -> tuple[Path, str]:
    """A closed store with one claim, and its run id."""
    store = tmp_path / "real"
    run_id = new_run_id()
    with EffectLog(run_id, store) as log:
        claim_small(log, "e1")
    return store, run_id


def test_symlinked_store_directory_is_refused(real_store: tuple[Path, str], tmp_path: Path) -> None:
    """A store directory that is a symlink to a real store is refused at load and at claim."""
    store, run_id = real_store
    before = (store / DB).read_bytes()
    link = tmp_path / "link"
    link.symlink_to(store, target_is_directory=True)

    with pytest.raises(EffectPersistenceError, match="is a symlink"):
        EffectLog.load(run_id, link)
    with EffectLog(new_run_id(), link) as log:
        with pytest.raises(EffectPersistenceError, match="is a symlink"):
            claim_small(log, "e1")
        assert log.history().claims == ()
    assert sorted(os.listdir(store)) == ["ledger.lock", DB]  # the lock file is the writer's
    assert (store / DB).read_bytes() == before


def test_symlinked_database_file_is_refused(real_store: tuple[Path, str], tmp_path: Path) -> None:
    """A database file that is a symlink to a real store's database is refused at load and claim."""
    store, run_id = real_store
    before = (store / DB).read_bytes()
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / DB).symlink_to(store / DB)

    with pytest.raises(EffectPersistenceError, match="is a symlink"):
        EffectLog.load(run_id, other)
    with EffectLog(new_run_id(), other) as log:
        with pytest.raises(EffectPersistenceError, match="is a symlink"):
            claim_small(log, "e1")
        assert log.history().claims == ()
    assert os.listdir(other) == [DB]
    assert sorted(os.listdir(store)) == ["ledger.lock", DB]  # the lock file is the writer's
    assert (store / DB).read_bytes() == before


def test_dangling_symlinks_are_refused_and_not_followed(tmp_path: Path, run_id: str) -> None:
    """A store directory or database symlink pointing nowhere is refused; its target is not created."""
    dir_link = tmp_path / "dir-link"
    dir_link.symlink_to(tmp_path / "missing-dir", target_is_directory=True)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / DB).symlink_to(tmp_path / "missing.sqlite3")

    for store in (dir_link, other):
        with pytest.raises(EffectPersistenceError, match="is a symlink"):
            EffectLog.load(run_id, store)
        with (
            EffectLog(run_id, store) as log,
            pytest.raises(EffectPersistenceError, match="is a symlink"),
        ):
            claim_small(log, "e1")
    assert listing(tmp_path) == ["dir-link", "other", f"other/{DB}"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_planted_wal_or_shm_symlink_is_refused_and_its_target_untouched(
    real_store: tuple[Path, str], tmp_path: Path, suffix: str
) -> None:
    """A -wal or -shm symlink planted in a closed store is refused; the file it names is untouched."""
    store, run_id = real_store
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (store / f"{DB}{suffix}").symlink_to(victim)

    with pytest.raises(EffectPersistenceError, match="is a symlink"):
        EffectLog.load(run_id, store)
    with (
        EffectLog(new_run_id(), store) as log,
        pytest.raises(EffectPersistenceError, match="is a symlink"),
    ):
        claim_small(log, "e1")
    assert victim.read_bytes() == b"precious\n"


# --------------------------------------------------------------------------- foreign owners


@needs_root
@pytest.mark.parametrize("suffix", ["", "-wal"], ids=["database", "wal"])
def test_file_owned_by_another_uid_is_refused(store_dir: Path, run_id: str, suffix: str) -> None:
    """A store file chowned to another uid is refused at load and at the next write."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        os.chown(store_dir / f"{DB}{suffix}", NOBODY, NOBODY)

        with pytest.raises(EffectPersistenceError, match="owned by uid 65534"):
            claim_small(log, "e2")
        with pytest.raises(EffectPersistenceError, match="owned by uid 65534"):
            EffectLog.load(run_id, store_dir)
        settle(log, "e1")  # does not raise
        assert log.degraded is True
        assert effect_ids(log.history()) == ["e1"]
    if suffix == "":
        with pytest.raises(EffectPersistenceError, match="owned by uid 65534"):
            EffectLog.load(run_id, store_dir)


@needs_root
def test_store_directory_owned_by_another_uid_is_refused(store_dir: Path, run_id: str) -> None:
    """A store directory chowned to another uid is refused at load and at the next write."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        os.chown(store_dir, NOBODY, NOBODY)
        with pytest.raises(EffectPersistenceError, match="owned by uid 65534"):
            claim_small(log, "e2")
    with pytest.raises(EffectPersistenceError, match="owned by uid 65534"):
        EffectLog.load(run_id, store_dir)


# --------------------------------------------------------------------------- permissions

PERMISSIONS_CHILD = """
os.umask(0)
store = Path(sys.argv[1])
with EffectLog(sys.argv[2], store) as log:
    claim(log, "e1")
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in [store, *store.iterdir()]}
print(json.dumps(modes))
"""


def test_store_files_are_private_even_with_umask_zero(store_dir: Path, run_id: str) -> None:
    """Under umask 0 the store directory is created 0700 and the database, -wal and -shm 0600."""
    modes = json.loads(run_child(PERMISSIONS_CHILD, store_dir, run_id))
    assert modes == {
        "store": "0o700",
        DB: "0o600",
        f"{DB}-wal": "0o600",
        f"{DB}-shm": "0o600",
        "ledger.lock": "0o600",
    }
    assert mode(store_dir) == 0o700
    assert mode(store_dir / DB) == 0o600


def test_missing_ancestors_of_a_new_store_are_private_too(tmp_path: Path, run_id: str) -> None:
    """Under umask 0, directories created on the way to a new store are 0700, not 0777."""
    store = tmp_path / "state" / "deep" / "store"
    run_child(PERMISSIONS_CHILD, store, run_id)
    assert mode(tmp_path / "state") == 0o700
    assert mode(tmp_path / "state" / "deep") == 0o700
    assert mode(store) == 0o700


# --------------------------------------------------------------------------- sensitive paths


def test_resolve_refuses_paths_inside_an_opened_store(tmp_path: Path, run_id: str) -> None:
    """FilesystemResource.resolve refuses, as sensitive, any path in a store this process opened."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    root = FilesystemRoot.seal(sandbox)
    (sandbox / "notes.txt").write_text("hello")
    with EffectLog(run_id, sandbox / "store") as log:
        claim_small(log, "e1")
        (sandbox / "alias").symlink_to(sandbox / "store", target_is_directory=True)
        for path in ("store", f"store/{DB}", f"store/{DB}-wal", str(log.path), f"alias/{DB}"):
            with pytest.raises(ValueError, match="sensitive"):
                FilesystemResource.resolve(root, path)
        with pytest.raises(ValueError, match="sensitive"):
            FilesystemResource.resolve(root, "store/new.txt", allow_missing=True)
    # Still sensitive after the log is closed, and the rest of the sandbox is not.
    with pytest.raises(ValueError, match="sensitive"):
        FilesystemResource.resolve(root, f"store/{DB}")
    assert FilesystemResource.resolve(root, "notes.txt").path == sandbox.resolve() / "notes.txt"


def test_resolve_refuses_paths_inside_a_loaded_store(tmp_path: Path, run_id: str) -> None:
    """A store opened only by load (even one that does not exist yet) is sensitive too."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    root = FilesystemRoot.seal(sandbox)
    with EffectLog.load(run_id, sandbox / "loaded"):
        pass
    with pytest.raises(ValueError, match="sensitive"):
        FilesystemResource.resolve(root, f"loaded/{DB}", allow_missing=True)


def test_resolve_refuses_paths_inside_effects_dir(tmp_path: Path) -> None:
    """FilesystemResource.resolve refuses, as sensitive, a path inside effects_dir(); sealing its parent is refused."""
    default = effects_dir()
    default.mkdir(parents=True)
    (default / DB).write_bytes(b"")
    # A root holding the default store would hand the store to the agent's tools.
    with pytest.raises(
        ValueError, match=re.escape(f"sensitive: it contains the ledger store {default}")
    ):
        FilesystemRoot.seal(default.parent)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    root = FilesystemRoot.seal(sandbox)
    with pytest.raises(ValueError, match="sensitive"):
        FilesystemResource.resolve(root, default / DB)
    with pytest.raises(ValueError, match="sensitive"):
        FilesystemResource.resolve(root, default)
