"""A real agent framework, resumed from its own checkpoint, with its tool behind ``log.effect``.

The worker is a LangGraph graph (a model node and langgraph.prebuilt's ``ToolNode``) with
an offline scripted chat model and LangGraph's SQLite checkpointer, run as a child
Python. The model asks for one ``send_payment`` tool call (id ``call_pay_1``); the tool
pays through a "downstream system" that appends one line per payment to a file the test
counts. In the ledger variant the tool's body runs inside
``log.effect(..., step=tool_call_id)`` of ``EffectLog.resume(run_id, store)``.

The first life is SIGKILLed inside the tool after the payment and after the ``with``
block has recorded its outcome, but before LangGraph checkpointed the tool node's
result. The second life runs the same script: it finds the thread's checkpoint waiting
at the tool node and resumes it (``graph.invoke(None, ...)``), so the tool node runs
the same tool call again. With the ledger that call is replayed (the recorded result,
no second payment); without it the payment is made twice, which the test shows too, so
it can fail. Both lives invoke the graph with ``durability="sync"``: LangGraph saves
checkpoints asynchronously by default, and a worker killed before the model's answer
was saved would ask the model again on resume.

A life killed after the payment but before the ledger recorded its outcome leaves an
irreversible call that may have landed: the resumed graph stops with ``NeedsResolution``
until a person runs ``ledger resolve``, and still pays once.
"""

from __future__ import annotations

import json
import signal
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import CHILD_TIMEOUT, kill_children, ledger, run_python, start_child

CALL_ID = "call_pay_1"

# argv: checkpoints db, payments file, marker file, model-calls file, mode (ledger|plain),
# life (where it is killed: after-outcome|before-outcome, or finish), store and run id
# ("-" and "-" without the ledger).
WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from typing import Annotated

    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    checkpoints, payments, marker, model_calls, mode, life, store, run_id = sys.argv[1:9]
    CALL_ID = "call_pay_1"
    replayed = []


    class ScriptedModel(BaseChatModel):
        # Offline, and a function of its input: asked after a tool result it answers from
        # it, otherwise it asks for the payment. Each call is one line in model_calls.
        @property
        def _llm_type(self):
            return "scripted"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            with open(model_calls, "a") as f:
                f.write(f"{len(messages)}\\n")
            if isinstance(messages[-1], ToolMessage):
                message = AIMessage(content=f"paid: {messages[-1].content}")
            else:
                call = {"name": "send_payment", "args": {"to": "alice", "amount": 10}, "id": CALL_ID}
                message = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])


    def pay(to, amount):
        # The downstream system: every request is one more payment, one more line.
        with open(payments, "a") as f:
            f.write(json.dumps({"to": to, "amount": amount}) + "\\n")
        with open(payments) as f:
            return {"payment": f"p-{sum(1 for _ in f)}"}


    def killed_here(moment, tool_call_id):
        # The test waits for the marker, then SIGKILLs the worker.
        if life == moment:
            Path(marker).write_text(tool_call_id)
            time.sleep(600)


    @tool
    def send_payment(to: str, amount: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        \"\"\"Send a payment.\"\"\"
        if mode == "ledger":
            with log.effect("send_payment", args={"to": to, "amount": amount},
                            kind=fx.EffectKind.IRREVERSIBLE, step=tool_call_id) as call:
                replayed.append(call.replayed)
                if call.replayed:
                    result = call.result
                else:
                    result = pay(to, amount)
                    killed_here("before-outcome", tool_call_id)  # paid, nothing recorded yet
                    call.succeeded(result=result)
        else:
            result = pay(to, amount)
        # Paid and its outcome recorded; LangGraph has not checkpointed this tool's result.
        killed_here("after-outcome", tool_call_id)
        return json.dumps(result)


    model = ScriptedModel()
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([send_payment]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")


    def run():
        with SqliteSaver.from_conn_string(checkpoints) as saver:
            graph = builder.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "thread-1"}}
            # A thread with a checkpoint waiting at a node resumes from it; a new one starts.
            waiting = list(graph.get_state(config).next)
            start = None if waiting else {"messages": [HumanMessage("Pay alice 10.")]}
            state = graph.invoke(start, config, durability="sync")
            answer = state["messages"][-1].content
            print(json.dumps({"waiting": waiting, "answer": answer, "replayed": replayed}))


    if mode == "ledger":
        from ledger import effects as fx
        from ledger.effect_log import EffectLog

        with EffectLog.resume(run_id, store) as log:
            run()
    else:
        run()
    """
)


@dataclass(frozen=True)
class Worker:
    """The files and arguments of one worker, the same in each of its lives."""

    tmp: Path
    mode: str
    run_id: str

    @property
    def store(self) -> Path:
        return self.tmp / "store"

    @property
    def payments(self) -> Path:
        return self.tmp / "payments.jsonl"

    @property
    def marker(self) -> Path:
        return self.tmp / "inside-the-tool"

    @property
    def model_calls(self) -> Path:
        return self.tmp / "model-calls"

    def args(self, life: str) -> list[object]:
        ledger_args = [self.store, self.run_id] if self.mode == "ledger" else ["-", "-"]
        return [
            self.tmp / "checkpoints.sqlite3",
            self.payments,
            self.marker,
            self.model_calls,
            self.mode,
            life,
            *ledger_args,
        ]

    def killed_in_the_tool(self, moment: str = "after-outcome") -> None:
        """A life SIGKILLed inside the tool at ``moment``, once its payment is made."""
        self.marker.unlink(missing_ok=True)
        child = start_child(WORKER, *self.args(moment))
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not self.marker.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the worker never reached the tool:\n" + kill_children([child]))
            time.sleep(0.02)
        assert self.marker.read_text() == CALL_ID
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=CHILD_TIMEOUT)
        assert child.returncode == -signal.SIGKILL

    def finishes(self) -> dict[str, object]:
        """A life that runs the graph to its end, warning-free; what it printed."""
        result = run_python(WORKER, *self.args("finish"))
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        answer: dict[str, object] = json.loads(result.stdout)
        return answer

    def fails(self) -> str:
        """A life that stops with an exception; its stderr."""
        result = run_python(WORKER, *self.args("finish"))
        assert result.returncode == 1, result.stdout + result.stderr
        return result.stderr

    def payments_made(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.payments.read_text().splitlines()]

    def model_asked(self) -> list[str]:
        """How many messages the model saw, once per time it was asked."""
        return self.model_calls.read_text().split()

    def verify(self) -> None:
        """``ledger verify`` passes on the store the worker left."""
        verified = ledger("verify", "--store", str(self.store))
        assert verified.returncode == 0, verified.stdout + verified.stderr


PAYMENT = {"to": "alice", "amount": 10}


@pytest.mark.program
def test_a_resumed_langgraph_worker_replays_its_tool_call_and_pays_once(tmp_path: Path) -> None:
    worker = Worker(tmp_path, "ledger", new_run_id())
    worker.killed_in_the_tool("after-outcome")
    assert worker.payments_made() == [PAYMENT]

    answer = worker.finishes()

    # The graph resumed at the tool node from its checkpoint and the model was not asked
    # for the tool call again: once for it (1 message), once after its result (3).
    assert answer["waiting"] == ["tools"]
    assert worker.model_asked() == ["1", "3"]
    # The tool call ran again and the ledger replayed it: one payment, and its recorded
    # result is what the model got.
    assert answer["replayed"] == [True]
    assert worker.payments_made() == [PAYMENT]
    assert answer["answer"] == 'paid: {"payment": "p-1"}'

    with EffectLog.load(worker.run_id, worker.store) as log:
        history = log.history()
        assert [(c.step, c.args) for c in history.claims] == [(CALL_ID, PAYMENT)]
        assert [o.result for o in history.outcomes if o.terminal] == [{"payment": "p-1"}]
        assert log.decide(history.claims[0].effect_id).step is fx.NextStep.DONE
    worker.verify()


@pytest.mark.program
def test_without_the_ledger_the_resumed_langgraph_worker_pays_twice(tmp_path: Path) -> None:
    """The same crash and resume with the tool calling the downstream system directly."""
    worker = Worker(tmp_path, "plain", new_run_id())
    worker.killed_in_the_tool("after-outcome")
    assert worker.payments_made() == [PAYMENT]

    answer = worker.finishes()

    assert answer["waiting"] == ["tools"]
    assert worker.model_asked() == ["1", "3"]
    assert worker.payments_made() == [PAYMENT, PAYMENT]
    assert answer["answer"] == 'paid: {"payment": "p-2"}'


@pytest.mark.program
def test_killed_before_its_outcome_the_resumed_worker_stops_until_a_person_resolves(
    tmp_path: Path,
) -> None:
    """Paid, killed before the ledger heard back: the resumed graph stops, it does not pay again.

    The payment tool is IRREVERSIBLE, so the interrupted call is ESCALATE: the resumed
    tool node raises ``NeedsResolution`` out of ``graph.invoke``. Once a person has
    recorded that it was applied, the next life replays it (no result was recorded, so the
    tool returns none) and the graph finishes, still with one payment.
    """
    worker = Worker(tmp_path, "ledger", new_run_id())
    worker.killed_in_the_tool("before-outcome")
    assert worker.payments_made() == [PAYMENT]

    stderr = worker.fails()
    assert "NeedsResolution" in stderr
    assert "ledger resolve" in stderr
    assert worker.payments_made() == [PAYMENT]
    assert worker.model_asked() == ["1"]

    with EffectLog.load(worker.run_id, worker.store) as log:
        (claim,) = log.history().claims
        assert claim.step == CALL_ID
        assert log.decide(claim.effect_id).step is fx.NextStep.ESCALATE
    resolved = ledger(
        "resolve",
        worker.run_id,
        claim.effect_id,
        "--applied",
        "--by",
        "ops",
        "--store",
        str(worker.store),
    )
    assert resolved.returncode == 0, resolved.stderr

    answer = worker.finishes()

    assert answer["waiting"] == ["tools"]
    assert answer["replayed"] == [True]
    assert answer["answer"] == "paid: null"
    assert worker.payments_made() == [PAYMENT]
    assert worker.model_asked() == ["1", "3"]
    worker.verify()
