"""Every tool of a real MCP server, called by a real SDK client through ``ledger mcp-proxy``.

Each call must be claimed with the right kind, operation, backend, scope and argument
digest, carry its idempotency key to the server, and end with the outcome its answer
says; everything else (progress, a server's request to the client) passes through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import CreateMessageResult, TextContent

from ledger import effects as fx
from tests.builders import CERTAIN, FAILED, INTERRUPTED, NONE, POSSIBLE, SUCCESS
from tests.mcp.driver import Setup, outcome_of, run_id_in, run_session, session, wait_until

pytestmark = pytest.mark.program

KIND = fx.EffectKind


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def test_each_tool_is_claimed_with_its_kind_key_and_outcome(tmp_path: Path) -> None:
    """read, upsert, write, email and a raising tool: claim, kind, key and outcome each."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    calls = [
        ("read_note", {"name": "a"}, KIND.READ, (SUCCESS, NONE)),
        ("upsert_note", {"name": "a", "text": "one"}, KIND.IDEMPOTENT, (SUCCESS, CERTAIN)),
        ("write_file", {"path": "out.txt", "text": "hello"}, KIND.WRITE, (SUCCESS, CERTAIN)),
        (
            "send_email",
            {"to": "a@example.org", "body": "hi"},
            KIND.IRREVERSIBLE,
            (SUCCESS, CERTAIN),
        ),
        ("explode", {"reason": "boom"}, KIND.WRITE, (FAILED, NONE)),
    ]

    async def scenario() -> list[bool]:
        async with session(setup, "--kind", "send_email=irreversible", errlog=errlog) as client:
            await client.list_tools()
            return [(await client.call_tool(tool, args)).is_error for tool, args, _, _ in calls]

    errors = run_session(scenario)
    assert errors == [False, False, False, False, True]
    assert (setup.state / "out.txt").read_text() == "hello"
    assert (setup.state / "outbox.txt").read_text() == "a@example.org: hi\n"

    run_id = run_id_in(errlog.read_text())
    history = setup.history(run_id)
    received = setup.calls()
    assert [c.operation.name for c in history.claims] == [tool for tool, *_ in calls]
    assert [r["tool"] for r in received] == [tool for tool, *_ in calls]
    for claim, (tool, args, kind, outcome), got in zip(
        history.claims, calls, received, strict=True
    ):
        assert claim.kind is kind, tool
        assert claim.operation.backend == "ledger-test-server/1.2.3"
        assert claim.operation.args_sha256 == fx.args_digest(args)
        assert [r.locator for r in claim.impact_scope] == [f"mcp://ledger-test-server/{tool}"]
        assert [r.kind for r in claim.impact_scope] == ["external"]
        assert claim.action_id == f"mcp-proxy/ledger-test-server/{claim.effect_id}"
        assert got["key"] == claim.idempotency_key, tool
        assert outcome_of(history, claim.effect_id) == outcome, tool
        assert claim.args == args, tool
    for outcome, (tool, *_) in zip(history.outcomes, calls, strict=True):
        assert outcome.result_recorded, tool
        assert outcome.result["isError"] is (tool == "explode"), tool
    assert len({c.idempotency_key for c in history.claims}) == len(calls)


def test_the_claim_is_durable_before_the_server_runs_the_call(tmp_path: Path) -> None:
    """While the server is inside a call, the ledger already holds its claim, pending."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    seen: list[list[dict[str, Any]]] = []

    async def scenario() -> None:
        async with session(setup, errlog=errlog) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, "slow_write", {"label": "x"})
            await wait_until((setup.state / "started-x").exists, "the call starts")
            seen.append(setup.status())
            (setup.state / "release-x").write_text("")

    run_session(scenario)
    [during] = seen
    assert [(r["operation"], r["verdict"], r["execution"]) for r in during] == [
        ("slow_write", "pending", None)
    ]
    history = setup.history(run_id_in(errlog.read_text()))
    assert outcome_of(history, history.claims[0].effect_id) == (SUCCESS, CERTAIN)


def test_progress_and_a_sampling_request_pass_through(tmp_path: Path) -> None:
    """Progress notifications reach the client; the server's sampling request is answered."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    progress: list[tuple[float, float | None, str | None]] = []
    asked: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def sampling(_context: Any, params: Any) -> CreateMessageResult:
        asked.append(params.messages[0].content.text)
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="forty-two"), model="test"
        )

    async def scenario() -> tuple[str, str]:
        async with session(setup, errlog=errlog, sampling_callback=sampling) as client:
            counted = await client.call_tool(
                "count_up", {"steps": 3}, progress_callback=on_progress
            )
            answered = await client.call_tool("ask_model", {"question": "meaning?"})
            return _text(counted), _text(answered)

    assert run_session(scenario) == ("counted to 3", "forty-two")
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert asked == ["meaning?"]
    history = setup.history(run_id_in(errlog.read_text()))
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [(SUCCESS, CERTAIN)] * 2


def test_a_server_killed_mid_call_gives_the_client_an_error_and_the_ledger_interrupted(
    tmp_path: Path,
) -> None:
    """The server dies inside a call: the client gets an error, the effect is interrupted."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    errors: list[str] = []

    async def scenario() -> None:
        async with session(setup, errlog=errlog) as client:
            try:
                await client.call_tool("die", {"code": 1})
            except Exception as e:  # the SDK raises the JSON-RPC error
                errors.append(str(e))

    run_session(scenario)
    assert len(errors) == 1
    assert "exited" in errors[0], errors
    run_id = run_id_in(errlog.read_text())
    history = setup.history(run_id)
    [claim] = history.claims
    assert outcome_of(history, claim.effect_id) == (INTERRUPTED, POSSIBLE)
    assert claim.effect_id in errors[0]
    [row] = setup.status("--unresolved")
    assert (row["effect_id"], row["execution"]) == (claim.effect_id, "interrupted")


def test_a_cancelled_call_is_failed_with_possible_impact(tmp_path: Path) -> None:
    """The client cancels a call the server is running: FAILED, impact POSSIBLE."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"

    async def scenario() -> str:
        async with session(setup, errlog=errlog) as client:
            await client.list_tools()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "slow_write", {"label": "c"})
                await wait_until((setup.state / "started-c").exists, "the call starts")
                tasks.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            run_id = run_id_in(errlog.read_text())

            def settled() -> bool:
                return any(r["execution"] == "failed" for r in setup.status())

            await wait_until(settled, "the cancellation is recorded")
            (setup.state / "release-c").write_text("")
            # The session goes on: another call after the cancelled one.
            assert _text(await client.call_tool("read_note", {"name": "n"})) == ""
            return run_id

    run_id = run_session(scenario)
    history = setup.history(run_id)
    first, second = history.claims
    assert outcome_of(history, first.effect_id) == (FAILED, POSSIBLE)
    assert outcome_of(history, second.effect_id) == (SUCCESS, NONE)


@pytest.mark.parametrize(
    "options",
    [("--kind", "explode=irreversible"), ("--error-impact", "explode=possible")],
    ids=["irreversible", "error-impact"],
)
def test_a_tool_error_maybe_done_is_guarded_in_its_own_run_until_resolved(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """An irreversible tool's error, or one --error-impact says may have acted, is in doubt.

    The identical call is refused in the same run; a different one passes; resolved, the
    identical one passes (and fails again, in doubt again).
    """
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    answers: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with session(setup, *options, errlog=errlog) as client:
            await client.list_tools()
            for step in ("first", "refused", "other", "resolved", "after"):
                if step == "resolved":
                    run_id = run_id_in(errlog.read_text())
                    first = setup.history(run_id).claims[0].effect_id
                    resolved = setup.ledger(
                        "resolve", run_id, first, "--not-applied", "--by", "tester"
                    )
                    assert resolved.returncode == 0, resolved.stderr
                reason = "other" if step == "other" else "boom"
                result = await client.call_tool("explode", {"reason": reason})
                answers.append((result.is_error, _text(result)))

    run_session(scenario)
    assert [error for error, _ in answers] == [True] * 5  # each an error, of one kind or another
    first, refused, other, resolved, after = (text for _, text in answers)
    for text in (first, other, resolved):  # the server's own tool errors
        assert "did not forward" not in text
    assert "did not forward" in refused
    assert "did not forward" in after  # the resolved one went through and failed again
    history = setup.history(run_id_in(errlog.read_text()))
    assert history.claims[0].effect_id in refused
    assert "ledger resolve" in refused
    assert [c["args"]["reason"] for c in setup.calls()] == ["boom", "other", "boom"]
    # Five claims: the three calls sent, and the two refusals, each settled as never sent
    # and naming the effect that blocked it.
    assert len(history.claims) == 5
    assert len(history.resolutions) == 1
    outcomes = {o.effect_id: o for o in history.outcomes}
    sent = [c for c in history.claims if outcomes[c.effect_id].impact is not NONE]
    assert {outcome_of(history, c.effect_id) for c in sent} == {(FAILED, POSSIBLE)}
    assert [c.args for c in sent] == [{"reason": "boom"}, {"reason": "other"}, {"reason": "boom"}]
    blocked = [
        outcomes[c.effect_id].result["_meta"]["ledger/refusal"]["effect_id"]
        for c in history.claims
        if c not in sent
    ]
    assert blocked == [sent[0].effect_id, sent[2].effect_id]
    assert {outcome_of(history, e) for e in blocked} == {(FAILED, POSSIBLE)}
    expected = KIND.IRREVERSIBLE if "--kind" in options else KIND.WRITE
    assert {c.kind for c in history.claims} == {expected}


def test_a_writes_tool_error_did_nothing_and_is_not_guarded(tmp_path: Path) -> None:
    """A write the server says failed (isError) is failed, impact none: repeating it passes.

    Nothing is on the incident list, and each identical call reaches the server.
    """
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"

    async def scenario() -> list[str]:
        async with session(setup, errlog=errlog) as client:
            await client.list_tools()
            return [_text(await client.call_tool("explode", {"reason": "boom"})) for _ in "abc"]

    texts = run_session(scenario)
    assert not any("did not forward" in text for text in texts)
    assert [c["args"] for c in setup.calls()] == [{"reason": "boom"}] * 3
    run_id = run_id_in(errlog.read_text())
    history = setup.history(run_id)
    assert [c.kind for c in history.claims] == [KIND.WRITE] * 3
    assert {outcome_of(history, c.effect_id) for c in history.claims} == {(FAILED, NONE)}
    assert setup.status("--unresolved") == []
    shown = json.loads(setup.ledger("show", run_id, "--json").stdout)
    assert {d["step"] for d in shown["decisions"]} == {fx.NextStep.RETRY.value}


def test_a_client_on_the_per_request_protocol_is_served_the_same(tmp_path: Path) -> None:
    """The SDK's Client negotiates server/discover (2026-07-28): the same claims and keys."""
    from mcp import Client, StdioServerParameters

    from tests.builders import subprocess_env

    setup = Setup.make(tmp_path)
    argv = setup.argv()

    async def scenario() -> tuple[str | None, bool]:
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=subprocess_env())
        async with Client(params) as client:  # mode "auto": server/discover first
            await client.list_tools()
            result = await client.call_tool("read_note", {"name": "z"})
            return client.session.protocol_version, bool(result.is_error)

    version, error = run_session(scenario)
    assert version == "2026-07-28"
    assert error is False
    [run] = json.loads(setup.ledger("runs", "--json").stdout)
    assert run["writer_name"] == "ledger-test-server"  # NAME defaults to the server's name
    history = setup.history(run["run_id"])
    [claim] = history.claims
    assert claim.kind is KIND.READ
    assert claim.operation.backend == "ledger-test-server/1.2.3"
    assert claim.action_id.startswith("mcp-proxy/ledger-test-server/")
    assert setup.calls()[0]["key"] == claim.idempotency_key
    assert outcome_of(history, claim.effect_id) == (SUCCESS, NONE)


def _recorded(history: fx.History, effect_id: str) -> tuple[object, bool]:
    [outcome] = [o for o in history.outcomes if o.effect_id == effect_id]
    return outcome.result, outcome.result_recorded


def test_arguments_and_results_are_recorded_as_the_server_sent_them(tmp_path: Path) -> None:
    """The claim holds the call's arguments; the outcome the result object, isError too.

    A JSON-RPC error records failed, impact none, and no result (it has none); a result
    larger than 65,536 bytes is not recorded, and reaches the client whole.
    """
    from tests.mcp.driver import RawClient

    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"
    client = RawClient(setup.argv("--kind", "send_email=irreversible"), errlog)
    try:
        client.start()
        wrote = client.call(1, "write_file", path="a.txt", text="héllo")
        exploded = client.call(2, "explode", reason="boom")
        refused = client.call(3, "refuse", reason="no")
        huge = client.call(4, "big", size=100_000)
        sent = client.call(5, "send_email", to="a@example.org", body="hi")
        failed_mail = client.call(6, "explode", reason="mail")  # a write: none
        client.close()  # its status is the server's: on a loaded machine, maybe stopped
    except BaseException:
        client.kill()
        raise
    assert wrote["result"]["isError"] is False
    assert exploded["result"]["isError"] is True
    assert refused["error"]["message"] == "refused: no"
    assert huge["result"]["content"] == [{"type": "text", "text": "x" * 100_000}]

    history = setup.history(run_id_in(errlog.read_text()))
    claims = history.claims
    assert [c.args for c in claims] == [
        {"path": "a.txt", "text": "héllo"},
        {"reason": "boom"},
        {"reason": "no"},
        {"size": 100_000},
        {"to": "a@example.org", "body": "hi"},
        {"reason": "mail"},
    ]
    assert [outcome_of(history, c.effect_id) for c in claims] == [
        (SUCCESS, CERTAIN),
        (FAILED, NONE),
        (FAILED, NONE),
        (SUCCESS, CERTAIN),
        (SUCCESS, CERTAIN),
        (FAILED, NONE),
    ]
    assert [_recorded(history, c.effect_id) for c in claims] == [
        (wrote["result"], True),
        (exploded["result"], True),
        (None, False),
        (None, False),
        (sent["result"], True),
        (failed_mail["result"], True),
    ]


def test_no_record_stores_neither_arguments_nor_results(tmp_path: Path) -> None:
    """--no-record: claims and outcomes as before, their digests, nothing of the values."""
    setup = Setup.make(tmp_path)
    errlog = tmp_path / "proxy.err"

    async def scenario() -> None:
        async with session(setup, "--no-record", errlog=errlog) as client:
            await client.call_tool("write_file", {"path": "b.txt", "text": "secret"})
            await client.call_tool("explode", {"reason": "boom"})

    run_session(scenario)
    assert (setup.state / "b.txt").read_text() == "secret"
    history = setup.history(run_id_in(errlog.read_text()))
    assert [c.args for c in history.claims] == [None, None]
    assert history.claims[0].operation.args_sha256 == fx.args_digest(
        {"path": "b.txt", "text": "secret"}
    )
    assert [(o.result, o.result_recorded) for o in history.outcomes] == [(None, False)] * 2
    assert [outcome_of(history, c.effect_id) for c in history.claims] == [
        (SUCCESS, CERTAIN),
        (FAILED, NONE),
    ]
