"""A proxy killed mid-call, and the next proxy of the same name.

The earlier run is recovered when the next one starts, the call in doubt is on the
incident list, an identical write is refused until a person resolves it, and then it
passes. A proxy of another name leaves that run alone.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import TextContent

from tests.builders import FAILED, INTERRUPTED, NONE, POSSIBLE
from tests.mcp.driver import Setup, outcome_of, run_id_in, run_session, session, wait_until

pytestmark = pytest.mark.program


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _kill_proxy_mid_call(setup: Setup, errlog: Path, *options: str) -> str:
    """Start slow_write through a proxy (named crashy unless ``options`` say), SIGKILL it."""

    async def call(client: Any) -> None:
        try:
            await client.call_tool("slow_write", {"label": "k"})
        except Exception:  # the connection ends with the proxy
            return

    async def scenario() -> None:
        async with (
            session(setup, *(options or ("--name", "crashy")), errlog=errlog) as client,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(call, client)
            await wait_until((setup.state / "started-k").exists, "the call starts")
            os.kill(setup.calls()[-1]["ppid"], signal.SIGKILL)

    run_session(scenario)
    (setup.state / "release-k").write_text("")  # the server may still be running the call
    return run_id_in(errlog.read_text())


def _refusal_recorded(setup: Setup, latest: Any, text: str, blocking: tuple[str, str]) -> None:
    """The refusal is a record of the run: the call asked for, settled as never sent,
    the answer the client got as its result, naming the effect that blocked it."""
    run_id, effect_id = blocking
    refusal = latest.claims[0]
    assert refusal.args == {"label": "k"}
    assert outcome_of(latest, refusal.effect_id) == (FAILED, NONE)
    [outcome] = [o for o in latest.outcomes if o.effect_id == refusal.effect_id]
    assert outcome.result["isError"] is True
    assert outcome.result["content"] == [{"type": "text", "text": text}]
    assert outcome.result["_meta"] == {"ledger/refusal": {"run_id": run_id, "effect_id": effect_id}}
    # Recorded refusals ask nothing of a person.
    attention = setup.ledger("status", "--attention", "--json")
    assert refusal.effect_id not in attention.stdout


def test_a_killed_proxy_is_recovered_and_its_call_guarded_until_resolved(tmp_path: Path) -> None:
    """Killed mid-call: recovered by the next proxy of its name, refused, resolved, passed."""
    setup = Setup.make(tmp_path)
    first = _kill_proxy_mid_call(setup, tmp_path / "first.err")
    [in_doubt] = setup.history(first).claims
    assert setup.calls()[0]["key"] == in_doubt.idempotency_key

    # Another name: that run is not its to recover, and nothing it calls is refused.
    other_log = tmp_path / "other.err"

    async def other() -> bool:
        async with session(setup, "--name", "other", errlog=other_log) as client:
            return bool((await client.call_tool("slow_write", {"label": "k"})).is_error)

    assert run_session(other) is False
    assert "recovered" not in other_log.read_text()
    assert setup.history(first).outcomes == ()

    second_log = tmp_path / "second.err"
    answers: list[tuple[bool, str]] = []

    async def second() -> None:
        async with session(setup, "--name", "crashy", errlog=second_log) as client:
            for attempt in ("refused", "different", "resolved"):
                if attempt == "resolved":
                    resolved = setup.ledger(
                        "resolve", first, in_doubt.effect_id, "--not-applied", "--by", "tester"
                    )
                    assert resolved.returncode == 0, resolved.stderr
                label = "other" if attempt == "different" else "k"
                (setup.state / f"release-{label}").write_text("")
                result = await client.call_tool("slow_write", {"label": label})
                answers.append((result.is_error, _text(result)))

    run_session(second)
    stderr = second_log.read_text()
    names = {
        r["run_id"]: r["writer_name"] for r in json.loads(setup.ledger("runs", "--json").stdout)
    }
    assert names[run_id_in(stderr)] == "crashy"
    assert "crashy (" in setup.ledger("runs").stdout
    assert (
        f"recovered run {first} of a dead proxy named crashy: effect {in_doubt.effect_id} "
        "(slow_write) interrupted, impact possible"
    ) in stderr
    history = setup.history(first)
    assert outcome_of(history, in_doubt.effect_id) == (INTERRUPTED, POSSIBLE)

    refused, different, resolved = answers
    assert refused[0] is True
    assert in_doubt.effect_id in refused[1]
    assert first in refused[1]
    assert "ledger resolve" in refused[1]
    assert different == (False, "done other")
    assert resolved == (False, "done k")
    # The server saw: the first call, the other proxy's, the different one, the resolved one.
    assert [c["args"]["label"] for c in setup.calls()] == ["k", "k", "other", "k"]
    latest = setup.history(run_id_in(stderr))
    assert [c.operation.name for c in latest.claims] == ["slow_write"] * 3
    assert setup.calls()[-1]["key"] == latest.claims[-1].idempotency_key
    _refusal_recorded(setup, latest, refused[1], (first, in_doubt.effect_id))
    recorded = f"effect {in_doubt.effect_id} of run {first}; recorded as effect "
    assert recorded + latest.claims[0].effect_id in stderr


def test_the_call_in_doubt_is_on_the_incident_list_after_recovery(tmp_path: Path) -> None:
    """Named by the server (no --name): recovered at initialize, listed as unresolved."""
    setup = Setup.make(tmp_path)
    first = _kill_proxy_mid_call(setup, tmp_path / "first.err", "--kind", "slow_write=write")
    [in_doubt] = setup.history(first).claims
    assert in_doubt.action_id == f"mcp-proxy/ledger-test-server/{in_doubt.effect_id}"

    async def restart() -> None:
        async with session(setup, errlog=tmp_path / "second.err") as client:
            await client.list_tools()

    run_session(restart)
    assert (
        f"recovered run {first} of a dead proxy named ledger-test-server: effect "
        f"{in_doubt.effect_id} (slow_write) interrupted, impact possible"
    ) in (tmp_path / "second.err").read_text()
    rows = setup.status("--unresolved")
    assert [(r["run_id"], r["effect_id"], r["execution"], r["impact"]) for r in rows] == [
        (first, in_doubt.effect_id, "interrupted", "possible")
    ]
    listed = setup.ledger("status", "--unresolved")
    assert in_doubt.effect_id in listed.stdout
    assert "slow_write" in listed.stdout


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_a_client_that_goes_mid_call_leaves_the_call_interrupted(tmp_path: Path, how: str) -> None:
    """The client goes (its stdin closes, or the proxy is told to stop) inside a call.

    The server is stopped, the proxy exits, and the call is settled with impact
    possible: interrupted if the server died without answering, failed if it answered
    with an error as it stopped (the SDK's server cancels its calls). In doubt, not lost.
    """
    from tests.mcp.driver import RawClient, wait_file

    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    client = RawClient(setup.argv(), errlog)
    try:
        client.start()
        client.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "slow_write", "arguments": {"label": "never"}},
            }
        )
        wait_file(setup.state / "started-never")
        if how == "SIGTERM":
            client.proc.send_signal(signal.SIGTERM)
        status = client.close()
    except BaseException:
        client.kill()
        raise
    del status  # the server's: how it stopped is its own business
    history = setup.history(run_id_in(errlog.read_text()))
    [claim] = history.claims
    assert outcome_of(history, claim.effect_id) in {(INTERRUPTED, POSSIBLE), (FAILED, POSSIBLE)}
