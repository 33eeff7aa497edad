"""Power cuts: the crash loop's workers on the FUSE layer, losing whatever was never synced.

The crash loop of ``tests/reliability/test_crash_loop.py`` kills its workers; the kernel's
page cache survives that. Here the same harness runs its workers on a store inside the
FUSE layer of ``tests/power/layer.py``, and after every kill the power is cut too: the
layer keeps only what was synced (mode ``drop``), a random part of the rest (``torn``),
or, moreover, forgets directory entries never synced (``dirent``). The layer is mounted
again, and then, as after a kill: the store opens (a refusal must be an
``EffectPersistenceError``, counted), verifies (in the process, and with the ``ledger
verify`` command run in a child of the worker server), holds every acknowledged record,
recovers exactly the claims left open (a second recovery appending nothing), and the
next worker writes on it. Besides ``EffectLog`` calls, the workers make ``log.effect``
calls, acknowledging the claim from inside the body and the outcome after it.

The positive control runs the same workers with ``synchronous=OFF`` (through the store's
private switch that ``ledger bench`` uses for its scratch stores): there, acknowledged
records must be lost in every mode, or the layer would be proving nothing.

Profiles: 67 cuts per mode under plain pytest; 400 with ``LEDGER_RELIABILITY=long``.
``LEDGER_RELIABILITY_SEED`` replays the same choices (the cut moments depend on timing
too). Figures go to a ``reliability:`` line and to ``$LEDGER_RELIABILITY_REPORT``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from ledger.effect_log import EffectLog
from ledger.errors import EffectPersistenceError
from tests.builders import ledger
from tests.power.layer import MODES, Mount
from tests.reliability import test_crash_loop as crash_loop
from tests.reliability.figures import report

pytestmark = pytest.mark.program

LONG = crash_loop.LONG
SEED = crash_loop.SEED
CUTS = 400 if LONG else 67  # per mode: 201 in the three
STORE_LIVES = 25  # cuts per store: its verification stays cheap
CONTROL_LIVES = 20  # the most lives the control may take to lose an acknowledged record

# The crash loop's server, with a third kind of write (a log.effect call), the
# synchronous=OFF switch of the control, and requests that run the ledger command in a
# fork of the server (a fresh Python would cost a second per cut).
_EFFECT = """
        elif roll < 0.55:
            ident = f"e{nxt}"
            emit(ev="begin", run=r, kind="claim", id=ident, seq=nxt)
            execution = rng.choice(["reported_success", "failed"])
            # A scope of its own: a call touching the scope of an effect in doubt (one
            # recovered as interrupted) would rightly be refused.
            own = fx.ResourceRef("fs", f"/sandbox/calls/{run_id}/{ident}", "target")
            try:
                with log.effect(rng.choice(["write_file", "send_email"]),
                                args={"seq": nxt, "nonce": rng.random()},
                                effect_id=ident, impact_scope=[own]) as call:
                    emit(ev="ack", run=r, kind="claim", id=ident, seq=call.claim.seq)
                    started = True
                    nxt += 1
                    emit(ev="begin", run=r, kind="outcome", id=f"{ident}:{execution}",
                         seq=nxt)
                    if execution == "failed":
                        raise Refused(ident)
            except Refused:
                pass
            ident = f"{ident}:{execution}"
            record = Acked("outcome", nxt)
            durable = True
"""
_DEFINITIONS = '''
import ledger.cli
from ledger import storage

OFF = False

class Refused(Exception):
    """The body of a log.effect call failed: the outcome is FAILED."""

class Acked:
    def __init__(self, record_type, seq):
        self.record_type, self.seq = record_type, seq

def cli(request):
    out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    try:
        ledger.cli.main(args=request["argv"], prog_name="ledger")
    except SystemExit as stop:
        os._exit(stop.code if isinstance(stop.code, int) else 1)
    os._exit(0)

def work(request):
    if not OFF:
        return _work(request)
    store = Path(request["store"])
    with storage.backend(store).unsynchronised(store):
        return _work(request)

'''


def _script(off: bool) -> str:
    script = crash_loop.SERVER
    for anchor, replacement in (
        ("        elif roll < 0.7:\n", _EFFECT.lstrip("\n") + "        elif roll < 0.7:\n"),
        ("def work(request):", "def _work(request):"),
        ("def life(", _DEFINITIONS.replace("OFF = False", f"OFF = {off}") + "def life("),
        ("            work(request)\n", "            (cli if 'argv' in request else work)(request)\n"),
    ):  # fmt: skip
        assert script.count(anchor) == 1, f"the crash loop's server changed: {anchor!r}"
        script = script.replace(anchor, replacement)
    return script


@dataclasses.dataclass
class Power:
    """What the power cuts add to the crash loop's figures."""

    mode: str
    cuts: int = 0
    refused: int = 0
    refusals: list[str] = dataclasses.field(default_factory=list)
    cli_verified: int = 0


class PowerHarness(crash_loop.Harness):
    """The crash loop's harness with its stores on the FUSE layer, and a power cut after each kill."""

    def __init__(self, base: Path, mode: str, *, off: bool = False) -> None:
        self.script = _script(off)
        self.mount = Mount(base / "disk", base / "mnt", mode, f"{SEED}:{mode}")
        self.power = Power(mode)
        self.mount.start()
        try:
            super().__init__(base)
        except BaseException:
            self.mount.stop()
            raise

    def close(self) -> None:
        """Stop the worker server, then the layer, unmounting it."""
        try:
            super().close()
        finally:
            self.mount.stop()

    def new_store(self) -> None:
        """A new store, inside the mount."""
        super().new_store()
        self.store = self.base / "mnt" / f"store{self.figures.stores}"

    def cut(self) -> None:
        """Cut the power (the worker is dead) and mount what was synced."""
        self.mount.cut()
        self.power.cuts += 1
        self.mount.start()

    def check(self, rng: random.Random) -> None:
        """After the cut: the crash loop's checks, and ``ledger verify`` on the store."""
        self.cut()
        try:
            super().check(rng)
        except EffectPersistenceError as error:
            # Counted and reported; the store is left as it is and the loop goes on in
            # a new one, so that every refusal shows in the figures.
            self.power.refused += 1
            self.power.refusals.append(f"{type(error).__name__}: {error}")
            self.forget_in_flight()
            self.new_store()
            return
        if self.exists():
            status, output = self.cli(["verify", "--store", str(self.store)])
            assert status == 0, output
            self.power.cli_verified += 1

    def cli(self, argv: list[str]) -> tuple[int, str]:
        """Run the ledger command in a fork of the worker server: its exit status and output."""
        assert self.server.stdin is not None
        output = self.base / "cli.out"
        request = {"fifo": str(self.fifo), "argv": argv, "output": str(output)}
        self.server.stdin.write((json.dumps(request) + "\n").encode())
        self.server.stdin.flush()
        started = self.server_message(time.monotonic() + crash_loop.STALL_SECONDS)
        ended = self.server_message(time.monotonic() + crash_loop.STALL_SECONDS)
        assert ended["pid"] == started["pid"], ended
        assert ended["signal"] == 0, ended
        return ended["status"] >> 8, output.read_text(errors="replace")

    def close_store(self) -> None:
        """The crash loop's last check of a store, with the ``ledger`` program itself."""
        if self.exists():
            done = ledger("verify", "--store", str(self.store))
            assert done.returncode == 0, done.stdout + done.stderr
        super().close_store()


def _figures(harness: PowerHarness, started: float) -> dict[str, Any]:
    power = dataclasses.asdict(harness.power)
    return {
        "test": f"power_cut_{harness.power.mode}",
        "profile": "long" if LONG else "quick",
        "seed": SEED,
        **power,
        **dataclasses.asdict(harness.figures),
        "seconds": round(time.monotonic() - started, 1),
    }


@pytest.mark.parametrize("mode", MODES)
def test_power_cuts_lose_nothing_acknowledged(tmp_path: Path, mode: str) -> None:
    """Cut after cut, every acknowledged record survives, the store verifies and recovers."""
    rng = random.Random(f"{SEED}:{mode}")
    started = time.monotonic()
    harness = PowerHarness(tmp_path, mode)
    try:
        for life in range(CUTS):
            if life and life % STORE_LIVES == 0:
                harness.close_store()
                harness.new_store()
            harness.live(life, rng)
            harness.check(rng)
        harness.close_store()
    finally:
        harness.close()
        report(_figures(harness, started))
    assert harness.power.cuts == CUTS
    assert harness.figures.lost == 0
    assert harness.power.refused == 0, harness.power.refusals
    # A worker killed after a number of acknowledgements (not after a delay) wrote on a
    # store that had just lost its power: the next worker can write.
    assert harness.figures.by_acks > 0
    assert harness.figures.acknowledged >= harness.figures.by_acks


@dataclasses.dataclass
class Control:
    """The control's figures: acknowledged records that a cut took away."""

    mode: str
    lives: int = 0
    acknowledged: int = 0
    lost: int = 0
    refused: int = 0


def _lost(harness: PowerHarness) -> tuple[int, bool]:
    """How many acknowledged records the store no longer holds; whether it refused to open."""
    lost, refused = 0, False
    for run in harness.runs:
        present: dict[int, crash_loop.Key] = {}
        if harness.exists():
            try:
                with EffectLog.load(run.run_id, harness.store) as loaded:
                    present = {r.seq: crash_loop.key(r) for r in loaded.history().records()}
            except EffectPersistenceError:
                refused = True
        lost += sum(1 for seq, k in run.durable.items() if present.get(seq) != k)
    return lost, refused


@pytest.mark.parametrize("mode", MODES)
def test_control_without_sync_loses_acknowledged_records(tmp_path: Path, mode: str) -> None:
    """With ``synchronous=OFF`` the same workers lose acknowledged records at a cut: the layer can fail a store."""
    rng = random.Random(f"{SEED}:control:{mode}")
    control = Control(mode)
    harness = PowerHarness(tmp_path, mode, off=True)
    try:
        while control.lost == 0 and control.lives < CONTROL_LIVES:
            harness.live(control.lives, rng)
            control.lives += 1
            harness.cut()
            lost, refused = _lost(harness)
            control.acknowledged += harness.figures.acknowledged
            control.lost += lost
            control.refused += refused
            # A fresh store for the next life: the lost records would fail its checks.
            harness.forget_in_flight()
            harness.figures.acknowledged = 0
            if harness.exists():
                shutil.rmtree(harness.store)
            harness.new_store()
    finally:
        harness.close()
        report({"test": f"power_cut_control_{mode}", "seed": SEED, **dataclasses.asdict(control)})
    assert control.lost > 0, f"synchronous=OFF lost nothing in {control.lives} cuts: {control}"
