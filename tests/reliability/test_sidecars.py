"""Sidecar attacks by another uid: files planted beside root's database, and another user's store.

Another user (uid nobody, via setpriv) plants a ``-wal``, a hard-linked ``-shm`` or a
symlinked ``-shm`` in a store directory it can write. Root then reads the store with a
read command and writes it with a worker. Every file involved, inside the store and
outside it, is fingerprinted (owner, mode, links, bytes, mtime) before and after: reading
must change none of them and either be refused or read a private copy; writing must be
refused. The figures go on one ``reliability:`` line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.errors import StoreFileRefusedError
from tests.builders import PYTHON, REPO, fingerprint, ledger, run_python
from tests.reliability.figures import report
from tests.sqlite.trust_helpers import (
    DB,
    OTHER,
    OTHER_GROUP,
    SHM,
    WAL,
    as_other,
    build_store,
    other_uid,
    public_dir,
    setpriv,
)
from tests.sqlite.trust_helpers import WORKER as _WORKER

__all__ = ["public_dir"]  # a fixture, used by name

_figures: dict[str, int] = {"attacks": 0, "reads_refused": 0, "writes_refused": 0, "changed": 0}


def _write_as_root(directory: Path) -> subprocess.CompletedProcess[str]:
    """A root worker claiming one more effect in ``directory``."""
    return run_python(_WORKER, directory, "/sandbox/root.txt", "close")


def _plant_wal(directory: Path, public: Path) -> Path:
    """Nobody copies a crashed store's -wal (holding a forged run) beside root's database."""
    forged = public / "forged"
    build_store(forged, "/forged", crash=True)
    shutil.copyfile(forged / WAL, public / "forged.wal")
    os.chmod(public / "forged.wal", 0o644)
    result = as_other("cp", str(public / "forged.wal"), str(directory / WAL))
    assert result.returncode == 0, result.stderr
    return public / "forged.wal"


def _plant_linked_shm(directory: Path, public: Path) -> Path:
    """Nobody hard-links a file of its own as the store's -shm."""
    traps = public / "traps"
    if not traps.exists():
        traps.mkdir()
        traps.chmod(0o777)  # where nobody may make a file of its own
    own = traps / "nobodys-file"
    result = as_other(
        "sh", "-c", f"printf keep > {own} && chmod 600 {own} && ln {own} {directory / SHM}"
    )
    assert result.returncode == 0, result.stderr
    return own


def _plant_symlinked_shm(directory: Path, public: Path) -> Path:
    """Nobody symlinks the store's -shm to a file of root's."""
    victim = public / "roots-file"
    victim.write_bytes(b"root's own bytes")
    victim.chmod(0o644)
    result = as_other("ln", "-s", str(victim), str(directory / SHM))
    assert result.returncode == 0, result.stderr
    return victim


ATTACKS: dict[str, Callable[[Path, Path], Path]] = {
    "planted -wal": _plant_wal,
    "hard-linked -shm": _plant_linked_shm,
    "symlinked -shm": _plant_symlinked_shm,
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_root_refuses_a_store_another_user_could_plant_files_in(
    attack: str, public_dir: Path
) -> None:
    """In root's world-writable store directory, a file nobody planted makes root's reads and writes fail in one line, and no file inside or outside the store changes."""
    directory = public_dir / "store"
    run_id = build_store(directory)
    directory.chmod(0o777)
    outside = ATTACKS[attack](directory, public_dir)
    before = fingerprint(public_dir)
    _figures["attacks"] += 1
    for command in (["status", "--json"], ["show", run_id[:8]], ["verify"], ["sql", "SELECT 1"]):
        if command[0] == "sql" and shutil.which("sqlite3") is None:
            continue
        result = ledger(*command, "--store", str(directory))
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert "chmod go-w" in result.stderr, result.stderr
        _figures["reads_refused"] += 1
    written = _write_as_root(directory)
    assert written.returncode != 0
    assert StoreFileRefusedError.__name__ in written.stderr, written.stderr
    assert "chmod go-w" in written.stderr, written.stderr
    _figures["writes_refused"] += 1
    after = fingerprint(public_dir)
    _figures["changed"] += sum(before.get(k) != after.get(k) for k in {*before, *after})
    assert after == before
    assert str(outside) in after


@pytest.mark.parametrize("attack", ["hard-linked -shm", "symlinked -shm"])
def test_root_refuses_a_trap_in_another_users_own_store(attack: str, public_dir: Path) -> None:
    """In nobody's own store (0700), a -shm nobody made a hard link or symlink is refused by root's reads, and the file it points to keeps owner, mode, bytes and mtime."""
    directory = public_dir / "store"
    directory.mkdir(mode=0o700)
    os.chown(directory, other_uid(), -1)
    result = as_other(PYTHON, "-c", _WORKER, str(directory), "/sandbox/n.txt", "close")
    assert result.returncode == 0, result.stderr
    ATTACKS[attack](directory, public_dir)
    before = fingerprint(public_dir)
    _figures["attacks"] += 1
    refused = ledger("status", "--store", str(directory))
    assert refused.returncode == 1, refused.stderr
    assert "hard links" in refused.stderr or "symlink" in refused.stderr, refused.stderr
    _figures["reads_refused"] += 1
    assert fingerprint(public_dir) == before


def test_root_reads_another_users_live_store_from_a_copy_and_may_not_write_it(
    public_dir: Path,
) -> None:
    """Root reads a store nobody is writing (a live -wal and -shm) from a private copy, changing no file of it; root's writer is refused as not the owner."""
    directory = public_dir / "store"
    directory.mkdir(mode=0o700)
    os.chown(directory, other_uid(), -1)
    live = """
import hashlib, sys
from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
run_id = new_run_id()
log = EffectLog(run_id, sys.argv[1])
log.claim(effect_id="e", action_id="a", impact_scope=(),
          operation=fx.OperationRef("w", "t/1", hashlib.sha256(b"").hexdigest()))
print(run_id, flush=True)
sys.stdin.read()
log.close()
"""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [
            *(setpriv(), f"--reuid={OTHER}", f"--regid={OTHER_GROUP}", "--clear-groups"),
            *(PYTHON, "-c", live, str(directory)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as writer:
        assert writer.stdin is not None
        assert writer.stdout is not None
        try:
            run_id = writer.stdout.readline().strip()
            assert run_id, writer.stderr.read() if writer.stderr else ""
            before = fingerprint(public_dir)
            assert {Path(p).name for p in before} >= {DB, WAL, SHM}
            _figures["attacks"] += 1
            shown = ledger("status", "--json", "--store", str(directory))
            assert shown.returncode == 0, shown.stderr
            assert [r["run_id"] for r in json.loads(shown.stdout)] == [run_id]
            written = _write_as_root(directory)
            assert written.returncode != 0
            assert "not by this user" in written.stderr, written.stderr
            _figures["writes_refused"] += 1
            after = fingerprint(public_dir)
            _figures["changed"] += sum(before.get(k) != after.get(k) for k in {*before, *after})
            assert after == before
        finally:
            writer.stdin.close()
            writer.wait(timeout=60)


def test_report_the_sidecar_figures() -> None:
    """Print the figures of this module's attacks on one reliability: line."""
    report({"suite": "sidecars", **_figures})
    assert _figures["changed"] == 0
