"""The page of ``ledger report`` as data: what it shows, and how much of a large store.

:mod:`ledger._report.assemble` fills it from one survey of the store,
:mod:`ledger._report.html` renders it; neither needs the other's details. The limits
here are what keeps the page of a large run summarised, not dumped.
"""

from __future__ import annotations

import dataclasses

from ledger import _inspect, storage
from ledger._report.attention import Attention
from ledger.effects import ApprovalView

__all__ = [
    "ATTENTION_LIMIT",
    "GAP_S",
    "INCIDENT_LIMIT",
    "LABEL_W",
    "LANE_H",
    "LANE_LIMIT",
    "LEFT",
    "OBSERVATION_MARKS",
    "RIGHT",
    "RUN_LIMIT",
    "TABLE_LIMIT",
    "TARGET_LIMIT",
    "TITLE_VALUE_LIMIT",
    "TOP",
    "VALUE_LIMIT",
    "VERDICT_W",
    "WIDTH",
    "Incident",
    "Lane",
    "Link",
    "Mark",
    "Needs",
    "Report",
    "Row",
    "RunPage",
    "Tick",
    "Timeline",
]

LANE_LIMIT = 200
TABLE_LIMIT = 1000
RUN_LIMIT = 20
ATTENTION_LIMIT = 200  # rows of the list of what needs a person; `status --attention` has all
INCIDENT_LIMIT = 200  # rows of the incident table; `status --unresolved` has all
OBSERVATION_MARKS = 40  # per lane: a file observed every second would bury its lane
# How much of a recorded value (a claim's arguments, an outcome's result) the page shows:
# in a record's table row, and in a mark's tooltip. `ledger show --json` has it whole.
VALUE_LIMIT = 2000
TITLE_VALUE_LIMIT = 200
TARGET_LIMIT = 120  # a target or the arguments, in a row of the two lists at the top
GAP_S = 10.0  # a pause between two records at least this long is marked on the timeline

# SVG geometry, in user units (the drawing scales to the page's width).
WIDTH = 1200.0
LABEL_W = 260.0
VERDICT_W = 130.0
LANE_H = 22.0
TOP = 34.0
LEFT = LABEL_W + 10.0
RIGHT = WIDTH - VERDICT_W - 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Mark:
    """One record drawn on a lane: where, what shape, and its fields for the tooltip."""

    x: float
    shape: str  # claim, success, failed, running, interrupted, observation, evidence
    title: str


@dataclasses.dataclass(frozen=True, slots=True)
class Lane:
    """One effect on the timeline, from its claim to its outcome."""

    effect_id: str
    operation: str
    verdict: str
    unresolved: bool
    y: float
    x0: float
    x1: float
    settled: bool  # a terminal outcome ends the lane; else it runs on, dashed
    interrupted: str | None  # "recovery" or "worker" when the outcome says interrupted
    marks: tuple[Mark, ...]
    title: str


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """A label on the timeline's axis, or a pause between two records."""

    x: float
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    """A run drawn in SVG: lanes, observations of no claimed target, axis and pauses."""

    lanes: tuple[Lane, ...]
    strays: tuple[Mark, ...]  # observations of resources no effect of the run claims
    strays_y: float | None
    ticks: tuple[Tick, ...]
    gaps: tuple[Tick, ...]
    height: float
    effects: int  # how many the run claimed; more than len(lanes) when capped


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """An effect a record names (the one it retries, a retry of it), and its row if listed."""

    label: str
    effect_id: str
    anchor: str | None  # the id of its claim's row on the page, when the table lists it


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One record in a run's table."""

    seq: int
    recorded_at: str
    kind: str
    ident: str
    action: str | None
    fields: tuple[tuple[str, str], ...]
    verdict: str | None  # the verdict of the effect it belongs to, for filtering
    anchor: str = ""  # its element id: "r" run index "-" seq, numbers only
    links: tuple[Link, ...] = ()
    claim_anchor: str | None = None  # the row of the claim of the effect it names


@dataclasses.dataclass(frozen=True, slots=True)
class Incident:
    """An effect with unresolved impact, and what an operator can do about it today."""

    row: _inspect.EffectRow
    run_index: int | None  # the run's section on the page, when the run is drawn
    reason: str  # why its decision is what it is, as `decide` says
    step: str  # what the commands do
    commands: tuple[str, ...]  # the exact commands to type
    target: tuple[str, ...] = ()  # its impact scope and recorded arguments


@dataclasses.dataclass(frozen=True, slots=True)
class Needs:
    """An effect a person must act on (``ledger status --attention``), and how to settle it."""

    attention: Attention
    run_index: int | None
    target: tuple[str, ...]
    reason: str  # why it needs a person, or why its run is not believed
    step: str
    commands: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RunPage:
    """A run's summary, and its timeline and records when it is drawn."""

    index: int
    summary: _inspect.RunSummary
    problems: tuple[str, ...]  # why it does not validate, from verify, runs or show
    records: int
    timeline: Timeline | None
    rows: tuple[Row, ...]
    verdicts: dict[str, int]
    resolutions: tuple[Row, ...] = ()  # a person's word on an effect: who, when, the note
    resolution_count: int = 0

    @property
    def verified(self) -> bool:
        """Whether its rows and hash chain validated, as ``ledger verify`` checks them."""
        return not self.problems


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """Everything the page shows."""

    store: storage.Location
    generated_at: str
    asked: str
    verify: _inspect.VerifyReport
    store_problems: tuple[str, ...]
    attention: tuple[Needs, ...]  # what needs a person, most urgent first (at most ATTENTION_LIMIT)
    attention_total: int
    incidents: tuple[Incident, ...]  # at most INCIDENT_LIMIT
    incidents_total: int
    runs: tuple[RunPage, ...]
    drawn: int
    # Every approval request of the runs shown that validate, oldest first, its state by
    # the store's clock when the page was written; the pending ones need a person.
    approvals: tuple[ApprovalView, ...] = ()

    def index_of(self, run_id: str) -> int | None:
        """The section of the run on the page, when the run is drawn."""
        for page in self.runs:
            if page.summary.run_id == run_id and page.timeline is not None:
                return page.index
        return None

    @property
    def waiting(self) -> tuple[ApprovalView, ...]:
        """The approval requests that wait for a person's answer."""
        return tuple(a for a in self.approvals if a.state == "pending")

    @property
    def unvalidated(self) -> dict[str, str]:
        """The runs shown that do not validate, each with its first problem."""
        return {r.summary.run_id: r.problems[0] for r in self.runs if r.problems}
