"""The README's promises: its examples run, and it shows the two commands.

The usage example runs as written. The restarting worker runs as a child process,
started again after it was killed with SIGKILL inside a call: the order is charged once
and the receipt written once, however many times it starts.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ledger.effect_log import EffectLog
from tests.builders import PYTHON, REPO, subprocess_env

README = (REPO / "README.md").read_text()
BLOCKS: list[str] = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
WORKER_MARK = "# worker.py JOB:"

# Runs a script as __main__ after arranging for this process to be killed with SIGKILL
# inside one call: as the function `charge` of the script returns (the payment provider
# has charged, the ledger has no outcome yet), or as the receipt is opened for writing
# (claimed, not written).
CRASH = """
import os, runpy, signal, sys

script, where = sys.argv[1], sys.argv[2]
sys.argv = [script, *sys.argv[3:]]


def kill():
    os.kill(os.getpid(), signal.SIGKILL)


def profile(frame, event, arg):
    code = frame.f_code
    if event == "return" and code.co_name == "charge" and code.co_filename == script:
        kill()


def hook(event, args):
    if event == "open" and str(args[0]).endswith("o-17.txt") and "w" in str(args[1]):
        kill()


if where == "charge":
    sys.setprofile(profile)
else:
    sys.addaudithook(hook)
runpy.run_path(script, run_name="__main__")
"""


def _block(mark: str) -> str:
    found = [block for block in BLOCKS if block.startswith(mark)]
    assert len(found) == 1, f"one README python block starts with {mark!r}"
    return found[0]


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, *argv],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_readme_starts_with_the_two_commands() -> None:
    """The first code block is exactly `make demo` and `make test`."""
    first = re.search(r"```sh\n(.*?)```", README, re.DOTALL)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_usage_example_runs_and_verifies(tmp_path: Path) -> None:
    """The Python usage example runs as written and reports the verified effect."""
    assert len(BLOCKS) == 2
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[0])
    result = _run(str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["write-hello verified done"]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job directory as the README's worker expects it: a run id, an outbox, a provider."""
    job = tmp_path / "job"
    (job / "outbox").mkdir(parents=True)
    (job / "provider").mkdir()
    made = _run("-c", "import ledger; print(ledger.new_run_id())", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    (job / "run-id").write_text(made.stdout)
    return job


@pytest.mark.parametrize(
    ("where", "then"),
    [
        # Killed after the provider charged: the charge is retried with the same key,
        # which the provider has seen; the receipt is written by its first attempt.
        ("charge", "receipt: written, attempt 1"),
        # Killed as the receipt was opened: the file is as before the claim, so the
        # receipt is retried; the charge is done and replayed from its recorded result.
        ("receipt", "receipt: written, attempt 2"),
    ],
)
def test_the_worker_killed_inside_a_call_does_everything_once_when_run_again(
    job: Path, tmp_path: Path, where: str, then: str
) -> None:
    """The README's worker, SIGKILLed mid-call and run again twice: one charge, one receipt."""
    worker = tmp_path / "worker.py"
    worker.write_text(_block(WORKER_MARK))
    crash = tmp_path / "crash.py"
    crash.write_text(CRASH)
    killed = _run(str(crash), str(worker), where, str(job), cwd=tmp_path)
    assert killed.returncode == -9, killed.stderr
    assert killed.stdout == ""
    assert len(list((job / "provider").iterdir())) == 1
    assert not (job / "outbox" / "o-17.txt").exists()

    again = _run(str(worker), str(job), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [then]
    once_more = _run(str(worker), str(job), cwd=tmp_path)
    assert once_more.returncode == 0, once_more.stderr
    assert once_more.stdout.splitlines() == ["receipt: replayed"]

    charges = list((job / "provider").iterdir())
    assert [c.read_text() for c in charges] == ["o-17 1200\n"]
    assert (job / "outbox" / "o-17.txt").read_text() == "paid 1200 for o-17\n"
    # Every attempt of the charge carried the one key the provider saw.
    with EffectLog.load((job / "run-id").read_text().strip(), job / "ledger") as log:
        attempts = [c for c in log.history().claims if c.operation.name == "charge"]
    assert {c.idempotency_key for c in attempts} == {charges[0].name}
    assert len(attempts) == (2 if where == "charge" else 1)
