"""A log dropped without ``close()``: what it held is given back, whatever thread drops it.

The garbage collector finalizes a dropped log in whichever thread allocates at that
moment, which may be inside the lock the release needs. Each test's child drops its log
while holding such a lock, as the collector may, and must go on.
"""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path

import pytest

from ledger.effect_log import new_run_id
from tests.builders import kill_children, ledger, start_child

pytestmark = pytest.mark.program

DROP = """
import gc, sys, time
from pathlib import Path
from ledger.effect_log import EffectLog
from ledger.sqlite import liveness, store as store_module, watch
from tests.builders import fs_ref, op

lock = {"liveness": liveness._registry_lock, "store": store_module._registry_lock}[sys.argv[3]]
log = EffectLog(sys.argv[1], Path(sys.argv[2]))
log.claim(effect_id="e1", action_id="a1", operation=op(), impact_scope=(fs_ref("/srv/out"),))
assert watch._instances == 1
with lock:  # as a thread the collector interrupts inside it would hold it
    del log
    gc.collect()
print("dropped", flush=True)
deadline = time.monotonic() + 60
while watch._instances and time.monotonic() < deadline:
    time.sleep(0.05)
print("store released" if not watch._instances else "store still held", flush=True)
sys.stdin.read()  # alive, so only a released hold lets the run be recovered
"""


def _line(child: subprocess.Popen[str], deadline: float = 120) -> str:
    """The child's next line; "" if it says nothing for ``deadline`` seconds (a hang)."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], deadline)
    return child.stdout.readline() if ready else ""


@pytest.mark.parametrize("held", ["liveness", "store"])
def test_a_log_dropped_inside_a_registry_lock_gives_back_its_run_and_store(
    tmp_path: Path, held: str
) -> None:
    """No deadlock; the run is free for another process's recovery, the store is closed."""
    store = tmp_path / "store"
    run_id = new_run_id()
    child = start_child(DROP, run_id, store, held)
    try:
        assert _line(child) == "dropped\n", kill_children([child])
        assert _line(child) == "store released\n", kill_children([child])
        # The child is alive: only its released hold lets recovery take the run.
        recovered = ledger("recover", "--dead", "--json", "--store", str(store))
        assert recovered.returncode == 0, recovered.stderr
        ((recovery,),) = ([r for r in json.loads(recovered.stdout) if r["run_id"] == run_id],)
        assert [o["effect_id"] for o in recovery["outcomes"]] == ["e1"]
    finally:
        kill_children([child])
