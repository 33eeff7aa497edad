"""The proxy's server dies with it, and what the proxy says when its server dies.

A proxy killed outright (SIGKILL) runs no code: its server, even one that does not
read its stdin (whose end stops a well-behaved server), gets SIGTERM from the kernel
(the parent-death signal). When the server dies mid-call, the error the client gets
names the commands that show the run and settle the effect, with the proxy's
``--store``: pasted, they work.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from pathlib import Path

import pytest

from tests.builders import PYTHON, ledger
from tests.mcp.driver import WAIT, RawClient, Setup, run_id_in, wait_file

pytestmark = pytest.mark.program

# A server that never reads its stdin (so the end of it does not stop it): it writes its
# pid, then sleeps.
SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie no one reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def _kill(client: RawClient) -> None:
    """SIGKILL the proxy (it runs no code of its own), and close this side's pipes."""
    client.kill()
    assert client.proc.stdin is not None
    client.proc.stdin.close()


def _pid(path: Path) -> int:
    wait_file(path)
    deadline = time.monotonic() + WAIT
    while not path.read_text():
        assert time.monotonic() < deadline, "the server wrote no pid"
        time.sleep(0.01)
    return int(path.read_text())


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
def test_a_server_that_ignores_its_stdin_dies_with_a_killed_proxy(tmp_path: Path) -> None:
    """SIGKILL the proxy: its server, which never reads its stdin, is stopped all the same."""
    setup = Setup.make(tmp_path)
    pidfile = setup.state / "pid"
    client = RawClient(
        setup.argv(server=[PYTHON, "-c", SLEEPER, str(pidfile)]), tmp_path / "proxy.err"
    )
    server = _pid(pidfile)
    try:
        assert not _gone(server)
        _kill(client)
        assert _wait_gone(server), "the server outlived its proxy"
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)
        _kill(client)


def test_a_server_dead_mid_call_is_answered_with_commands_that_work(tmp_path: Path) -> None:
    """The error names `ledger show` and `ledger resolve` with --store: pasted, both work."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    client = RawClient(setup.argv(), errlog)
    try:
        client.start()
        answer = client.call(1, "die", code=0)
        client.close()
    except BaseException:
        client.kill()
        raise
    message = answer["error"]["message"]
    run_id = run_id_in(errlog.read_text())
    store = shlex.quote(str(setup.store))
    show = re.search(r"ledger show \S+ --store [^\s;]+", message)
    assert show is not None, message
    assert show.group() == f"ledger show {run_id} --store {store}"
    resolve = re.search(r"ledger resolve \S+ \S+ --applied --by NAME --store \S+", message)
    assert resolve is not None, message
    shown = ledger(*shlex.split(show.group())[1:])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {run_id}  ")
    resolved = ledger(*shlex.split(resolve.group().replace("NAME", "ops"))[1:], "--json")
    assert resolved.returncode == 0, resolved.stderr
    [claim] = setup.history(run_id).claims
    assert claim.effect_id in resolve.group()
    assert [r.effect_id for r in setup.history(run_id).resolutions] == [claim.effect_id]
