"""A directory above root's store, owned by another user, swapped while root reads the store.

Root's store lies in ``att/cur/store``, where ``att`` belongs to uid nobody. Nobody
keeps a store of its own in ``att/fake/store`` (a forged run, and a ``-shm`` hard-linked
to a file of root's) and, in a tight loop, exchanges ``cur`` and ``fake`` (one
``renameat2(RENAME_EXCHANGE)`` each time). Root meanwhile reads its store hundreds of
times with the reader API, and some times with ``ledger status``. A reader that checks
the store by path and lets SQLite open the path again may check root's files and open
nobody's: SQLite, run by root, then changes the owner and bytes of the linked file, and
the reader reports nobody's run as the store's. Neither may ever happen; root's writer
is refused such a path outright. The figures go on one ``reliability:`` line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import storage
from ledger.errors import EffectPersistenceError, StoreFileRefusedError
from tests.builders import PYTHON, fingerprint, ledger, run_python, subprocess_env
from tests.reliability.figures import report
from tests.sqlite.trust_helpers import (
    DB,
    OTHER,
    OTHER_GROUP,
    SHM,
    WAL,
    build_store,
    other_uid,
    public_dir,
    setpriv,
)
from tests.sqlite.trust_helpers import WORKER as _WORKER

__all__ = ["public_dir"]  # a fixture, used by name

pytestmark = pytest.mark.program

READS = 2000  # in-process reads while the path is swapped (most are refused, in about 1 ms)
COMMANDS = 4  # `ledger status` runs while it is swapped (each starts a Python)

# Nobody's swapper: exchanges ./cur and ./fake until its stdin closes; prints its count.
SWAPPER = """
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
swaps = 0
while not stop.is_set():
    if libc.renameat2(AT_FDCWD, b"cur", AT_FDCWD, b"fake", RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    swaps += 1
print(swaps, flush=True)
"""


def _victim_print(victim: Path) -> tuple[int, int, bytes]:
    st = os.lstat(victim)
    return st.st_uid, st.st_mode, victim.read_bytes()


def _stage(public: Path) -> tuple[Path, Path, str, str]:
    """Root's crashed store under nobody's ``att``, and nobody's trap beside it.

    Returns (root's store path, the victim file, root's run id, nobody's run id).
    """
    att = public / "att"
    real = att / "cur" / "store"
    att.mkdir()
    (att / "cur").mkdir()
    # Built while att is still root's: root's writer refuses it once nobody owns att.
    root_run = build_store(real, "/sandbox/root.txt", crash=True)
    assert {p.name for p in real.iterdir()} >= {DB, WAL, SHM}
    forged = public / "forged"
    forged_run = build_store(forged, "/sandbox/forged.txt", crash=True)
    fake = att / "fake" / "store"
    fake.mkdir(parents=True)
    for name in (DB, WAL):
        shutil.copyfile(forged / name, fake / name)
    victim = public / "victim"
    victim.write_bytes(b"root's own bytes, which no reader of a store may change\n")
    victim.chmod(0o644)
    # The trap's -shm is root's file. Root links it here for the test; with
    # fs.protected_hardlinks=0, or a file nobody may write, nobody could do it alone.
    os.link(victim, fake / SHM)
    uid = other_uid()
    for path in (att, att / "fake", fake, fake / DB, fake / WAL):
        os.chown(path, uid, -1)
    fake.chmod(0o700)
    att.chmod(0o755)
    return real, victim, root_run, forged_run


@pytest.fixture
def swapped(public_dir: Path) -> Iterator[tuple[Path, Path, str, str]]:
    """The staged paths, with nobody exchanging ``att/cur`` and ``att/fake`` meanwhile."""
    real, victim, root_run, forged_run = _stage(public_dir)
    env = subprocess_env() | {"HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    with subprocess.Popen(
        [
            *(setpriv(), f"--reuid={OTHER}", f"--regid={OTHER_GROUP}", "--clear-groups"),
            *(PYTHON, "-c", SWAPPER),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=real.parent.parent,
    ) as swapper:
        assert swapper.stdin is not None
        assert swapper.stdout is not None
        try:
            assert swapper.stdout.readline().strip() == "ready", swapper.stderr
            yield real, victim, root_run, forged_run
        finally:
            swapper.stdin.close()
            swaps = swapper.stdout.read().strip()
            assert swapper.wait(timeout=60) == 0, swapper.stderr
            _figures["swaps"] = int(swaps)


_figures: dict[str, int] = {
    "reads": 0,
    "reads_refused": 0,
    "commands": 0,
    "commands_refused": 0,
    "forged_rows_seen": 0,
    "victim_changed": 0,
    "swaps": 0,
}


def test_a_swapped_directory_above_roots_store_never_reaches_sqlite(
    swapped: tuple[Path, Path, str, str],
) -> None:
    """Hundreds of root's reads while nobody swaps a directory above the store: the linked file never changes, nobody's run is never reported, and the writer is refused."""
    real, victim, root_run, forged_run = swapped
    before = _victim_print(victim)
    reader = storage.backend(real).reader(real)
    for _ in range(READS):
        try:
            seen = [r.run_id for r in reader.runs()]
        except EffectPersistenceError:
            _figures["reads_refused"] += 1  # the check met nobody's files: refused
        else:
            _figures["forged_rows_seen"] += forged_run in seen
            assert seen == [root_run], seen
        _figures["reads"] += 1
        if _victim_print(victim) != before:
            _figures["victim_changed"] += 1
        assert _victim_print(victim) == before
    for _ in range(COMMANDS):
        shown = ledger("status", "--json", "--store", str(real))
        _figures["commands"] += 1
        assert "Traceback" not in shown.stderr, shown.stderr
        if shown.returncode != 0:
            assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
            _figures["commands_refused"] += 1
        else:
            assert [r["run_id"] for r in json.loads(shown.stdout)] == [root_run]
        assert _victim_print(victim) == before


def test_roots_writer_is_refused_a_path_another_user_could_swap(public_dir: Path) -> None:
    """With nobody's att above root's store (not swapped now), root's writer is refused in one line naming att, and no file changes."""
    real, victim, _, _ = _stage(public_dir)
    before = fingerprint(public_dir)
    written = run_python(_WORKER, real, "/sandbox/root.txt", "close")
    assert written.returncode != 0
    assert StoreFileRefusedError.__name__ in written.stderr, written.stderr
    assert f"lies under {real.parent.parent}, which is owned by uid" in written.stderr
    assert "move the store" in written.stderr
    assert fingerprint(public_dir) == before
    assert _victim_print(victim)[0] == 0


def test_report_the_swap_race_figures() -> None:
    """Print the figures of the race on one reliability: line."""
    report({"suite": "swap_race", **_figures})
    assert _figures["victim_changed"] == _figures["forged_rows_seen"] == 0
