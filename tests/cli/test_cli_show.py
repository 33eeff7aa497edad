"""``ledger show`` for a person at a terminal: lines that fit, and the newest run by default.

Long fields (32-hex ids, idempotency keys, deep paths, recorded values) are cut so that
the timeline reads in about 120 columns, each cut said; ``--json`` holds them whole.
Without RUN, ``show`` shows the run that wrote last, and says so on stderr.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ledger import effects as fx
from ledger.effect_log import EffectLog, new_run_id
from tests.builders import fs_ref, ledger, settle, sha

pytestmark = pytest.mark.program

DEEP = "/srv/agents/worker-07/sandboxes/2026-12-05/ledger-demo-sandbox-h9e0xfvp/notes/plan.md"
LONG_ARGS = {"content": "figures and prose " * 40, "path": "notes/plan.md"}


def _write(log: EffectLog, effect_id: str, path: str = DEEP) -> None:
    target = fs_ref(path)
    log.claim(
        effect_id=effect_id,
        action_id=f"a-{effect_id}",
        operation=fx.OperationRef("write_file", "test/1", sha(b"{}")),
        impact_scope=[target],
        obligations=[fx.Postcondition(target, fx.Predicate.SHA256, sha(b"plan"))],
        step=f"write_file#1@{uuid.uuid4().hex}{uuid.uuid4().hex}",
        args=LONG_ARGS,
    )


def _look(log: EffectLog, sha256: str) -> None:
    log.observe(
        observation_id=uuid.uuid4().hex,
        resource=fs_ref(DEEP),
        mechanism=fx.ObservationMechanism.FILESYSTEM_READ,
        coverage=fx.Coverage.COMPLETE,
        source_action_id="a-look",
        exists=True,
        sha256=sha256,
    )


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, str]:
    """Two runs: `older` created first and written last, `newer` created in between."""
    older, newer = new_run_id(), new_run_id()
    with EffectLog(older, tmp_path) as log:
        _write(log, uuid.uuid4().hex)
    with EffectLog(newer, tmp_path) as log:
        _write(log, "e-newer")
    with EffectLog.load(older, tmp_path) as log:
        effect_id = uuid.uuid4().hex
        _write(log, effect_id)
        settle(log, effect_id)
        _look(log, sha(b"plan"))
    return tmp_path, older, newer


def test_show_fits_its_lines_in_120_columns(store: tuple[Path, str, str]) -> None:
    """No line over 120 characters, each path named once per line, --json whole."""
    directory, older, _newer = store
    shown = ledger("show", older, "--store", str(directory))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, "\n".join(lines)
    assert all(line.count("plan.md") <= 1 for line in lines)
    with EffectLog.load(older, directory) as log:
        history = log.history()
    for claim in history.claims:
        # Ids by a prefix in the tables, whole on each effect's line of advice.
        assert f"{claim.effect_id[:12]}..." in shown.stdout
        assert f"\n{claim.effect_id}: " in shown.stdout
        assert claim.idempotency_key not in shown.stdout
    whole = json.loads(ledger("show", older, "--json", "--store", str(directory)).stdout)
    claims = [r["record"] for r in whole["records"] if r["type"] == "claim"]
    assert [c["args"] for c in claims] == [LONG_ARGS, LONG_ARGS]
    assert [c["step"] for c in claims] == [c.step for c in history.claims]


def test_show_without_run_shows_the_run_that_wrote_last(store: tuple[Path, str, str]) -> None:
    """The run written last, not the one created last; stderr says which."""
    directory, older, newer = store
    shown = ledger("show", "--store", str(directory))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {older}  ")
    assert newer not in shown.stdout
    assert shown.stderr.startswith(f"no RUN given: the run that wrote last, {older}, at ")
    assert shown.stderr.count("\n") == 1
    as_json = ledger("show", "--json", "--store", str(directory))
    assert json.loads(as_json.stdout)["run_id"] == older
    with EffectLog.load(newer, directory) as log:
        settle(log, "e-newer")
    assert ledger("show", "--store", str(directory)).stdout.startswith(f"run {newer}  ")


def test_show_without_run_on_a_store_without_runs_is_a_usage_mistake(tmp_path: Path) -> None:
    """No run to show: exit 2, one line."""
    assert ledger("migrate", "--store", str(tmp_path)).returncode == 0
    shown = ledger("show", "--store", str(tmp_path))
    assert shown.returncode == 2
    assert shown.stdout == ""
    assert shown.stderr == "Error: no RUN given, and the store holds no run yet\n"


def _end(log: EffectLog, effect_id: str, execution: fx.ExecutionOutcome, impact: fx.Impact) -> None:
    log.outcome(effect_id=effect_id, execution=execution, impact=impact)


def test_show_fits_retries_evidence_and_stale_ids_in_120_columns(tmp_path: Path) -> None:
    """32-hex ids everywhere: a retry, evidence and a stale id, a reason naming a retry."""
    run = new_run_id()
    checked, overlapping, failed = (uuid.uuid4().hex for _ in range(3))
    with EffectLog(run, tmp_path) as log:
        _write(log, checked)
        _end(log, checked, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN)
        _write(log, overlapping)
        _look(log, sha(b"plan"))  # stale: another write to the file was in flight
        _end(log, overlapping, fx.ExecutionOutcome.FAILED, fx.Impact.POSSIBLE)
        _look(log, sha(b"not the plan"))  # the evidence, contradicting the call
        _write(log, failed, DEEP.replace("plan.md", "other-plan.md"))  # not the same file
        _end(log, failed, fx.ExecutionOutcome.FAILED, fx.Impact.NONE)
        retry = log.retry(failed, new_effect_id=uuid.uuid4().hex)
        [assessment] = [log.assess(checked)]
    assert assessment.evidence
    assert assessment.stale
    shown = ledger("show", run, "--store", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, "\n".join(lines)
    assert f"retry of {failed[:12]}..." in shown.stdout
    [row] = [line for line in lines if line.startswith(f"{checked[:12]}... ")]
    assert "contradicted" in row
    assert f"{assessment.evidence[0][:8]}..." in row
    assert f"{assessment.stale[0][:8]}..." in row
    # The advice names each effect whole, and a reason naming a retry keeps its whole id.
    assert f"\n{failed}: WAIT: " in shown.stdout
    assert f"'{retry.effect_id}'" in shown.stdout.replace("\n    ", " ")
