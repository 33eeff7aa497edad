"""The main job, end to end: a scripted agent worker killed mid-effect, and what the ledger says.

The parent starts a real worker process that writes files into a sandbox, one
claimed effect at a time. In the middle of one write the parent kills it with
SIGKILL. It then starts the worker again on the same run: the worker loads the
log, recovers the interrupted claim, observes every file and finishes its work.
Finally the parent prints each effect's execution, impact and verdict, and the
``sqlite3`` command that shows the same table from the ``effect_status`` view.

Run the worker alone with ``python -m ledger._demo STORE SANDBOX RUN_ID first|resume``.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger import effects as fx
from ledger import storage
from ledger._report import assemble, html
from ledger.effect_log import EffectLog, EffectPersistenceError, new_run_id
from ledger.resources import FilesystemResource, FilesystemRoot

IN_FLIGHT = "IN-FLIGHT"
WORKER_TIMEOUT_S = 60


@dataclass(frozen=True)
class Step:
    """One tool call of the scripted agent."""

    effect_id: str
    path: str
    content: bytes | None  # None: delete the file

    @property
    def args(self) -> dict[str, str | None]:
        """The call's arguments, as the tool takes them."""
        return {
            "path": self.path,
            "content": None if self.content is None else self.content.decode(),
        }


PLAN = (
    Step("e1-plan", "notes/plan.md", b"# Plan\n1. gather\n2. write report\n"),
    Step("e2-cleanup", "stale.lock", None),  # the file is not there: the call fails cleanly
    Step("e3-report", "report.txt", b"Quarterly report\n" + b"figures and prose\n" * 2000),
    Step("e4-data", "data/results.csv", b"name,value\nalpha,1\nbeta,2\n"),
    Step("e5-summary", "summary.md", b"# Summary\nAll figures are in report.txt.\n"),
)
KILLED_IN = "e3-report"


def _observe(log: EffectLog, root: FilesystemRoot, step: Step) -> None:
    resource = FilesystemResource.resolve(root, step.path, allow_missing=True)
    log.observe_file(resource, source_action_id=f"check-{step.effect_id}")


def _perform(log: EffectLog, root: FilesystemRoot, step: Step, crash: Callable[[], None]) -> None:
    """One tool call as an effect: claimed first, its outcome and the file recorded after."""
    resource = FilesystemResource.resolve(root, step.path, allow_missing=True)
    ref = fx.resource_ref(resource, "target")
    if step.content is None:
        obligations = (fx.Postcondition(ref, fx.Predicate.ABSENT),)
    else:
        digest = hashlib.sha256(step.content).hexdigest()
        obligations = (fx.Postcondition(ref, fx.Predicate.SHA256, digest),)
    # Deleting twice deletes once: an idempotent call. A missing file fails before
    # anything changed (no impact).
    with (
        contextlib.suppress(FileNotFoundError),
        log.effect(
            "delete_file" if step.content is None else "write_file",
            args=step.args,
            kind=fx.EffectKind.IDEMPOTENT if step.content is None else fx.EffectKind.WRITE,
            effect_id=step.effect_id,
            action_id=f"act-{step.effect_id}",
            backend="sandbox-fs/1",
            impact_scope=(resource,),
            obligations=obligations,
            no_impact=(FileNotFoundError,),
        ),
    ):
        # The claim is durable now; only then is the tool invoked.
        if step.content is None:
            resource.path.unlink()
            return
        resource.path.parent.mkdir(parents=True, exist_ok=True)
        with resource.path.open("wb") as f:
            if step.effect_id == KILLED_IN:
                f.write(step.content[: len(step.content) // 2])
                f.flush()
                crash()
            f.write(step.content)


def worker(store: Path, sandbox: Path, run_id: str, phase: str) -> None:
    """The scripted agent worker: ``first`` runs until killed, ``resume`` recovers and finishes."""
    root = FilesystemRoot.seal(sandbox)

    def hang() -> None:
        print(IN_FLIGHT, KILLED_IN, flush=True)  # noqa: T201 - the parent reads this line
        time.sleep(WORKER_TIMEOUT_S)  # the parent kills us here

    if phase == "first":
        with EffectLog(run_id, store) as log:
            for step in PLAN:
                _perform(log, root, step, hang)
        return
    with EffectLog.load(run_id, store) as log:
        recovered = log.recover_interrupted()
        print("recovered:", " ".join(o.effect_id for o in recovered) or "nothing", flush=True)  # noqa: T201
        claimed = {c.effect_id for c in log.history().claims}
        for step in PLAN:
            if step.effect_id in claimed:
                _observe(log, root, step)
            else:
                _perform(log, root, step, lambda: None)


# --------------------------------------------------------------------------- parent


def _spawn(store: Path, sandbox: Path, run_id: str, phase: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ledger._demo", str(store), str(sandbox), run_id, phase]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: S603 - our own module


def _table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _verdicts(log: EffectLog, sandbox: Path, echo: Callable[[str], None]) -> None:
    """Each effect's verdict and next step, then the reasons."""
    rows = []
    decisions = []
    for claim in log.history().claims:
        a = log.assess(claim.effect_id)
        decisions.append(log.decide(claim.effect_id))
        rows.append(
            (
                claim.effect_id,
                claim.operation.name,
                claim.impact_scope[0].locator.removeprefix(str(sandbox) + "/"),
                a.execution.value if a.execution else "-",
                a.impact.value if a.impact else "-",
                a.verdict.value,
                "yes" if a.unresolved_impact else "no",
                decisions[-1].step.value,
            )
        )
    columns = ("effect", "operation", "target", "execution", "impact", "verdict", "unresolved")
    echo(_table(rows, (*columns, "next")))
    echo("\nWhat the worker should do next, and why:")
    for d in decisions:
        echo(f"  {d.effect_id}: {d.step.value.upper()}: {d.reason}")


def run(store: Path, echo: Callable[[str], None] = print, report: Path | None = None) -> int:
    """Run the demo against the store at ``store``; return a process exit code.

    With ``report``, the run's page (``ledger report``) is written there last.
    """
    run_id = new_run_id()
    # Open (and create or migrate) the store here, so that storage trouble is reported
    # once, by this process, before any worker starts.
    backend = storage.backend(store)
    opened = backend.acquire(store)
    try:
        opened.open_for_writing()
    finally:
        backend.release(opened)
    sandbox = Path(tempfile.mkdtemp(prefix="ledger-demo-sandbox-"))
    echo(f"store    {store}")
    echo(f"sandbox  {sandbox}")
    echo(f"run      {run_id}\n")

    first = _spawn(store, sandbox, run_id, "first")
    assert first.stdout is not None  # noqa: S101 - Popen was given stdout=PIPE
    line = first.stdout.readline().split()
    if line[:1] != [IN_FLIGHT]:
        first.kill()
        first.wait()
        echo(f"the worker stopped before the planned crash (exit {first.returncode})")
        return 1
    first.send_signal(signal.SIGKILL)
    first.wait(WORKER_TIMEOUT_S)
    echo(f"worker {first.pid} killed with SIGKILL in the middle of {line[1]}")

    again = _spawn(store, sandbox, run_id, "resume")
    out, _ = again.communicate(timeout=WORKER_TIMEOUT_S)
    if again.returncode != 0:
        echo(f"the restarted worker failed (exit {again.returncode})")
        return 1
    echo(f"worker {again.pid} restarted on the same run; {out.strip()}\n")

    with EffectLog.load(run_id, store) as log:
        _verdicts(log, sandbox, echo)
    echo(
        f"\n{KILLED_IN} was interrupted mid-write: the ledger holds its claim, recovery marked it "
        "interrupted with possible impact, and the file observed afterwards does not match "
        "the intended digest. The worker must not assume it happened, nor blindly run it again."
    )
    query = (
        "SELECT effect_id, operation, execution, impact, verdict, unresolved_impact, next_step "
        f"FROM effect_status WHERE run_id = '{run_id}' ORDER BY seq;"
    )
    argv = storage.backend(store).reader(store).query_command(query)
    echo("\nThe same table from the store, read-only, with the stock sqlite3 shell:\n")
    # The query holds no shell metacharacters, so it reads best in plain double quotes.
    echo(f'  sqlite3 -box {shlex.quote(argv[2])} "{query}"\n')
    if shutil.which("sqlite3"):
        shown = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        echo((shown.stdout or shown.stderr).rstrip())
    if report is not None:
        try:
            page = html.write(report, html.render(assemble.build(store, [run_id])))
        except OSError as e:
            echo(f"cannot write {report}: {e.strerror or e}")
            return 1
        echo(f"\nThe run's incident page, to open in a browser (ledger report {run_id[:8]}):")
        echo(f"  {page}")
    return 0


if __name__ == "__main__":
    try:
        worker(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    except EffectPersistenceError as e:
        sys.exit(f"worker: {e}")
