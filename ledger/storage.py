"""The storage contract: what a log needs of a store, with no driver in sight.

An :class:`~ledger.effect_log.EffectLog` numbers its records, chains them and keeps
the run in memory; a *store* makes a batch of them durable, all or nothing, under
preconditions given as data (:class:`Batch`), reads a run back validated, and holds a
run for a process (:class:`Lease`) so that recovery never runs under a live writer.
How (SQL dialect, transactions, files, locks) is the backend's business; each backend
lives in a subpackage of its own (``ledger.sqlite``) and turns its driver's errors into
the leaves of :class:`~ledger.errors.EffectPersistenceError` in one place.

A backend is found by the kind of location it serves, and imported only when a store
of that kind is opened: the layers above never import a backend.

Internal: not part of the public API, and its names may change between versions; open
a store through :class:`ledger.EffectLog` and the ``ledger`` command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import re
import sys
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ledger._owner import Writer
from ledger.effects import (
    EffectClaim,
    EffectOutcome,
    History,
    Record,
    Resolution,
)
from ledger.errors import EffectPersistenceError, retold

__all__ = [
    "RUN_ID",
    "VERDICTS",
    "ApprovalNotFoundError",
    "ApprovalRuns",
    "Backend",
    "Batch",
    "EffectRow",
    "EffectRows",
    "Head",
    "Keep",
    "Lease",
    "Location",
    "Mode",
    "Reader",
    "Record",
    "RecoveryHold",
    "RunNotFoundError",
    "RunRecords",
    "RunSummary",
    "Shell",
    "ShellMissingError",
    "Store",
    "Survey",
    "Take",
    "VerifyReport",
    "Written",
    "backend",
    "describe",
    "is_url",
    "relabel",
]

Location = Path | str
"""Where a store is: a directory (SQLite), or a URL ``postgresql://...`` (PostgreSQL)."""

_URL = re.compile(r"postgresql(\+psycopg)?://", re.IGNORECASE)
# What a PostgreSQL URL becomes as a Path ("//" folds to "/"), or under another scheme
# name or driver: never a directory to create a SQLite store in.
# (Made absolute, it follows a "/".)
_NOT_A_DIRECTORY = re.compile(r"(^|/)postgres(ql)?(\+\w+)?:/", re.IGNORECASE)


def is_url(location: object) -> bool:
    """Whether ``location`` names a PostgreSQL store (``postgresql[+psycopg]://...``)."""
    return isinstance(location, str) and _URL.match(location) is not None


def describe(location: Location) -> str:
    """The store's name for people: its path, or its URL with the password removed."""
    if not is_url(location):
        return str(location)
    parts = urllib.parse.urlsplit(str(location))
    if parts.password is None:
        return str(location)
    user = urllib.parse.quote(parts.username or "", safe="")
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


# What new_run_id makes and every backend's schema accepts: a run id taken from a caller
# or a file name is held to it before it reaches a store.
RUN_ID = re.compile(r"[0-9a-f]{32}")


# Words of the stores' refusals that the log acts on: every backend's guards
# (ledger._sql.guards) refuse with them, and the log reads them in the errors it is given.
SEQ_TAKEN = "that seq is already recorded in the run"
CHAIN_NOT_EXTENDED = "the record does not extend the chain of its run"
ANSWER_TOO_LATE = "the approval request has expired"
GRANT_LAPSED = "the approval has expired by the store clock"


class Mode(enum.Enum):
    """How a run is held: by its logs (many at once), or by its recovery (alone)."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"


class Lease(Protocol):
    """A run held by this process; gone with the process, whatever kills it."""

    @property
    def held(self) -> bool:
        """Whether the run is still held (not released)."""
        ...

    def release(self) -> None:
        """Stop holding the run (idempotent)."""
        ...


@dataclass(kw_only=True, slots=True)
class Batch:
    """Records of one run to make durable together, and what must hold for them to be.

    ``records`` are numbered and in ``seq`` order, the first following ``head`` (the
    hash of the run's last durable record). The store refuses the whole batch unless
    every precondition holds inside the transaction that writes it.
    """

    action: str  # what the caller is doing, for error messages ("cannot record ...")
    run_id: str
    records: Sequence[Record]
    head: str
    now: str  # when, for the run's row and its writer ("" when the batch writes neither)
    start: bool = False  # the run's first write from this log: create its row
    continuing: bool = False  # the log loaded the run: an existing row is its own
    writer: Writer | None = None  # record this process as the run's writer
    # The run's durable records end at this seq: no one else wrote since the log read it
    # (recovery's condition, and a loaded empty run's first write).
    ends_at: int | None = None
    # History replayed by an import: the run's own times, checked by check_history before
    # it is written, say whether each answer and claim came before its approval expired;
    # the store's clock, long past that expiry by now, has no say (ledger import only).
    imported: bool = False


@dataclass(slots=True)
class Written:
    """How a batch ended: durable (``error`` is None) with the run's new ``head``, or not.

    ``interrupt`` is a signal handler's exception (Ctrl-C) met while the batch was in
    flight: the caller records the batch's fate first, then raises it.
    """

    head: str
    error: BaseException | None = None
    interrupt: BaseException | None = None


class Store(Protocol):
    """One store, shared by every log of this process that uses it."""

    @property
    def directory(self) -> Path | str:
        """The store's name in messages: its directory, or its URL without a password."""
        ...

    def open_existing(self) -> bool:
        """Open a store that exists, for reading and later writing; False if there is none."""
        ...

    def open_for_writing(self) -> None:
        """Create the store if needed, check it, and bring its schema to the newest."""
        ...

    def load_run(self, run_id: str, action: str) -> tuple[History, str]:
        """The run's validated history and its head hash (empty and genesis for none)."""
        ...

    def append(self, batch: Batch) -> Written:
        """Make ``batch`` durable, grouped with other threads' batches; never raises for it."""
        ...

    def hold(self, run_id: str, mode: Mode) -> Lease | None:
        """Hold the run in ``mode`` without waiting; None when another process holds it so."""
        ...

    def now(self, action: str) -> str:
        """The store's clock, in ``utc_now()``'s form: what approvals expire by."""
        ...


# --------------------------------------------------------------------------- forensic reads

VERDICTS = ("pending", "unverified", "contradicted", "verified", "failed")


class RunNotFoundError(ValueError):
    """No run, or more than one, matches the given run id or prefix."""


class EffectNotFoundError(ValueError):
    """No effect of the run, or more than one, matches the given effect id or prefix."""


class ApprovalNotFoundError(ValueError):
    """No approval request of the run, or more than one, matches the given id or prefix."""


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalRuns:
    """The runs that hold approval requests, validated, and the store's clock when read.

    ``histories``: each such run of the scope that validates; ``problems``: each one
    that does not, with why (its approvals are not shown: its rows are not believed).
    ``now``: the store's clock in the same snapshot, what a request's expiry is judged by.
    """

    now: str
    histories: dict[str, History]
    problems: dict[str, str]


class RecoveryHold(enum.Enum):
    """What taking a run for recovery found: taken, or who has it."""

    TAKEN = "taken"
    RECOVERING = "another process is recovering it"
    IN_USE = "a live process has it loaded"


@dataclasses.dataclass(frozen=True, slots=True)
class RunSummary:
    """One run at a glance."""

    run_id: str
    first_at: str | None
    last_at: str | None
    writer: Writer | None
    claims: int
    verdicts: dict[str, int]
    problem: str | None = None  # why the run does not validate: its verdicts are not to be believed

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger runs --json``."""
        return {
            "run_id": self.run_id,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "host": None if self.writer is None else self.writer.host,
            "pid": None if self.writer is None else self.writer.pid,
            "writer_name": None if self.writer is None else self.writer.name,
            "claims": self.claims,
            **self.verdicts,
            "problem": self.problem,
        }


def _shared(value: Any) -> Any:
    """One string object for every row that says the same (run id, operation, verdict).

    A run's 100,000 rows would otherwise hold as many copies of each, read anew.
    """
    return sys.intern(value) if type(value) is str else value


@dataclasses.dataclass(frozen=True, slots=True)
class EffectRow:
    """One claimed effect and its verdict, as the ``effect_status`` view gives it."""

    run_id: str
    seq: int
    effect_id: str
    operation: str
    execution: str | None
    impact: str | None
    verdict: str
    unresolved_impact: bool
    claimed_at: str
    kind: str  # the effect's kind: read, idempotent, write or irreversible
    idempotency_key: str
    resolution: str | None  # a person's word: "applied", "not_applied", or none yet
    next_step: str  # what the worker should do next: done, wait, retry or escalate
    run_problem: str | None = None  # why its run does not validate: the verdict is not believed
    step: str = ""  # the call's step, its identity across restarts ("" for a claim without)

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger status --json``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_view(cls, row: Sequence[Any], run_problem: str | None = None) -> EffectRow:
        """The row of a backend's ``effect_status`` query, its columns in field order."""
        (run_id, seq, effect_id, operation, execution, impact, verdict, unresolved) = row[:8]
        (claimed_at, kind, key, resolution, next_step, step) = row[8:14]
        return cls(
            run_id=_shared(run_id),
            seq=seq,
            effect_id=effect_id,
            operation=_shared(operation),
            execution=_shared(execution),
            impact=_shared(impact),
            verdict=_shared(verdict),
            unresolved_impact=bool(unresolved),
            claimed_at=claimed_at,
            kind=_shared(kind),
            idempotency_key=key,
            resolution=_shared(resolution),
            next_step=_shared(next_step),
            run_problem=run_problem,
            step=step,
        )


class EffectRows(list[EffectRow]):
    """The rows :meth:`Reader.effects` found, and every run of its scope that does not validate.

    ``problems`` maps each such run to why, whether or not a row here is of it: a run
    whose forged row settled its last open effect has no unresolved row left to carry
    its ``run_problem``, and must still be named.
    """

    def __init__(
        self, rows: Iterable[EffectRow] = (), problems: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(rows)
        self.problems: dict[str, str] = dict(problems or {})

    @classmethod
    def of(
        cls, found: Iterable[EffectRow], problems: Mapping[str, str], *, unresolved: bool
    ) -> EffectRows:
        """The rows to show of ``found`` (every effect of the scope, oldest claim first).

        ``unresolved`` keeps the effects whose impact is unresolved, and every effect of
        a run that does not validate: its verdicts are not believed, resolved ones no
        more than the others.
        """
        rows = [
            row
            if row.run_problem == problems.get(row.run_id)
            else dataclasses.replace(row, run_problem=problems.get(row.run_id))
            for row in found
            if not unresolved or row.unresolved_impact or row.run_id in problems
        ]
        return cls(rows, problems)


@dataclasses.dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of checking a whole store."""

    runs: int
    records: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the store passed every check."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger verify --json``."""
        return {
            "ok": self.ok,
            "runs": self.runs,
            "records": self.records,
            "problems": list(self.problems),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Head:
    """The last record of a run: what to keep elsewhere to detect a rewritten history."""

    run_id: str
    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.run_id}:{self.seq}:{self.hash}"

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape of ``ledger head --json``."""
        return {"run_id": self.run_id, "seq": self.seq, "hash": self.hash, "anchor": str(self)}

    @classmethod
    def parse(cls, text: str) -> Head:
        """Read an anchor ``RUN:SEQ:HASH`` (RUN may be a unique prefix)."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not re.fullmatch(r"[0-9a-f]{64}", parts[2]):
            raise RunNotFoundError(
                f"{text!r} is not an anchor RUN:SEQ:HASH (as ledger head prints)"
            )
        return cls(parts[0], int(parts[1]), parts[2])


@dataclasses.dataclass(frozen=True, slots=True)
class Shell:
    """The store's own interactive client, read-only: what to run, and what to tell first."""

    argv: list[str]
    notes: tuple[str, ...] = ()
    # Whether the client must be waited for (it reads a private copy removed afterwards)
    # rather than replace this process.
    wait: bool = False


class ShellMissingError(LookupError):
    """The store's interactive client is not installed."""


K = TypeVar("K")
K_co = TypeVar("K_co", covariant=True)


class RunRecords(Protocol):
    """Reads of one run in the survey's snapshot, for what a :class:`Take` keeps of it.

    Before the run has validated they only choose what to keep; nothing read is shown
    unless the run validates.
    """

    def observed(self) -> set[tuple[str, str]]:
        """The (kind, locator) of every resource the run's observations name."""
        ...

    def claims(self, effect_ids: Collection[str]) -> list[EffectClaim]:
        """The claims of ``effect_ids``, in seq order."""
        ...

    def overlapping(self, targets: Collection[tuple[str, str]]) -> set[str]:
        """The effects whose impact scope may overlap one of ``targets`` (kind, locator).

        At least those the run's index (``RunIndex``) finds overlapping them, maybe more.
        """
        ...

    def outcomes(self, effect_ids: Collection[str]) -> list[EffectOutcome]:
        """The outcomes of ``effect_ids``, in seq order."""
        ...

    def resolutions(self) -> Iterator[Resolution]:
        """The run's resolutions, in seq order, as they are read."""
        ...

    def times(self) -> Iterator[tuple[int, str | None]]:
        """The seq and time of every record of the run, in seq order, as they are read."""
        ...


class Take(Protocol[K_co]):
    """What a survey keeps of one run: shown each record as the run is validated, then done."""

    def see(self, record: Record) -> bool:
        """One record, as validation builds it; True keeps it whole for the taker to hold.

        Claims, outcomes, observations, resolutions, each in seq order; a record not
        kept is let go.
        """
        ...

    def done(self) -> K_co:
        """What is kept, once the run has validated (never called if it does not)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Survey(Generic[K]):
    """A whole store read in one snapshot, each run read and validated once (``ledger report``).

    ``verify`` is what :meth:`Reader.verify` finds (without anchors); ``runs`` are the
    summaries of :meth:`Reader.runs`; ``effects`` the rows of
    ``Reader.effects(None, unresolved=True)``; ``kept`` what the caller took of each run
    it picked that validates.
    """

    verify: VerifyReport
    runs: list[RunSummary]
    effects: EffectRows
    kept: dict[str, K]


Keep = Callable[[Sequence[RunSummary], EffectRows], Mapping[str, Callable[[RunRecords], Take[K]]]]
"""What a survey keeps of which runs, picked from the summaries and the unresolved effects
before any run is validated (their ``problem`` is not set yet): for each run picked, a
:class:`Take`, made (with the run's reads) just before the run is validated."""


def survey_of(
    summaries: list[RunSummary],
    keep: Keep[K],
    status_rows: Callable[[str], list[EffectRow]],
    check: Callable[
        [Mapping[str, Callable[[RunRecords], Take[K]]]],
        tuple[VerifyReport, dict[str, str], dict[str, K]],
    ],
    judge: Callable[[Iterable[str]], dict[str, str]],
) -> Survey[K]:
    """A backend's :meth:`Reader.survey`, from its reads of one snapshot.

    ``status_rows(where)`` gives the ``effect_status`` rows a WHERE clause (or ``""``)
    picks; ``check(keep)`` verifies the store, each run once: the report, each run's
    problem, and what ``keep`` takes of each run it names that validates; ``judge(runs)``
    the problems of runs outside ``runs`` (records without their run).
    """
    unresolved = status_rows("WHERE unresolved_impact = 1")
    wanted = keep(summaries, EffectRows(unresolved))
    known = {s.run_id for s in summaries}
    checked, problems, kept = check(wanted)
    problems |= judge({row.run_id for row in unresolved} - known)
    if problems:  # every effect of a run that does not validate is shown
        found = status_rows("")
        problems |= judge({row.run_id for row in found} - known)
        effects = EffectRows.of(found, dict(sorted(problems.items())), unresolved=True)
    else:
        # The rows read first, of the same snapshot: the view's verdicts cost a scan of
        # the whole store (a third of a 100,000-effect report), not made twice.
        effects = EffectRows(unresolved)  # unresolved ones only, none to mark
    return Survey(
        checked,
        [dataclasses.replace(s, problem=problems.get(s.run_id)) for s in summaries],
        effects,
        kept,
    )


class Reader(Protocol):
    """What the ``ledger`` command reads of a store; it never writes, nor trusts the store.

    Every run shown is validated (rows and hash chain) as ``EffectLog.load`` validates
    it; reports use the library's own queries, never views found in the store. A run is
    named by its id or a unique prefix of it (:class:`RunNotFoundError` otherwise).
    """

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, with its writer, verdict counts and any problem."""
        ...

    def run(self, prefix: str) -> tuple[str, History, Writer | None]:
        """The matching run: its id, validated history and last writer."""
        ...

    def effects(self, prefix: str | None, *, unresolved: bool) -> EffectRows:
        """Effects across runs (or of one), oldest claim first; optionally unresolved only.

        Every run of the scope is validated, each one that does not is in the result's
        ``problems`` (and its rows carry it); with ``unresolved``, all its effects are
        shown (:meth:`EffectRows.of`).
        """
        ...

    def writer(self, prefix: str) -> tuple[str, Writer | None]:
        """The matching run's id and last writer."""
        ...

    def now(self) -> str:
        """The store's clock, in ``utc_now()``'s form: what approvals expire by."""
        ...

    def approvals(self, prefix: str | None) -> ApprovalRuns:
        """The runs (or the one run) holding approval requests, validated, and the clock.

        Every run read is validated as ``EffectLog.load`` validates it; the store's
        clock is read in the same snapshot.
        """
        ...

    def unsettled(self) -> list[str]:
        """Runs holding a claim with no outcome at all (recovery's candidates)."""
        ...

    def held(self, run_ids: Iterable[str]) -> set[str]:
        """Those of ``run_ids`` a live process holds (has loaded, or recovers).

        Asked, never taken: a worker starting meanwhile is not stopped by the question.
        """
        ...

    def head(self, prefix: str) -> Head:
        """The matching run's head, after checking its whole chain."""
        ...

    def verify(
        self, progress: Callable[[int], None] | None, anchors: tuple[Head, ...]
    ) -> VerifyReport:
        """Check the files, the schema, every row and chain of every run, and anchors."""
        ...

    def run_count(self) -> int:
        """How many runs the store holds."""
        ...

    def recovering(self, run_id: str) -> contextlib.AbstractContextManager[RecoveryHold]:
        """Take the run for recovery while the block runs, or say who has it."""
        ...

    def shell(self, args: Sequence[str]) -> contextlib.AbstractContextManager[Shell]:
        """The store's interactive client, read-only and safe, with ``args`` passed on."""
        ...

    def query_command(self, query: str) -> list[str]:
        """The command line that prints ``query``'s rows with the store's own client."""
        ...

    def survey(self, keep: Keep[K]) -> Survey[K]:
        """The store in one snapshot: its checks, runs, unresolved effects and what is kept.

        Every run is read and validated once, for all of these; of each run ``keep``
        names (given the summaries and the unresolved effects, before validation) that
        validates, what its :class:`Take` keeps as the run is validated.
        """
        ...


class Backend(Protocol):
    """Opens and closes the stores of one kind, each shared within the process."""

    def acquire(self, directory: Location) -> Store:
        """The process's store at ``directory``, one more user counted."""
        ...

    def release(self, store: Store) -> None:
        """One user fewer; the last one closes the store's connections."""
        ...

    def reader(self, directory: Location) -> Reader:
        """The forensic reads of the store at ``directory``."""
        ...

    def unsynchronised(self, directory: Location) -> contextlib.AbstractContextManager[None]:
        """For ``ledger bench`` only: the store opened inside the block skips the disk flush."""
        ...


def relabel(action: str, error: EffectPersistenceError) -> EffectPersistenceError:
    """The same kind of storage trouble, told as part of ``action``: a new error per caller."""
    return retold(error, action)


# Backends by the kind of location they serve, imported when first needed.
_BACKENDS = {"directory": "ledger.sqlite", "postgresql": "ledger.postgresql"}
# The extra that installs a backend's driver, for the message when it is missing.
_EXTRAS = {"postgresql": ("psycopg", "tool-ledger[postgresql]")}


def backend(directory: Location) -> Backend:
    """The backend serving the store at ``directory`` (a directory, or a URL)."""
    kind = "postgresql" if is_url(directory) else "directory"
    if kind == "directory" and _NOT_A_DIRECTORY.search(str(directory)):
        raise ValueError(
            f"{describe(str(directory))!r} is not a store directory: a PostgreSQL store is "
            "named by a str URL postgresql://... (not a Path, nor postgres://)"
        )
    try:
        module = importlib.import_module(_BACKENDS[kind])
    except ModuleNotFoundError as e:
        driver, extra = _EXTRAS.get(kind, ("", ""))
        if not driver or (e.name or "").split(".")[0] != driver:
            raise
        raise EffectPersistenceError(
            f"a {kind} store needs the {driver} driver, which is not installed: "
            f"pip install '{extra}'"
        ) from e
    found: Backend = module.BACKEND
    return found
