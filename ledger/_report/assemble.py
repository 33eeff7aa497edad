"""The page's model assembled from one survey of the store: which runs, what needs a person.

:func:`build` reads the store once (:meth:`ledger.storage.Reader.survey`), chooses the
runs asked for, and makes the two lists at the top of the page (what needs a person,
every effect with unresolved impact), each with the exact commands that settle it.
Each run's timeline and table are :mod:`ledger._report.runs`'.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import shlex
from collections import defaultdict
from collections.abc import Callable, Sequence

from ledger import _inspect, _text, storage
from ledger._report.attention import Attention, needs_person
from ledger._report.excerpt import Excerpt, Loaded
from ledger._report.html import shell_word
from ledger._report.model import (
    ATTENTION_LIMIT,
    INCIDENT_LIMIT,
    RUN_LIMIT,
    TARGET_LIMIT,
    Incident,
    Needs,
    Report,
)
from ledger._report.runs import recorded, run_page
from ledger.effects import EffectClaim

__all__ = ["build", "parse_since"]

_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: dt.datetime | None = None) -> str:
    """``--since``: an ISO 8601 date or time (UTC without an offset), or ``90s``/``2h``/``7d`` ago.

    Returned in the form ledger records times, so that it compares as text.
    """
    duration = _DURATION.fullmatch(text.strip())
    if duration:
        now = now or dt.datetime.now(dt.UTC)
        moment = now - dt.timedelta(seconds=int(duration[1]) * _UNITS[duration[2]])
    else:
        try:
            moment = dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"{text!r} is not a time: give an ISO 8601 date or time "
                "(2026-03-01, 2026-03-01T09:15:00, UTC unless it has an offset) "
                "or a duration back from now (90s, 30m, 2h, 7d)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _match(summaries: Sequence[_inspect.RunSummary], prefix: str) -> str:
    """The run ``prefix`` names, by the rules (and messages) of ``ledger show``."""
    if not re.fullmatch(r"[0-9a-f]{1,32}", prefix):
        raise _inspect.RunNotFoundError(
            f"{prefix!r} is not a run id or a prefix of one (lowercase hex)"
        )
    found = [s.run_id for s in summaries if s.run_id.startswith(prefix)]
    if not found:
        raise _inspect.RunNotFoundError(f"no run matches {prefix!r}")
    if len(found) > 1:
        raise _inspect.RunNotFoundError(
            f"{prefix!r} matches more than one run; give more characters"
        )
    return found[0]


def _choose(
    summaries: Sequence[_inspect.RunSummary],
    rows: Sequence[_inspect.EffectRow],
    runs: Sequence[str],
    *,
    unresolved: bool,
    since: str | None,
    broken: set[str],
) -> list[_inspect.RunSummary]:
    """The runs the page shows, oldest first: those asked for, filtered.

    A run that does not validate stays whatever the filters: its times and verdicts are
    not believed, and a forged row may have settled its last open effect.
    """
    if runs:
        wanted = {_match(summaries, prefix) for prefix in runs}
        summaries = [s for s in summaries if s.run_id in wanted]
    if since is not None:
        summaries = [
            s
            for s in summaries
            if s.run_id in broken or (s.last_at is not None and s.last_at >= since)
        ]
    if unresolved:
        troubled = {row.run_id for row in rows} | broken
        summaries = [s for s in summaries if s.run_id in troubled]
    return list(summaries)


def build(
    directory: storage.Location,
    runs: Sequence[str] = (),
    *,
    unresolved: bool = False,
    since: str | None = None,
) -> Report:
    """The report of ``runs`` (ids or unique prefixes; every run when empty) of a store.

    ``unresolved`` keeps the runs that hold an effect with unresolved impact; ``since``
    (from :func:`parse_since`) the runs that wrote a record at or after it. The store is
    read once (:meth:`ledger.storage.Reader.survey`): each run is read and validated
    once, and of the runs drawn or listed only what the page shows is kept
    (:func:`~ledger._report.excerpt.excerpt`).
    """
    read = _inspect.reader(directory)

    def keep(
        summaries: Sequence[_inspect.RunSummary], rows: storage.EffectRows
    ) -> dict[str, Callable[[storage.RunRecords], Excerpt]]:
        # Chosen as if every run validated: one that does not is never drawn nor listed,
        # and adding it to what is shown only pushes others out, so whatever is drawn or
        # listed is kept here: of each run, the effects drawn and those the lists name.
        shown = _choose(summaries, rows, runs, unresolved=unresolved, since=since, broken=set())
        ids = {s.run_id for s in shown}
        listed = [row for row in rows if row.run_id in ids]
        named: dict[str, set[str]] = defaultdict(set)
        for row in [*listed[:INCIDENT_LIMIT], *_listed_first(listed)]:
            named[row.run_id].add(row.effect_id)
        unresolved_of: dict[str, set[str]] = defaultdict(set)
        for row in listed:
            unresolved_of[row.run_id].add(row.effect_id)
        return {
            run_id: functools.partial(
                Excerpt, unresolved=unresolved_of[run_id], named=named[run_id]
            )
            for run_id in {*named, *(s.run_id for s in shown[-RUN_LIMIT:])}
        }

    survey = read.survey(keep)
    effects = survey.effects
    broken = {s.run_id for s in survey.runs if s.problem} | set(effects.problems)
    summaries = _choose(
        survey.runs, effects, runs, unresolved=unresolved, since=since, broken=broken
    )
    shown = {s.run_id for s in summaries}
    checked = survey.verify
    by_run: dict[str, list[str]] = defaultdict(list)
    store_problems = []
    for problem in checked.problems:
        run_id = problem.removeprefix("run ").split(":", 1)[0] if problem.startswith("run ") else ""
        if run_id in shown:
            by_run[run_id].append(problem.split(": ", 1)[1])
        elif not run_id:
            store_problems.append(problem)
    others = sum(1 for p in checked.problems if p.startswith("run ")) - sum(
        map(len, by_run.values())
    )
    if others:
        store_problems.append(f"{others} problem(s) in runs this page does not show")
    loaded = {
        run_id: run
        for run_id, run in survey.kept.items()
        if run_id in shown and run_id not in broken
    }
    rows = [row for row in effects if row.run_id in shown]
    drawn = {s.run_id for s in summaries[-RUN_LIMIT:]}
    pages = [
        run_page(
            loaded.get(s.run_id),
            i,
            s,
            by_run[s.run_id],
            draw=s.run_id in drawn,
        )
        for i, s in enumerate(summaries)
    ]
    index = {p.summary.run_id: p.index for p in pages if p.timeline is not None}
    store = shell_word(str(directory))
    needs = needs_person(rows, read.held)
    # Read apart (every run holding one validated, their states by the store's clock).
    asked = _inspect.list_approvals(directory, every=True)
    return Report(
        store=directory,
        generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        asked=_asked(runs, unresolved=unresolved, since=since),
        verify=checked,
        store_problems=tuple(store_problems),
        attention=tuple(
            _attention(a, index.get(a.row.run_id), loaded.get(a.row.run_id), store)
            for a in needs[:ATTENTION_LIMIT]
        ),
        attention_total=len(needs),
        incidents=tuple(
            _incident(row, index.get(row.run_id), loaded.get(row.run_id), store)
            for row in rows[:INCIDENT_LIMIT]
        ),
        incidents_total=len(rows),
        runs=tuple(pages),
        drawn=len(index),
        approvals=tuple(v for v in asked if v.run_id in shown and v.run_id not in broken),
    )


def _listed_first(rows: Sequence[_inspect.EffectRow]) -> list[_inspect.EffectRow]:
    """The rows that may be among the first of what needs a person, whoever holds their run.

    The most urgent escalations, as ``needs_person`` orders them, and the first claims
    of each run waiting for an outcome (whether its writer is gone is asked later; those
    listed are in claim order).
    """
    escalations = needs_person((r for r in rows if r.next_step == "escalate"), lambda _: set())
    waiting: dict[str, list[_inspect.EffectRow]] = defaultdict(list)
    for row in rows:
        if row.next_step == "wait" and len(waiting[row.run_id]) < ATTENTION_LIMIT:
            waiting[row.run_id].append(row)
    return [a.row for a in escalations[:ATTENTION_LIMIT]] + [
        row for found in waiting.values() for row in found
    ]


def _asked(runs: Sequence[str], *, unresolved: bool, since: str | None) -> str:
    what = "every run" if not runs else "run " + ", ".join(runs)
    if unresolved:
        what += " with an effect whose impact is unresolved"
    if since is not None:
        what += f" that wrote since {since}"
    return what


def _target(claim: EffectClaim | None) -> tuple[str, ...]:
    """What the call touches (its impact scope) and the arguments it was called with."""
    if claim is None:
        return ()
    what = [f"{r.role}: {_text.shortened(r.locator, TARGET_LIMIT)}" for r in claim.impact_scope]
    if claim.args is not None:
        what.append(f"args: {recorded(claim.args, TARGET_LIMIT)}")
    return tuple(what)


def _settle(
    row: _inspect.EffectRow, store: str, *, abandoned: bool = False
) -> tuple[str, tuple[str, ...]]:
    """What settles an effect a person must look at, and the exact commands to type.

    ``abandoned``: its writer is gone before it ended (``status --attention`` says so).
    """
    at = f"--store {store}"
    if abandoned:
        return (
            "its writer is gone: mark it interrupted, then check whether it landed:",
            (f"ledger recover {row.run_id} {at}",),
        )
    if row.execution is None:
        return (
            "once its worker is dead, mark it interrupted, then check whether it landed:",
            (f"ledger recover {row.run_id} {at}",),
        )
    resolve = f"ledger resolve {row.run_id} {shlex.quote(row.effect_id)}"
    return (
        "check whether it landed, then record what you found:",
        (
            f'{resolve} --applied --by "$USER" {at}',
            f'{resolve} --not-applied --by "$USER" {at}',
        ),
    )


_NOT_BELIEVED = (
    "its run does not validate: no verdict or decision of it is believed",
    "find what changed the run before acting on any of its effects:",
)


def _attention(a: Attention, run_index: int | None, run: Loaded | None, store: str) -> Needs:
    if a.row.run_problem is not None:
        verify = (f"ledger verify --store {store}",)
        return Needs(a, run_index, (), _NOT_BELIEVED[0], _NOT_BELIEVED[1], verify)
    step, commands = _settle(a.row, store, abandoned=a.row.next_step == "wait")
    claim = None if run is None else run.claims.get(a.row.effect_id)
    return Needs(a, run_index, _target(claim), a.reason, step, commands)


def _incident(
    row: _inspect.EffectRow, run_index: int | None, run: Loaded | None, store: str
) -> Incident:
    if row.run_problem is not None:
        # Recovering or resolving it would be refused: the run must be looked into first.
        return Incident(
            row, run_index, _NOT_BELIEVED[0], _NOT_BELIEVED[1], (f"ledger verify --store {store}",)
        )
    step, commands = _settle(row, store)
    if run is None:  # not kept by the survey: no reason or target, the commands hold
        return Incident(row, run_index, "", step, commands)
    claim = run.claims.get(row.effect_id)
    return Incident(row, run_index, run.reason(row.effect_id), step, commands, _target(claim))
