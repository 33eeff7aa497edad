"""What a forked child keeps of its parent: every registered reset runs there, once, in order.

Real ``os.fork()`` children, whose answers come back through a pipe. The registry's own
tests run in a Python of their own, so that what they register never reaches another
test's children.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import textwrap
import threading
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite import liveness, turn
from tests.builders import (
    CHILD_TIMEOUT,
    REPO,
    claim_target,
    effect_ids,
    python_stdout,
    settle,
    wait_for,
)
from tests.sqlite.driver import other_process_holds_the_turn

RESETS = """
import gc, json, os
from ledger import _lifetime

seen = []

class Thing:
    def __init__(self, name):
        self.name = name
        self.state = "inherited"

    def after_fork(self):
        self.state = "reset"
        seen.append(self.name)

def reset(name):
    def run():
        seen.append(name)
    return run

first, second, gone = Thing("first object"), Thing("second object"), Thing("gone")
_lifetime.at_fork(reset("first function"))
_lifetime.track(first)
_lifetime.track(gone)
_lifetime.at_fork(reset("second function"))
_lifetime.track(second)
del gone
gc.collect()

read, write = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.write(write, json.dumps([seen, first.state, second.state]).encode())
    finally:
        os._exit(0)
os.close(write)
with os.fdopen(read) as answer:
    child = json.loads(answer.read())
assert os.waitpid(pid, 0)[1] == 0
print(json.dumps({"child": child, "parent": [seen, first.state, second.state]}))
"""


def test_a_forked_child_resets_every_registered_object_in_order() -> None:
    """Functions and objects alike, in the order they registered; the parent's stay as they were.

    An object that became garbage before the fork is not reset (nor kept alive).
    """
    answer = json.loads(python_stdout(RESETS))
    order = ["first function", "first object", "second function", "second object"]
    assert answer["child"] == [order, "reset", "reset"]
    assert answer["parent"] == [[], "inherited", "inherited"]


HOOKS = """
import json, os, sys
from pathlib import Path

hooks = []
register = os.register_at_fork

def counted(**hook):
    hooks.append(sys._getframe(1).f_globals["__name__"])
    register(**hook)

os.register_at_fork = counted

import ledger.postgresql.store
from ledger.effect_log import EffectLog, new_run_id
from ledger.sqlite import liveness, turn
from tests.builders import claim_target

for i in range(3):  # stores, watches, turns and leases: objects of the process
    with EffectLog(new_run_id(), Path(sys.argv[1]) / str(i)) as log:
        claim_target(log, "e1")
print(json.dumps([name for name in hooks if name.split(".")[0] == "ledger"]))
"""


def test_the_library_registers_one_fork_hook(tmp_path: Path) -> None:
    """However many modules and objects have process state, os.register_at_fork is called once."""
    assert json.loads(python_stdout(HOOKS, tmp_path)) == ["ledger._lifetime"]
    callers = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "ledger").rglob("*.py")
        if "register_at_fork(" in path.read_text()
    )
    assert callers == ["ledger/_lifetime.py"]


def _child_answer(pid: int, read: int) -> dict[str, object]:
    """What the child wrote to the pipe; a child that says nothing in time is killed."""
    with os.fdopen(read) as pipe:
        ready, _, _ = select.select([pipe], [], [], CHILD_TIMEOUT)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child said nothing in {CHILD_TIMEOUT} s: it hangs")
        text = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0
    answer: dict[str, object] = json.loads(text)
    return answer


def _queued_for_the_turn(pid: int) -> bool:
    """Whether a thread of ``pid`` sleeps in the kernel for a store's turn byte."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and str(pid) in fields and str(liveness.TURN_OFFSET) in fields:
            return True
    return False


def test_a_store_opened_in_the_parent_serves_a_forked_child(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child writes and reads through the store its parent had open; the parent goes on.

    At the fork the parent's store holds its connection, its turn and its inotify
    instance, its log a lease, and another of its threads waits for the turn to write
    (holding the store's write queue, which no thread of the child would ever let go):
    the child gets fresh ones of its own.
    """
    monkeypatch.setattr(turn, "PATIENCE", CHILD_TIMEOUT)  # the writer waits in line
    child_run = new_run_id()
    with EffectLog(new_run_id(), store_dir) as parent:
        for effect_id in ("p1", "p2"):
            claim_target(parent, effect_id)
            settle(parent, effect_id)
        with other_process_holds_the_turn(store_dir) as holder:
            writer = threading.Thread(target=claim_target, args=(parent, "p3"), daemon=True)
            writer.start()
            wait_for(lambda: _queued_for_the_turn(os.getpid()), "the writer queues for its turn")
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child answers through the pipe
                try:
                    os.close(read)
                    with EffectLog(child_run, store_dir) as log:
                        for effect_id in ("c1", "c2", "c3"):
                            claim_target(log, effect_id)
                            settle(log, effect_id)
                        answer: dict[str, object] = {"degraded": log.degraded}
                    with EffectLog.load(parent.run_id, store_dir) as theirs:
                        answer["parent's"] = effect_ids(theirs.history())[:2]
                    gc.collect()  # whatever the fork left behind is finalized here
                    os.write(write, json.dumps(answer).encode())
                finally:
                    os._exit(0)
            os.close(write)
            assert holder.stdin is not None
            holder.stdin.write("go\n")  # the turn is free: the parent's writer and the child's
            holder.stdin.flush()
            answer = _child_answer(pid, read)
            writer.join(CHILD_TIMEOUT)
        assert answer == {"degraded": False, "parent's": ["p1", "p2"]}
        assert not writer.is_alive()
        settle(parent, "p3")
        claim_target(parent, "p4")  # on the connection the child was forked with
        assert not parent.degraded
    with EffectLog.load(parent.run_id, store_dir) as log:
        assert effect_ids(log.history()) == ["p1", "p2", "p3", "p4"]
    with EffectLog.load(child_run, store_dir) as log:
        assert effect_ids(log.history()) == ["c1", "c2", "c3"]


SEALED = """
import json, os, select, sys
from pathlib import Path
from ledger import _paths
from ledger.effect_log import EffectLog, new_run_id
from ledger.resources import FilesystemRoot

work = Path(sys.argv[1])
EffectLog(new_run_id(), work / "store").close()  # opened: sensitive, even never written
read, write = os.pipe()
_paths._lock.acquire()  # held at the fork, as by another thread: never released in the child
pid = os.fork()
if pid == 0:
    try:
        try:
            FilesystemRoot.seal(work)
            os.write(write, b"sealed")
        except ValueError as e:
            os.write(write, str(e).encode())
    finally:
        os._exit(0)
_paths._lock.release()
os.close(write)
if not select.select([read], [], [], float(sys.argv[2]))[0]:
    os.kill(pid, 9)
    print("the child hangs")
else:
    print(os.read(read, 4096).decode())
os.waitpid(pid, 0)
"""


def test_a_forked_child_still_refuses_the_stores_its_parent_opened(tmp_path: Path) -> None:
    """The stores a parent opened stay sensitive in its child, which never waits for its lock."""
    work = tmp_path / "work"
    work.mkdir()
    answer = python_stdout(SEALED, work, CHILD_TIMEOUT, timeout=2 * CHILD_TIMEOUT).strip()
    assert answer == (
        f"{work} is sensitive: it contains the ledger store {work / 'store'}, "
        "which agent tools must never touch"
    )


def test_the_registry_refuses_what_it_cannot_reset() -> None:
    """Anything but a function, or an object without after_fork(), is a TypeError."""
    script = textwrap.dedent(
        """
        from ledger import _lifetime
        for call, value in ((_lifetime.at_fork, "reset"), (_lifetime.track, object())):
            try:
                call(value)
            except TypeError as e:
                print(e)
        """
    )
    assert python_stdout(script).splitlines() == [
        "at_fork() takes a function, not str",
        "track() takes an object with after_fork(), not object",
    ]
