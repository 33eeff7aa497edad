"""Liveness: a run is in use while a live process holds its lock, whatever its pid.

Real processes hold and lose real locks: children that load, claim or recover a run,
SIGKILLed ones, forked ones. Nothing about the lock is mocked.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.sqlite import liveness as _liveness
from tests.builders import PYTHON, op, subprocess_env

TIMEOUT = 60

# One child process that does one thing to a run, says so on one JSON line, then waits
# for its stdin to close (or for SIGKILL) before it exits.
CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from ledger.sqlite import liveness as _liveness
    from ledger import effects as fx
    from ledger.effect_log import EffectLog, EffectPersistenceError

    what, store, run_id = sys.argv[1:4]
    op = fx.OperationRef("write_file", "test/1", "0" * 64)
    keep = None
    try:
        if what == "load":
            keep = EffectLog.load(run_id, store)
            answer = {"claims": [c.effect_id for c in keep.history().claims]}
        elif what == "claim":
            keep = EffectLog(run_id, store)
            keep.claim(effect_id="e-child", action_id="a-child", operation=op, impact_scope=())
            answer = {"claimed": True}
        elif what == "exclusive":
            keep = _liveness.hold(Path(store), run_id, _liveness.Mode.EXCLUSIVE)
            answer = {"held": keep is not None}
        elif what == "recover":
            with EffectLog.load(run_id, store) as log:
                answer = {"recovered": [o.effect_id for o in log.recover_interrupted()]}
        else:
            raise SystemExit(f"unknown {what}")
    except EffectPersistenceError as e:
        answer = {"error": str(e)}
    print(json.dumps(answer), flush=True)
    sys.stdin.read()
    """
)


class Child:
    """A child process doing one thing to a run; ``answer`` is what it said."""

    def __init__(self, what: str, store: Path, run_id: str) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, "-c", CHILD, what, str(store), run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"child {what} said nothing (exit {self.proc.wait(timeout=TIMEOUT)})"
        self.answer: dict[str, object] = json.loads(line)

    def finish(self) -> int:
        """Let the child exit; its return code."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.proc.wait(timeout=TIMEOUT)

    def kill(self) -> None:
        """SIGKILL the child and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL


@pytest.fixture
def spawn() -> Iterator[type[Child]]:
    """Start children; every one still running is killed and reaped at the end."""
    started: list[Child] = []

    class Tracked(Child):
        def __init__(self, what: str, store: Path, run_id: str) -> None:
            super().__init__(what, store, run_id)
            started.append(self)

    yield Tracked
    for child in started:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait(timeout=TIMEOUT)
        for stream in (child.proc.stdin, child.proc.stdout):
            if stream is not None:
                stream.close()


def _claim(log: EffectLog, effect_id: str) -> None:
    log.claim(effect_id=effect_id, action_id=f"a-{effect_id}", operation=op(), impact_scope=())


def _orphan(store: Path, run_id: str) -> None:
    """A closed run with one claim that never got an outcome."""
    with EffectLog(run_id, store) as log:
        _claim(log, "e1")


# --------------------------------------------------------------------------- shared holds


def test_a_live_writer_keeps_another_process_from_recovering_its_run(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """While this process has the run open, a child can load it but its recovery is refused."""
    with EffectLog(run_id, store_dir) as log:
        _claim(log, "e1")
        child = spawn("recover", store_dir, run_id)
        assert "another live process has it loaded" in str(child.answer["error"])
        assert child.finish() == 0
        reader = spawn("load", store_dir, run_id)
        assert reader.answer == {"claims": ["e1"]}
        reader.finish()
    with EffectLog.load(run_id, store_dir) as again:
        assert again.history().outcomes == ()


def test_a_loaded_run_that_was_never_written_is_not_recovered(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child that only loaded a run holds it: recovery is refused until the child is SIGKILLed."""
    _orphan(store_dir, run_id)
    holder = spawn("load", store_dir, run_id)
    assert holder.answer == {"claims": ["e1"]}
    with EffectLog.load(run_id, store_dir) as log, pytest.raises(EffectPersistenceError) as e:
        log.recover_interrupted()
    assert "another live process has it loaded" in str(e.value)
    holder.kill()
    with EffectLog.load(run_id, store_dir) as log:
        assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]


def test_a_sigkilled_writer_leaves_its_run_to_recovery(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child that claimed and was SIGKILLed holds nothing: another process recovers its claim."""
    _orphan(store_dir, new_run_id())  # the store exists before the child writes
    writer = spawn("claim", store_dir, run_id)
    assert writer.answer == {"claimed": True}
    refused = spawn("recover", store_dir, run_id)
    assert "another live process has it loaded" in str(refused.answer["error"])
    writer.kill()
    recovered = spawn("recover", store_dir, run_id)
    assert recovered.answer == {"recovered": ["e-child"]}


def test_a_log_loaded_only_to_read_does_not_stop_a_writer(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A child holding the run to read it does not keep this process from writing to it."""
    _orphan(store_dir, run_id)
    reader = spawn("load", store_dir, run_id)
    with EffectLog.load(run_id, store_dir) as log:
        _claim(log, "e2")
        log.outcome(effect_id="e2", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert not log.degraded
    reader.finish()
    with EffectLog.load(run_id, store_dir) as log:
        assert [c.effect_id for c in log.history().claims] == ["e1", "e2"]


def test_closing_one_of_two_logs_of_a_run_keeps_the_run_held(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Two logs of one run in one process: the run stays held until both are closed."""
    _orphan(store_dir, run_id)
    first = EffectLog.load(run_id, store_dir)
    with EffectLog.load(run_id, store_dir):
        pass
    with EffectLog(new_run_id(), store_dir) as other:  # another run of the same lock file
        _claim(other, "x")
    try:
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        first.close()
    assert spawn("recover", store_dir, run_id).answer == {"recovered": ["e1"]}


def test_two_paths_to_one_store_share_its_locks(
    store_dir: Path, run_id: str, tmp_path: Path, spawn: type[Child]
) -> None:
    """Closing a log opened through a symlinked parent keeps the run held by a log opened directly."""
    _orphan(store_dir, run_id)
    alias = tmp_path / "alias"
    alias.symlink_to(store_dir.parent)
    first = EffectLog.load(run_id, store_dir)
    try:
        with EffectLog.load(run_id, alias / store_dir.name):
            pass
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        first.close()


def test_a_log_dropped_without_close_releases_its_run(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A log that is garbage holds nothing: its run can be recovered by another process."""
    _orphan(store_dir, run_id)
    log = EffectLog.load(run_id, store_dir)
    assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    del log
    gc.collect()
    assert spawn("recover", store_dir, run_id).answer == {"recovered": ["e1"]}


# --------------------------------------------------------------------------- recovery holds


def test_a_write_while_another_process_recovers_the_run_fails_and_loses_nothing(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Loaded while a child holds the run for recovery: a claim raises, an outcome degrades, nothing lands."""
    with EffectLog(run_id, store_dir) as log:
        _claim(log, "e1")
        before = log.history()
    recoverer = spawn("exclusive", store_dir, run_id)
    assert recoverer.answer == {"held": True}
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == before  # reading is fine
        with pytest.raises(EffectPersistenceError) as e:
            _claim(log, "e2")
        assert f"another process was recovering run {run_id}" in str(e.value)
        log.outcome(effect_id="e1", execution=fx.ExecutionOutcome.FAILED, impact=fx.Impact.NONE)
        assert log.degraded
        assert len(log.history().outcomes) == 1  # kept in memory, not lost
    fresh = EffectLog(run_id, store_dir)  # a log that never loaded: refused all the same
    with pytest.raises(EffectPersistenceError) as e:
        _claim(fresh, "e3")
    assert f"another process is recovering run {run_id}" in str(e.value)
    fresh.close()
    recoverer.finish()
    with EffectLog.load(run_id, store_dir) as log:
        assert log.history() == before


def test_a_run_held_for_recovery_in_this_process_is_shared_by_its_logs(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """Recovery here converts the process's hold to exclusive and back: children see both."""
    _orphan(store_dir, run_id)
    with _liveness.recovering(store_dir, run_id) as claim:
        assert claim is _liveness.Claim.TAKEN
        reader = spawn("load", store_dir, run_id)
        assert reader.answer == {"claims": ["e1"]}  # loads; its hold is missed
        with EffectLog.load(run_id, store_dir) as log:
            assert [o.effect_id for o in log.recover_interrupted()] == ["e1"]
            assert spawn("exclusive", store_dir, run_id).answer == {"held": False}
        with _liveness.recovering(store_dir, run_id) as again:  # nested: still ours
            assert again is _liveness.Claim.TAKEN
    assert spawn("exclusive", store_dir, run_id).answer == {"held": True}


def test_recovering_tells_another_recoverer_from_a_user(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """A run another process recovers is RECOVERING; one another process merely holds is IN_USE."""
    _orphan(store_dir, run_id)
    user = spawn("load", store_dir, run_id)
    with _liveness.recovering(store_dir, run_id) as claim:
        assert claim is _liveness.Claim.IN_USE
    user.finish()
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from ledger.sqlite import liveness as _liveness
        with _liveness.recovering(Path(sys.argv[1]), sys.argv[2]) as claim:
            print(claim.name, flush=True)
            sys.stdin.read()
        """
    )
    other = subprocess.Popen(
        [PYTHON, "-c", script, str(store_dir), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert other.stdout is not None
        assert other.stdout.readline() == "TAKEN\n"
        with _liveness.recovering(store_dir, run_id) as claim:
            assert claim is _liveness.Claim.RECOVERING
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=TIMEOUT)
        other.stdout.close()  # type: ignore[union-attr]  # asserted above


# --------------------------------------------------------------------------- fork


def test_a_forked_child_does_not_think_it_holds_its_parents_lock(
    store_dir: Path, run_id: str, spawn: type[Child]
) -> None:
    """In a forked child the parent's lease is void and the run is the parent's; the parent keeps it."""
    _orphan(store_dir, run_id)
    log = EffectLog.load(run_id, store_dir)
    try:
        lease = log._lease
        assert lease is not None
        assert lease.held
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            try:
                report = {
                    "lease_held": lease.held,
                    "exclusive": _liveness.hold(store_dir, run_id, _liveness.Mode.EXCLUSIVE)
                    is not None,
                }
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            report = json.loads(pipe.read())
        assert os.waitpid(pid, 0)[1] == 0
        assert report == {"lease_held": False, "exclusive": False}
        # The child closed its copy of the lock file's descriptor: the parent's lock stays.
        assert lease.held
        assert "another live process" in str(spawn("recover", store_dir, run_id).answer["error"])
    finally:
        log.close()


# --------------------------------------------------------------------------- trust


def _store(store_dir: Path, run_id: str) -> Path:
    _orphan(store_dir, run_id)
    gc.collect()  # no lease of this process keeps the lock file open
    return store_dir / _liveness.LOCK_NAME


def _refused(store_dir: Path, run_id: str) -> str:
    with pytest.raises(EffectPersistenceError) as e:
        EffectLog.load(run_id, store_dir)
    message = str(e.value)
    assert "\n" not in message
    assert str(store_dir / _liveness.LOCK_NAME) in message
    return message


def test_the_lock_file_is_created_private(store_dir: Path, run_id: str) -> None:
    """The lock file is a regular file of this user, mode 0600, created with the store."""
    lock = _store(store_dir, run_id)
    st = lock.lstat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_nlink) == (0o600, os.geteuid(), 1)


def test_a_symlinked_lock_file_is_refused(store_dir: Path, run_id: str, tmp_path: Path) -> None:
    """A lock file that is a symlink is refused, even one pointing at a good file."""
    lock = _store(store_dir, run_id)
    elsewhere = tmp_path / "elsewhere"
    lock.rename(elsewhere)
    lock.symlink_to(elsewhere)
    assert "is a symlink" in _refused(store_dir, run_id)


def test_a_hard_linked_lock_file_is_refused(store_dir: Path, run_id: str, tmp_path: Path) -> None:
    """A lock file with a second hard link (someone may hold it under another name) is refused."""
    lock = _store(store_dir, run_id)
    os.link(lock, tmp_path / "twin")
    assert "2 hard links" in _refused(store_dir, run_id)


def test_a_lock_file_others_can_write_is_refused(store_dir: Path, run_id: str) -> None:
    """A group- or world-writable lock file is refused."""
    lock = _store(store_dir, run_id)
    lock.chmod(0o620)
    assert "writable by others" in _refused(store_dir, run_id)


def test_a_lock_file_that_is_a_directory_is_refused(store_dir: Path, run_id: str) -> None:
    """A directory in the lock file's place is refused."""
    lock = _store(store_dir, run_id)
    lock.unlink()
    lock.mkdir()
    message = _refused(store_dir, run_id)
    assert "not a regular file" in message or "Is a directory" in message


@pytest.mark.usefixtures("root")  # only root can give a file to another user
def test_a_lock_file_of_another_user_is_refused(store_dir: Path, run_id: str) -> None:
    """A lock file owned by another user than the store's is refused."""
    lock = _store(store_dir, run_id)
    os.chown(lock, 65534, 65534)
    assert "owned by uid 65534" in _refused(store_dir, run_id)


def test_a_refused_lock_file_fails_a_new_runs_first_claim(store_dir: Path, run_id: str) -> None:
    """A new run on a store with a bad lock file cannot claim: the claim says why, in one line."""
    lock = _store(store_dir, run_id)
    lock.chmod(0o666)
    with EffectLog(new_run_id(), store_dir) as log, pytest.raises(EffectPersistenceError) as e:
        _claim(log, "e1")
    assert "writable by others" in str(e.value)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- network file systems

MOUNTINFO = textwrap.dedent(
    """\
    22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
    40 22 0:35 / /mnt/shared rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
    41 22 0:36 / /mnt/with\\040space rw,relatime - cifs //server/share rw
    42 40 8:2 / /mnt/shared/local rw,relatime - ext4 /dev/sdb1 rw
    """
)


@pytest.mark.parametrize(
    ("directory", "kind"),
    [
        ("/home/me/.local/state/ledger", "ext4"),
        ("/mnt/shared/ledger", "nfs4"),
        ("/mnt/shared", "nfs4"),
        ("/mnt/sharedness/ledger", "ext4"),
        ("/mnt/with space/ledger", "cifs"),
        ("/mnt/shared/local/ledger", "ext4"),
    ],
)
def test_the_file_system_of_a_store_is_read_from_mountinfo(directory: str, kind: str) -> None:
    """The deepest mount holding the directory gives its type (escaped spaces decoded)."""
    assert _liveness.file_system(Path(directory), MOUNTINFO) == kind


def test_a_store_on_a_network_file_system_is_refused() -> None:
    """A store on NFS or CIFS is refused with one line saying to keep it on a local disk."""
    for directory in ("/mnt/shared/ledger", "/mnt/with space/ledger"):
        with pytest.raises(EffectPersistenceError) as e:
            _liveness.refuse_network_fs(Path(directory), MOUNTINFO)
        assert "keep the store on a local disk" in str(e.value)
        assert directory in str(e.value)
    _liveness.refuse_network_fs(Path("/mnt/shared/local/ledger"), MOUNTINFO)


def test_this_machines_temporary_store_is_local(store_dir: Path) -> None:
    """The test's own store is on a file system this machine's kernel locks."""
    store_dir.mkdir()
    kind = _liveness.file_system(store_dir)
    assert kind is not None
    assert kind not in _liveness.NETWORK_FS
