"""A store on a FUSE file system: what the kernel does not see, the store still checks.

A FUSE server may change a file without the kernel's knowledge (a passthrough whose
directory others write directly, a file system shared by hosts), so inotify, which the
store uses to skip re-checking its files between writes, reports nothing. On such a file
system every write checks the files whole. The FUSE layer of the power tier changes a
mode behind the kernel's back, as such a server would. The store's locks, which tell a
live worker from a dead one, are the kernel's there, and work.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, new_run_id
from ledger.errors import StoreFileRefusedError
from tests.builders import PYTHON, claim_small, ledger, subprocess_env
from tests.power.layer import Mount
from tests.reliability.test_liveness import WORKER

pytestmark = pytest.mark.program  # the layer's server is a child Python


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    """A mounted layer; unmounted at the end."""
    layer = Mount(tmp_path / "disk", tmp_path / "mnt", "drop", "store-on-fuse")
    layer.start()
    try:
        yield layer
    finally:
        layer.stop()


def test_a_change_behind_the_kernel_is_seen_by_the_next_write(mount: Mount) -> None:
    """A database file made writable by others in the FUSE server is refused at the next claim."""
    store = mount.mountpoint / "store"
    with EffectLog(new_run_id(), store) as log:
        claim_small(log, "e1")
        claim_small(log, "e2")  # the files checked, and quiet since
        mount.chmod_behind("/store/ledger.sqlite3", 0o666)
        with pytest.raises(StoreFileRefusedError, match=r"mode 0666"):
            claim_small(log, "e3")
        assert [c.effect_id for c in log.history().claims] == ["e1", "e2"]


def test_a_live_writer_on_fuse_holds_its_run(mount: Mount) -> None:
    """The store's locks work on the layer: a live worker's run is left alone, recovered once it is killed."""
    store = mount.mountpoint / "store"
    run_id = new_run_id()
    worker = subprocess.Popen(
        [PYTHON, "-c", WORKER, str(store), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    assert worker.stdout is not None
    try:
        assert json.loads(worker.stdout.readline()) == {"pid": worker.pid}
        held = ledger("recover", "--dead", "--json", "--store", str(store))
        assert held.returncode == 0, held.stderr
        assert json.loads(held.stdout) == [
            {"run_id": run_id, "outcomes": [], "skipped": "a live process has it loaded"}
        ]
    finally:
        worker.kill()
        worker.communicate()
    after = ledger("recover", "--dead", "--json", "--store", str(store))
    assert after.returncode == 0, after.stderr
    (entry,) = json.loads(after.stdout)
    assert (entry["run_id"], entry["skipped"]) == (run_id, None)
    assert [o["effect_id"] for o in entry["outcomes"]] == ["e1"]
