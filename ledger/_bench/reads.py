"""``ledger bench --reads``: what the reading commands cost as a run grows, and start-up.

Each reading command (``status``, ``status --unresolved``, ``runs``, ``show``,
``report``) runs as a real ``ledger`` process on stores of one run each: one of a single
effect (the fixed cost: start-up, opening the store), one of 1,000 effects and one of
100,000. The cost per effect is the time beyond the fixed cost, over the effects: it
stays flat while the command stays linear, and the ratio of the large run's to the small
run's is held to 1.5. Each process's peak memory is reported beside its time. Then
``ledger --version`` against ``python -c pass``: what importing the command costs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger._bench.cases import built, new_run
from ledger._bench.runner import render_builds_and_notes, scratch_directory
from ledger.errors import EffectPersistenceError

__all__ = ["RATIO_TARGET", "render", "run"]

Progress = Callable[[str], None]
Table = Callable[[Sequence[str], Sequence[Sequence[object]]], None]

# The most the cost per effect of the large run may be, as a multiple of the small run's.
RATIO_TARGET = 1.5

# Each reading command, by name, and its arguments after ``ledger`` (RUN, OUT filled in).
COMMANDS: dict[str, tuple[str, ...]] = {
    "status": ("status",),
    "status_unresolved": ("status", "--unresolved"),
    "runs": ("runs",),
    "show": ("show", "{run}"),
    "report": ("report", "-o", "{out}"),
}


@dataclass(frozen=True)
class _Plan:
    small: int  # effects of the small run
    large: int  # effects of the large run
    repeats: int  # of each command on the fixed-cost and small stores
    large_repeats: int  # of each command on the large store
    startups: int  # of ledger --version and of python -c pass, each
    timeout: float  # seconds one command may take before it is reported as timed out


_FULL = _Plan(1_000, 100_000, 5, 2, 9, 300.0)
_QUICK = _Plan(1_000, 10_000, 3, 1, 5, 120.0)


def _label(effects: int) -> str:
    if effects >= 1_000_000:
        return f"{effects // 1_000_000}m"
    return f"{effects // 1000}k" if effects >= 1000 else str(effects)


@dataclass
class _Ran:
    seconds: float
    max_rss_kb: int
    error: str | None  # why the command failed or was stopped, None when it exited 0 or 1


# Runs one command and prints its wall time, peak memory and exit status. A process's
# peak memory counts the memory of the process it was forked from until it runs its
# program: the bench, which built the stores, is large, so each command is started from
# this small process (no site packages, nothing of the ledger imported) instead.
_MEASURE = """
import os, sys, time
null = os.open(os.devnull, os.O_RDWR)
quiet = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1)]
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=quiet)
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def _run(argv: Sequence[str], timeout: float) -> _Ran:
    """Run a process to its end: its wall time, its peak memory, and why it failed if it did."""
    with tempfile.TemporaryFile() as err:
        measure = subprocess.Popen(  # noqa: S603 - this Python, and this package's command
            [sys.executable, "-S", "-c", _MEASURE, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # the command with it, when stopped
        )
        try:
            out, _ = measure.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(measure.pid, signal.SIGKILL)
            measure.communicate()
            return _Ran(timeout, 0, f"stopped after {timeout:g} s")
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    try:
        seconds, max_rss_kb, code = out.split()
    except ValueError:
        return _Ran(0.0, 0, lines[-1] if lines else f"exit status {measure.returncode}")
    error = None
    # Exit 1 with no error is a command that lists what needs a person, or a run that
    # does not validate (named on stderr): it did its work.
    if int(code) not in (0, 1) or any(line.startswith("Error") for line in lines):
        error = lines[-1] if lines else f"exit status {code}"
    return _Ran(float(seconds), int(max_rss_kb), error)


def _ledger(*args: str) -> list[str]:
    return [sys.executable, "-m", "ledger", *args]


def _median(ran: list[_Ran]) -> float:
    return statistics.median(r.seconds for r in ran)


def _startup(plan: _Plan, say: Progress) -> dict[str, Any]:
    say(f"start-up: ledger --version and python -c pass, {plan.startups} of each, alternating")
    version: list[_Ran] = []
    bare: list[_Ran] = []
    for i in range(plan.startups):
        order = [(version, _ledger("--version")), (bare, [sys.executable, "-c", "pass"])]
        for samples, argv in order if i % 2 == 0 else order[::-1]:
            samples.append(_run(argv, plan.timeout))
    failed = next((r.error for r in version if r.error), None)
    if failed is not None:
        raise EffectPersistenceError(f"ledger --version failed: {failed}")
    return {
        "ledger_version_s": round(_median(version), 3),
        "python_pass_s": round(_median(bare), 3),
        "ratio": round(_median(version) / _median(bare), 2),
        "n": plan.startups,
    }


def _commands(
    stores: dict[str, tuple[Path, str, int]], plan: _Plan, scratch: Path, say: Progress
) -> dict[str, dict[str, Any]]:
    """Each command on each store, the stores taken in turn so that noise falls on all."""
    ran: dict[tuple[str, str], list[_Ran]] = {}
    for label, (directory, run_id, _) in stores.items():
        repeats = plan.large_repeats if label == _label(plan.large) else plan.repeats
        say(f"reading commands on the store of {label} effects, {repeats} times each")
        for r in range(repeats):
            for name, args in COMMANDS.items():
                if any(x.error for x in ran.get((name, label), ())):
                    continue  # stopped or failed once: not again
                out = scratch / f"report-{label}-{r}.html"
                argv = [a.format(run=run_id, out=out) for a in args]
                found = _run(_ledger(*argv, "--store", str(directory)), plan.timeout)
                ran.setdefault((name, label), []).append(found)
                with contextlib.suppress(FileNotFoundError):
                    out.unlink()
    cases: dict[str, dict[str, Any]] = {}
    for (name, label), samples in ran.items():
        effects = stores[label][2]
        error = next((s.error for s in samples if s.error), None)
        cases[f"{name}_{label}"] = {
            "command": "ledger " + " ".join(COMMANDS[name]).format(run="RUN", out="FILE.html"),
            "effects": effects,
            "n": len(samples),
            "median_s": None if error else round(_median(samples), 3),
            "max_rss_mb": None if error else round(max(s.max_rss_kb for s in samples) / 1024, 1),
            "error": error,
        }
    return cases


def _per_effect(
    cases: dict[str, dict[str, Any]], name: str, label: str, fixed: str | None = None
) -> float | None:
    """Microseconds per effect of a command's median, or of its part beyond ``fixed``'s.

    ``fixed``: the label of the one-effect store, whose median is the command's fixed cost.
    """
    case = cases[f"{name}_{label}"]
    base = {"median_s": 0.0, "effects": 0} if fixed is None else cases[f"{name}_{fixed}"]
    if case["median_s"] is None or base["median_s"] is None:
        return None
    beyond = float(case["median_s"]) - float(base["median_s"])
    if beyond <= 0:
        return None  # no slower than on one effect: lost in the noise
    return beyond * 1e6 / (int(case["effects"]) - int(base["effects"]))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _over(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None or low <= 0 else round(high / low, 3)


def run(
    directory: Path | None = None,
    *,
    quick: bool = False,
    progress: Progress | None = None,
    sizes: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Build the stores in a scratch directory under ``directory``, measure, remove it.

    ``directory`` defaults to the bench's (beside the default store). One that is
    missing, not a directory or not writable raises :class:`EffectPersistenceError`.
    ``sizes``: other effects for the small and the large run, each command run once: a
    check that the bench runs, not a measurement.
    """
    say = progress or (lambda _: None)
    plan = _QUICK if quick else _FULL
    if sizes is not None:
        if not 1 < sizes[0] < sizes[1]:
            raise ValueError(f"sizes must be two numbers of effects, 1 < small < large: {sizes}")
        plan = dataclasses.replace(
            plan, small=sizes[0], large=sizes[1], repeats=1, large_repeats=1, startups=3
        )
    started = time.perf_counter()
    builds: list[dict[str, Any]] = []
    with scratch_directory(directory, "ledger-bench-reads-") as (base, scratch):
        stores: dict[str, tuple[Path, str, int]] = {}
        for effects in (1, plan.small, plan.large):
            label = _label(effects)
            say(f"building a store of one run of {effects:,} effects")
            store = scratch / f"store_{label}"
            made: list[str] = []

            def make(store: Path = store, effects: int = effects, made: list[str] = made) -> int:
                # About 2.2 records an effect: its claim, its outcome, and an observation of
                # one claimed file in five (those effects are verified, the others not).
                run_id, records = new_run(store, effects * 11 // 5)
                made.append(run_id)
                return records

            built(builds, f"one run of {effects:,} effects", store, make)
            stores[label] = (store, made[0], effects)
        startup = _startup(plan, say)
        cases = _commands(stores, plan, scratch, say)
    fixed, small, large = (_label(n) for n in (1, plan.small, plan.large))
    per_effect: dict[str, dict[str, float | None]] = {}
    ratios: dict[str, float | None] = {}
    net_ratios: dict[str, float | None] = {}
    for name in COMMANDS:
        whole = {label: _per_effect(cases, name, label) for label in (small, large)}
        net = {label: _per_effect(cases, name, label, fixed) for label in (small, large)}
        per_effect[name] = {label: _rounded(cost) for label, cost in whole.items()} | {
            f"{label}_beyond_fixed": _rounded(cost) for label, cost in net.items()
        }
        ratios[f"{name}_{large}_vs_{small}"] = _over(whole[large], whole[small])
        net_ratios[f"{name}_{large}_vs_{small}_beyond_fixed"] = _over(net[large], net[small])
    return {
        "reads": True,
        "quick": quick,
        "store": str(base),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
        "startup": startup,
        "cases": cases,
        "per_effect_us": per_effect,
        "ratios": ratios,
        "net_ratios": net_ratios,
        "target": f"<= {RATIO_TARGET:g}",
        "met": {
            name: value is not None and value <= RATIO_TARGET for name, value in ratios.items()
        },
        "builds": builds,
        "notes": _notes(plan, scratch, quick=quick),
    }


def _notes(plan: _Plan, scratch: Path, *, quick: bool) -> list[str]:
    small, large = _label(plan.small), _label(plan.large)
    notes = [
        (
            "Each command ran as its own ledger process, stdout discarded, on a store holding "
            "one run: a claim and an outcome per effect and an observation for one effect in "
            "five. Times are medians of wall time; memory is the process's peak RSS."
        ),
        (
            f"Per effect: a command's median over the run's effects. {large}_vs_{small} is "
            f"the {large} run's cost per effect over the {small} run's, the target <= "
            f"{RATIO_TARGET:g}: a command that grew with the square of the run would be "
            f"{_label(plan.large // plan.small)} times its small run's, one that stays linear "
            "at most 1 (its start-up is spread over more effects)."
        ),
        (
            "beyond_fixed, reported without a target: the same without the command's fixed "
            "cost (its median on a run of one effect: start-up, opening and checking the "
            f"store), the growth alone. At {small} effects that part is a fraction of a "
            "second, within the noise of a shared machine (- when the small run was no "
            "slower than the one-effect run): read it over several runs."
        ),
        (
            "A command exits 1 when a run shown does not validate; none does here. A command "
            f"still running after {plan.timeout:g} s is stopped and reported so, with no ratio."
        ),
        (
            "The stores were built with synchronous=OFF (see the build times); every command "
            "read them as any reader does."
        ),
        f"The scratch directory {scratch} was removed.",
    ]
    if quick:
        notes.append(f"--quick: the run of {large} effects stands in for the 100k one.")
    return notes


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def render(report: dict[str, Any], table: Table, echo: Callable[[str], None]) -> None:
    """Print ``report`` for people: the commands, their ratios, start-up, the notes."""
    machine = report["machine"]
    mode = " --quick" if report["quick"] else ""
    echo(f"ledger bench --reads{mode} in {report['store']}, {report['seconds']} s")
    echo(
        f"{machine['cpus']} CPUs, {machine['platform']}, Python {machine['python']}, "
        f"SQLite {machine['sqlite']}\n"
    )
    table(
        ("CASE", "EFFECTS", "N", "MEDIAN s", "PEAK MB", "COMMAND"),
        [
            (
                name,
                f"{c['effects']:,}",
                c["n"],
                c["error"] or _number(c["median_s"]),
                _number(c["max_rss_mb"]),
                c["command"],
            )
            for name, c in report["cases"].items()
        ],
    )
    echo("")
    verdict = {True: "met", False: "missed"}
    rows = []
    for (name, value), net, costs in zip(
        report["ratios"].items(),
        report["net_ratios"].values(),
        report["per_effect_us"].values(),
        strict=True,
    ):
        whole, beyond = list(costs.values())[:2], list(costs.values())[2:]
        rows.append(
            (
                name,
                _number(value),
                report["target"],
                verdict[report["met"][name]],
                " -> ".join(f"{_number(c)} µs" for c in whole),
                _number(net),
                " -> ".join(f"{_number(c)} µs" for c in beyond),
            )
        )
    table(
        ("RATIO", "VALUE", "TARGET", "RESULT", "PER EFFECT", "BEYOND FIXED", "PER EFFECT"),
        rows,
    )
    echo("")
    s = report["startup"]
    echo(
        f"start-up: ledger --version {s['ledger_version_s']} s, python -c pass "
        f"{s['python_pass_s']} s: {s['ratio']}x (medians of {s['n']})\n"
    )
    render_builds_and_notes(report, table, echo)
