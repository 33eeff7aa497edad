"""`ledger status --attention`: only what needs a person, most urgent first, exit 1 if any.

One store holds every kind of effect: settled ones (done, however unverified), one the
worker retries by itself, and the four that need a person. The run still loaded by a
live process (this test's) has an effect waiting that must not be listed: its writer may
yet record the outcome. Expectations come from the library (``decide``), not from the
command's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import claim_write, fs_ref, ledger, op, see, settle

CERTAIN = fx.Impact.CERTAIN


def _claim(log: EffectLog, effect_id: str, kind: fx.EffectKind) -> fx.EffectClaim:
    return log.claim(
        effect_id=effect_id,
        action_id="a-" + effect_id,
        operation=op(args=effect_id.encode()),
        impact_scope=(fs_ref(f"/sandbox/{effect_id}"),),
        kind=kind,
    )


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, EffectLog]:
    """The store, and the log of its live run (closed at teardown)."""
    directory = tmp_path / "store"
    with EffectLog(new_run_id(), directory, writer_name="worker") as log:
        # Noise: settled, however unverified, or the worker's own to retry.
        _claim(log, "quiet-read", fx.EffectKind.READ)
        settle(log, "quiet-read", impact=fx.Impact.NONE)
        _claim(log, "quiet-idem", fx.EffectKind.IDEMPOTENT)
        settle(log, "quiet-idem")
        _claim(log, "quiet-retry", fx.EffectKind.WRITE)
        settle(log, "quiet-retry", fx.ExecutionOutcome.FAILED, fx.Impact.NONE)
        # Needs a person: a write that may have landed, an irreversible one, and a
        # reported success the evidence contradicts, claimed in the opposite order of
        # their urgency.
        _claim(log, "maybe-write", fx.EffectKind.WRITE)
        settle(log, "maybe-write", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
        _claim(log, "maybe-sent", fx.EffectKind.IRREVERSIBLE)
        settle(log, "maybe-sent", fx.ExecutionOutcome.INTERRUPTED, fx.Impact.POSSIBLE)
        claim_write(log, "contradicted")
        settle(log, "contradicted")
        see(log, "after", exists=False)
        # Claimed and left: its writer is gone (the log is closed).
        _claim(log, "abandoned", fx.EffectKind.WRITE)
        dead = log.run_id
    live = EffectLog(new_run_id(), directory, writer_name="alive")
    _claim(live, "in-flight", fx.EffectKind.WRITE)
    with EffectLog.load(dead, directory) as check:
        steps = {c.effect_id: check.decide(c.effect_id).step for c in check.history().claims}
    assert steps == {
        "quiet-read": fx.NextStep.DONE,
        "quiet-idem": fx.NextStep.DONE,
        "quiet-retry": fx.NextStep.RETRY,
        "maybe-write": fx.NextStep.ESCALATE,
        "maybe-sent": fx.NextStep.ESCALATE,
        "contradicted": fx.NextStep.ESCALATE,
        "abandoned": fx.NextStep.WAIT,
    }
    yield directory, live
    live.close()


def test_attention_lists_what_needs_a_person_most_urgent_first(store) -> None:
    directory, live = store
    found = ledger("status", "--attention", "--json", "--store", str(directory))
    assert found.returncode == 1, found.stderr
    rows = json.loads(found.stdout)
    assert [(r["effect_id"], r["urgency"]) for r in rows] == [
        ("contradicted", 1),
        ("maybe-sent", 2),
        ("maybe-write", 3),
        ("abandoned", 4),
    ]
    by_id = {r["effect_id"]: r for r in rows}
    run = by_id["abandoned"]["run_id"]
    assert by_id["abandoned"]["action"] == f"ledger recover {run}"
    assert by_id["maybe-sent"]["action"].startswith(f"ledger resolve {run} maybe-sent ")
    assert by_id["maybe-write"]["next_step"] == "escalate"
    # Every status field is there too.
    assert {"kind", "verdict", "idempotency_key", "step"} <= set(by_id["contradicted"])
    assert live.run_id not in {r["run_id"] for r in rows}


def test_attention_table_names_each_effect_and_the_command_that_settles_it(store) -> None:
    directory, _live = store
    found = ledger("status", "--attention", "--store", str(directory))
    assert found.returncode == 1, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].split()[:3] == ["URGENCY", "RUN", "EFFECT"]
    assert [line.split()[2] for line in lines[1:5]] == [
        "contradicted",
        "maybe-sent",
        "maybe-write",
        "abandoned",
    ]
    assert any(line.startswith("abandoned: ledger recover ") for line in lines)
    assert "quiet" not in found.stdout


def test_attention_is_empty_and_exits_0_once_everything_is_settled(store) -> None:
    directory, live = store
    run = json.loads(ledger("status", "--json", "--store", str(directory)).stdout)[0]["run_id"]
    for effect, word in (
        ("contradicted", "--applied"),
        ("maybe-sent", "--applied"),
        ("maybe-write", "--not-applied"),
    ):
        done = ledger("resolve", run, effect, word, "--by", "ops", "--store", str(directory))
        assert done.returncode == 0, done.stderr
    assert ledger("recover", run, "--store", str(directory)).returncode == 0
    left = ledger("status", "--attention", "--json", "--store", str(directory))
    # Recovered, the abandoned write may have landed: it now needs someone's word.
    assert [r["effect_id"] for r in json.loads(left.stdout)] == ["abandoned"]
    settled = ledger(
        "resolve", run, "abandoned", "--not-applied", "--by", "ops", "--store", str(directory)
    )
    assert settled.returncode == 0, settled.stderr
    live.close()  # its writer gone, the in-flight claim needs recovery: listed
    found = ledger("status", "--attention", "--store", str(directory))
    assert found.returncode == 1
    assert "in-flight" in found.stdout
    assert ledger("recover", "--dead", "--store", str(directory)).returncode == 0
    with EffectLog.load(live.run_id, directory) as log:
        log.resolve("in-flight", applied=False, by="ops")
    empty = ledger("status", "--attention", "--store", str(directory))
    assert (empty.returncode, empty.stdout) == (0, "nothing needs a person\n"), empty.stderr
    as_json = ledger("status", "--attention", "--json", "--store", str(directory))
    assert (as_json.returncode, json.loads(as_json.stdout)) == (0, [])


def test_attention_and_unresolved_together_is_a_usage_mistake(tmp_path) -> None:
    found = ledger("status", "--attention", "--unresolved", "--store", str(tmp_path))
    assert found.returncode == 2
    assert "not both" in found.stderr
    assert "Traceback" not in found.stderr


def test_a_retried_effect_is_listed_once_by_its_retry(tmp_path: Path) -> None:
    """A call that failed and may have acted, retried, the retry left unanswered by a dead
    writer: only the retry is listed.

    The original's next step is its newest retry's (``wait``), but it has an outcome of
    its own: listing it as "claimed, no outcome" would be false, and the same wait twice.
    """
    directory = tmp_path / "store"
    with EffectLog(new_run_id(), directory, writer_name="worker") as log:
        _claim(log, "failed", fx.EffectKind.IDEMPOTENT)
        settle(log, "failed", fx.ExecutionOutcome.FAILED, fx.Impact.POSSIBLE)
        retry = log.retry("failed", new_effect_id="retried")
        assert log.decide("failed").step is fx.NextStep.WAIT
    found = ledger("status", "--attention", "--json", "--store", str(directory))
    assert found.returncode == 1, found.stderr
    assert [r["effect_id"] for r in json.loads(found.stdout)] == [retry.effect_id]


def test_a_call_reported_running_by_a_dead_writer_asks_a_person(tmp_path: Path) -> None:
    """Recovery leaves a RUNNING outcome alone: the command given is ledger resolve."""
    directory = tmp_path / "store"
    with EffectLog(new_run_id(), directory, writer_name="worker") as log:
        _claim(log, "started", fx.EffectKind.WRITE)
        settle(log, "started", fx.ExecutionOutcome.RUNNING, fx.Impact.POSSIBLE)
        run_id = log.run_id
    found = ledger("status", "--attention", "--json", "--store", str(directory))
    assert found.returncode == 1, found.stderr
    [row] = json.loads(found.stdout)
    assert row["effect_id"] == "started"
    assert row["reason"].startswith("reported running")
    assert row["action"].startswith(f"ledger resolve {run_id} started ")
    recovered = ledger("recover", run_id, "--store", str(directory))
    assert recovered.returncode == 0, recovered.stderr
    again = ledger("status", "--attention", "--json", "--store", str(directory))
    assert [r["effect_id"] for r in json.loads(again.stdout)] == ["started"]
