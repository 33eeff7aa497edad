"""Between full checks, the kernel's notifications stand for the store's files: each change
that a full check would refuse is seen by the next write, and a store at work stays quiet.

Every change is made with the real system call; the inotify instance is the kernel's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog, EffectPersistenceError
from ledger.sqlite import watch
from tests.builders import PYTHON, REPO, claim_small, effect_ids, python_stdout, subprocess_env

DB = "ledger.sqlite3"


@pytest.fixture(autouse=True)
def _instances_to_be_had(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests need inotify instances: a few of this process's own, and the kernel's.

    A log an earlier test of this process left open keeps its store, and the store's
    instance, for as long as the process lives: with watch.MAX_INSTANCES such logs,
    every watch here would check whole and these tests fail for another test's leak.
    So each test here gets MAX_INSTANCES beyond those already held. The kernel's are the
    user's, shared with all its processes (other test workers and their children): when
    none is left, the test fails saying so, rather than on a watch that is never quiet.
    """
    monkeypatch.setattr(watch, "MAX_INSTANCES", watch._instances + watch.MAX_INSTANCES)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        limit = Path("/proc/sys/fs/inotify/max_user_instances").read_text().strip()
        pytest.fail(
            f"no inotify instance to be had ({errno.errorcode.get(ctypes.get_errno())}): "
            f"this user's {limit} (fs.inotify.max_user_instances) are held by its other processes"
        )
    os.close(fd)


# An earlier test, in the same process, that leaves logs open.
_LEAKING_TEST = textwrap.dedent(
    """
    from ledger.effect_log import EffectLog, new_run_id
    from ledger.sqlite import watch
    from tests.builders import claim_small

    KEPT = []  # still referenced, as by a fixture or a cache: never collected

    def test_leaves_logs_open(tmp_path):
        for i in range(watch.MAX_INSTANCES):
            KEPT.append(EffectLog(new_run_id(), tmp_path / str(i)))
            claim_small(KEPT[-1], "e1")
        assert watch._instances == watch.MAX_INSTANCES
    """
)


@pytest.mark.program
def test_logs_an_earlier_test_left_open_do_not_starve_these_tests(tmp_path: Path) -> None:
    """One pytest runs a test that leaks logs, then one of this module's: it still gets its watch."""
    (tmp_path / "test_leak.py").write_text(_LEAKING_TEST)
    result = subprocess.run(
        [
            *(PYTHON, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"),
            *(
                "-W",
                "ignore::pytest.PytestUnraisableExceptionWarning",
                "-W",
                "ignore::ResourceWarning",
            ),
            str(tmp_path / "test_leak.py"),
            f"{Path(__file__).relative_to(REPO)}::test_a_store_at_work_stays_quiet",
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout


def _watch_of(log: EffectLog) -> watch.Watch:
    return log._journal.store._watch  # type: ignore[union-attr]


def _link(store: Path, elsewhere: Path, name: str) -> Callable[[], None]:
    os.link(store / name, elsewhere / "stolen")
    return (elsewhere / "stolen").unlink


def _chmod(path: Path, mode: int) -> Callable[[], None]:
    before = os.lstat(path).st_mode & 0o777
    path.chmod(mode)
    return lambda: path.chmod(before)


CHANGES: dict[str, tuple[Callable[[Path, Path], Callable[[], None]], str]] = {
    "a hard link to the -shm": (lambda s, e: _link(s, e, f"{DB}-shm"), "hard links"),
    "a hard link to the -wal": (lambda s, e: _link(s, e, f"{DB}-wal"), "hard links"),
    "the database made group-writable": (lambda s, e: _chmod(s / DB, 0o620), "writable"),
    "the -wal made writable by others": (lambda s, e: _chmod(s / f"{DB}-wal", 0o602), "writable"),
    "the directory made group-writable": (lambda s, e: _chmod(s, 0o770), "writable"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_after_a_write_is_refused_by_the_next_one_then_mended(
    store_dir: Path, run_id: str, tmp_path: Path, change: str
) -> None:
    """What a full check refuses, made while the watch trusts the files, fails the next claim.

    Once it is undone, the next claim checks whole again, passes and trusts the files again.
    """
    make, refusal = CHANGES[change]
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        claim_small(log, "e2")
        assert _watch_of(log).quiet()  # the fast path is taken from here on
        undo = make(store_dir, tmp_path)
        assert not _watch_of(log).quiet()
        with pytest.raises(EffectPersistenceError, match=refusal):
            claim_small(log, "e3")
        with pytest.raises(EffectPersistenceError, match=refusal):  # not trusted since
            claim_small(log, "e3")
        undo()
        claim_small(log, "e4")
        assert _watch_of(log).quiet()
        assert effect_ids(log.history()) == ["e1", "e2", "e4"]


def test_a_store_at_work_stays_quiet(store_dir: Path, run_id: str) -> None:
    """Commits, reads and checkpoints raise nothing the watch acts on."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e0")
        for i in range(1, 40):
            claim_small(log, f"e{i}")
            assert _watch_of(log).quiet()
        with EffectLog.load(run_id, store_dir) as reader:
            assert len(reader.history().claims) == 40
        # A connection opened since may have raised one event: SQLite running as root
        # chowns the -wal it opens to the database's owner. The next write checks whole.
        claim_small(log, "e40")
        assert _watch_of(log).quiet()
        # A checkpoint that empties the -wal truncates it: a write, not an event.
        writer = log._journal.store._connection()  # type: ignore[union-attr]
        assert writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        assert (store_dir / f"{DB}-wal").stat().st_size == 0
        assert _watch_of(log).quiet()
        claim_small(log, "e41")
        assert _watch_of(log).quiet()


def test_a_file_put_in_the_directory_makes_the_next_write_check_whole(
    store_dir: Path, run_id: str
) -> None:
    """The directory's events count too: a new file (a planted -journal, say) is looked at."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        assert _watch_of(log).quiet()
        (store_dir / "planted").write_bytes(b"")
        assert not _watch_of(log).quiet()
        claim_small(log, "e2")  # nothing the check refuses: trusted again
        assert _watch_of(log).quiet()


def test_a_watch_that_cannot_be_had_leaves_every_check_whole(tmp_path: Path) -> None:
    """No descriptor left for an inotify instance (a real RLIMIT_NOFILE): never quiet.

    The block still runs, so the full check is made each time.
    """
    script = f"""
        import os, resource, sys
        from ledger.sqlite import watch
        w = watch.Watch()
        paths = [{str(tmp_path)!r}]
        with w.checking(paths):
            pass
        assert w.quiet(), "a watch that can be had is trusted after a passing check"
        w.close()
        fds = []
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        try:
            while True:
                fds.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        ran = 0
        for _ in range(3):
            with w.checking(paths):
                ran += 1
            assert not w.quiet()
        os.close(fds.pop())
        with w.checking(paths):
            ran += 1
        print(ran, w.quiet())
    """
    assert python_stdout(textwrap.dedent(script)).split() == ["4", "False"]


def test_a_forked_child_watches_afresh_and_leaves_the_parents_events(tmp_path: Path) -> None:
    """The child does not share the parent's instance: the parent still sees its change."""
    assert sys.platform == "linux"
    w = watch.Watch()
    target = tmp_path / "file"
    target.write_bytes(b"")
    paths = [str(tmp_path), str(target)]
    with w.checking(paths):
        pass
    assert w.quiet()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own instance, events read there
        try:
            os.close(read)
            quiet_at_start = w.quiet()
            with w.checking(paths):
                pass
            target.chmod(0o640)
            w.quiet()
            with w.checking(paths):  # reads (drops) the child's events
                pass
            os.write(write, b"%d" % quiet_at_start)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        assert answer.read() == "0"  # the child started without the parent's instance
    os.waitpid(pid, 0)
    assert not w.quiet()  # the chmod, seen by the parent's own instance
    w.close()


def test_a_watch_above_descriptor_1023_still_answers(tmp_path: Path) -> None:
    """A process with many files open gets a high descriptor, which select() would refuse."""
    script = f"""
        import os, resource
        from ledger.sqlite import watch
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, 2048))
        fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        w = watch.Watch()
        with w.checking([{str(tmp_path)!r}]):
            pass
        print(w._fd > 1023, w.quiet())
        os.chmod({str(tmp_path)!r}, 0o750)
        print(w.quiet())
    """
    assert python_stdout(textwrap.dedent(script)).split() == ["True", "True", "False"]


def _swap_in(store: Path, name: str, make: Callable[[Path], None]) -> None:
    """Put something new at ``name`` the way an attacker would: made aside, renamed in."""
    aside = store.parent / f"aside-{name}"
    make(aside)
    os.rename(aside, store / name)


def _copy_shared(database: Path) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(database.read_bytes())
        path.chmod(0o666)

    return make


RENAMES: dict[str, Callable[[Path], None]] = {
    "a symlink renamed over the -wal": lambda s: _swap_in(
        s, f"{DB}-wal", lambda p: p.symlink_to(s / DB)
    ),
    "another database renamed over the database": lambda s: _swap_in(s, DB, _copy_shared(s / DB)),
}


@pytest.mark.parametrize("change", list(RENAMES))
def test_a_file_renamed_in_is_checked_by_the_next_write(
    store_dir: Path, run_id: str, change: str
) -> None:
    """A name of the store that now names another file raises the directory's event."""
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e1")
        assert _watch_of(log).quiet()
        RENAMES[change](store_dir)
        assert not _watch_of(log).quiet()
        with pytest.raises(EffectPersistenceError):
            claim_small(log, "e2")


@pytest.mark.parametrize("level", ["the directory", "a directory above it"])
def test_a_store_path_left_naming_a_symlink_by_a_rename_is_refused(
    tmp_path: Path, run_id: str, level: str
) -> None:
    """The store's directory (or one above it) renamed away, a symlink put at the store's path."""
    store = tmp_path / "above" / "store"
    moved = store if level == "the directory" else store.parent
    with EffectLog(run_id, store) as log:
        claim_small(log, "e1")
        assert _watch_of(log).quiet()
        os.rename(moved, tmp_path / "elsewhere")
        if moved != store:
            moved.mkdir()
        store.symlink_to(tmp_path / "elsewhere" / ("store" if moved != store else ""))
        assert not _watch_of(log).quiet()
        with pytest.raises(EffectPersistenceError, match="symlink"):
            claim_small(log, "e2")


def test_a_change_right_after_the_checks_stats_is_seen_by_the_next_write(
    tmp_path: Path,
) -> None:
    """The watches are placed before the check reads the files, never after."""
    target = tmp_path / "file"
    target.write_bytes(b"")
    w = watch.Watch()
    with w.checking([str(tmp_path), str(target)]):
        assert os.lstat(target).st_nlink == 1  # the check's stat: passes
        os.link(target, tmp_path.parent / f"{tmp_path.name}-stolen")  # then the change
    assert not w.quiet()
    w.close()


def _writers_through(store: Any, trials: int, database: Path, aside: Path) -> int:
    """How many of 4 threads checking at once pass with a hard link made just before."""
    through: list[None] = []

    def writer(barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            store._check()
        except EffectPersistenceError:
            return
        through.append(None)

    for _ in range(trials):
        store._check()
        assert store._watch.quiet()
        os.link(database, aside)
        barrier = threading.Barrier(4)
        threads = [threading.Thread(target=writer, args=(barrier,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        aside.unlink()
    return len(through)


def test_writer_threads_never_pass_a_check_another_thread_is_draining(
    store_dir: Path, run_id: str, tmp_path: Path
) -> None:
    """Threads checking at once: none skips the check on a poll another one emptied."""
    interval = sys.getswitchinterval()
    with EffectLog(run_id, store_dir) as log:
        claim_small(log, "e0")
        sys.setswitchinterval(1e-5)  # threads switch often: an unlucky order comes soon
        try:
            through = _writers_through(log._journal.store, 500, store_dir / DB, tmp_path / "stolen")
        finally:
            sys.setswitchinterval(interval)
    assert through == 0


def test_instances_are_given_back_and_few_per_process(tmp_path: Path) -> None:
    """A process holds at most MAX_INSTANCES; a watch dropped unclosed gives its own back.

    In a process of its own, which holds no other watch.
    """
    script = f"""
        import gc, os
        from ledger.sqlite import watch

        def inotify_descriptors():
            links = [os.readlink(f"/proc/self/fd/{{fd}}") for fd in os.listdir("/proc/self/fd")
                     if os.path.exists(f"/proc/self/fd/{{fd}}")]
            return links.count("anon_inode:inotify")

        watches = [watch.Watch() for _ in range(watch.MAX_INSTANCES + 2)]
        for w in watches:
            with w.checking([{str(tmp_path)!r}]):
                pass
        print(sum(w.quiet() for w in watches), inotify_descriptors(), watch._instances)
        del w
        watches.clear()
        gc.collect()
        print(inotify_descriptors(), watch._instances)
    """
    lines = python_stdout(textwrap.dedent(script)).splitlines()
    most = watch.MAX_INSTANCES
    assert lines == [f"{most} {most} {most}", "0 0"]
