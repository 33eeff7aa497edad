"""The ledger side of ``ledger mcp-proxy``: one run per proxy, its claims, recovery and guard.

A proxy's effects carry its NAME in their action id (``mcp-proxy/NAME/EFFECT``): that
is how a proxy started later with the same NAME finds the runs of its predecessors, to
recover the ones a dead proxy left unsettled and to refuse a blind repeat of a call
whose fate a person must settle first. Nothing here knows MCP; :mod:`ledger._mcp.proxy`
speaks the protocol and calls this module.

A person may settle an effect of the live run (``ledger resolve``) while the proxy
holds it: the store then holds a record this log does not know, and the log's next
write is refused. The proxy then loads the run again and writes once more, so a
resolution never stops the proxy.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from pathlib import Path

from ledger import _inspect, _telemetry, storage
from ledger._paths import DB_NAME
from ledger._run.index import RunIndex
from ledger._run.recorded import MAX_RECORDED_BYTES, recordable
from ledger.effect_log import EffectLog, OutcomeRequest, new_effect_id, new_run_id
from ledger.effects import (
    ApprovalPolicy,
    ApprovalSource,
    EffectClaim,
    EffectKind,
    ExecutionOutcome,
    History,
    Impact,
    NextStep,
    OperationRef,
    ResolutionOrigin,
    args_digest,
    check_identifier,
    resource_ref,
)
from ledger.errors import ApprovalPending, EffectPersistenceError
from ledger.resources import ExternalResource

__all__ = [
    "MAX_NAME",
    "REFUSAL_META",
    "Earlier",
    "ProxyRun",
    "Refusal",
    "action_prefix",
    "check_name",
]

_ACTION = "mcp-proxy/{name}/"
MAX_NAME = 100  # the action id (prefix, name, 32-hex effect id) stays an identifier
# The ``_meta`` key of a refused call's answer: the run and effect that block it.
REFUSAL_META = "ledger/refusal"


def action_prefix(name: str) -> str:
    """The start of the action id of every effect a proxy named ``name`` claims."""
    return _ACTION.format(name=name)


def check_name(name: str) -> str:
    """``name`` if it can name a proxy's runs; ``ValueError`` otherwise."""
    check_identifier(name, "name")
    if len(name) > MAX_NAME:
        raise ValueError(f"name is longer than {MAX_NAME} characters")
    return name


def _is_named(claim: EffectClaim, name: str) -> bool:
    return claim.action_id == action_prefix(name) + claim.effect_id


def _escalated(run_id: str, history: History, effect_id: str) -> Refusal | None:
    """The refusal an earlier effect calls for: its decision is ESCALATE for the guard.

    The guard takes a person's word only: a resolution the worker wrote itself (or a
    reconciler) is not counted, so an effect settled by nothing else is still escalated.
    """
    claim = history.claim(effect_id)
    if claim is None:
        return None
    index = RunIndex.of(history)
    decision = index.decide(claim)
    if decision.step is NextStep.ESCALATE:
        return Refusal(run_id, effect_id, decision.reason)
    attempts = {a.effect_id for a in index.attempts(claim)}
    unheeded = [r for r in history.resolutions if r.effect_id in attempts and not r.by_person]
    if not unheeded:
        return None
    trusted = dataclasses.replace(
        history, resolutions=tuple(r for r in history.resolutions if r.by_person)
    )
    decision = RunIndex.of(trusted).decide(claim)
    if decision.step is not NextStep.ESCALATE:
        return None
    first = unheeded[0]
    kind = "the worker itself" if first.origin is ResolutionOrigin.WORKER else "a reconciler"
    return Refusal(
        run_id,
        effect_id,
        f"{decision.reason} It was resolved by {kind} ({first.program}, pid {first.pid}, "
        f"as {first.by}), not by a person: the guard takes only a resolution recorded with "
        "`ledger resolve`.",
        self_resolved=True,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Earlier:
    """What starting a proxy did to the earlier runs of its NAME."""

    recovered: tuple[_inspect.Recovery, ...]
    operations: Mapping[tuple[str, str], str]  # (run, effect) -> tool, for the messages


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why an identical call is not forwarded: an earlier effect a person must settle."""

    run_id: str
    effect_id: str
    reason: str
    # Resolved already, by a worker or reconciler: ``ledger resolve`` cannot add a
    # person's word to it (one resolution per effect).
    self_resolved: bool = False

    def message(self, directory: storage.Location) -> str:
        """The tool error the client gets: the effect, why, and how to settle it."""
        store = f" --store {storage.describe(directory)}"
        if self.self_resolved:
            return (
                f"ledger mcp-proxy did not forward this call: an identical call (effect "
                f"{self.effect_id} of run {self.run_id}) may already have happened. "
                f"{self.reason} The effect holds that resolution already, so this call stays "
                f"refused; `ledger show {self.run_id}{store}` shows the run."
            )
        return (
            f"ledger mcp-proxy did not forward this call: an identical call (effect "
            f"{self.effect_id} of run {self.run_id}) may already have happened. {self.reason} "
            f"Check whether it landed, then record what you found with `ledger resolve "
            f"{self.run_id} {self.effect_id} --applied --by NAME{store}` (or --not-applied); "
            f"`ledger show {self.run_id}{store}` shows the run."
        )


class ProxyRun:
    """One proxy's run: claims and outcomes of tool calls, and the guard's memory.

    Thread-safe: the proxy claims from the thread reading the client and records
    outcomes from the thread reading the server.
    """

    def __init__(self, directory: storage.Location, name: str, *, record: bool = True) -> None:
        self.directory = directory
        self.name = check_name(name)
        self.record = record  # a call's arguments and result, as log.effect records them
        self.run_id = new_run_id()
        self._lock = threading.RLock()
        self._log = EffectLog(self.run_id, directory, writer_name=self.name)
        # (tool, args digest) -> effects of earlier runs of this name a person must settle
        self._earlier: dict[tuple[str, str], list[tuple[str, str]]] = {}
        # (tool, args digest) -> effects of this run whose decision was ESCALATE when
        # their outcome was recorded: the only ones of this run the guard must look at
        # again, so a call costs the same however many identical ones went before.
        self._doubtful: dict[tuple[str, str], set[str]] = {}
        self._keys: dict[str, tuple[str, str]] = {}  # effect id -> (tool, args digest)
        # A gated call -> the effect id its pending approval request reserved.
        self._reserved: dict[tuple[str, str, EffectKind, str, str], str] = {}

    # ------------------------------------------------------------------ start

    def start(self) -> Earlier:
        """Recover the earlier runs of this name a dead proxy left, and note what to guard."""
        # A store that does not exist yet holds no earlier run (and is not created here);
        # a PostgreSQL store is asked instead: an empty database has none either.
        if isinstance(self.directory, Path) and not (self.directory / DB_NAME).exists():
            return Earlier((), {})
        reader = _inspect.reader(self.directory)
        named: dict[str, History] = {}

        def history(run_id: str) -> History:
            if run_id not in named:
                named[run_id] = reader.run(run_id)[1]
            return named[run_id]

        dead = [r for r in reader.unsettled() if self._holds_named(history(r))]
        recovered = tuple(r for r in _inspect.recover_dead(self.directory, dead) if r.outcomes)
        operations: dict[tuple[str, str], str] = {}
        for recovery in recovered:
            claims = {c.effect_id: c for c in named[recovery.run_id].claims}
            for outcome in recovery.outcomes:
                operations[recovery.run_id, outcome.effect_id] = claims[
                    outcome.effect_id
                ].operation.name
        # ESCALATE needs an impact no person settled: the incident list holds every
        # candidate, and so do the effects a worker resolved itself (the guard does not
        # take its word).
        for recovery in recovered:
            named.pop(recovery.run_id)  # read again below: recovery wrote to it
        for row in reader.effects(None, unresolved=False):
            if not row.unresolved_impact and row.resolution is None:
                continue
            if not row.unresolved_impact and all(
                r.by_person for r in history(row.run_id).resolutions
            ):
                continue
            claim = history(row.run_id).claim(row.effect_id)
            if claim is not None and _is_named(claim, self.name):
                key = (claim.operation.name, claim.operation.args_sha256)
                self._earlier.setdefault(key, []).append((row.run_id, row.effect_id))
        return Earlier(recovered, operations)

    def _holds_named(self, history: History) -> bool:
        return any(_is_named(c, self.name) for c in history.claims)

    # ------------------------------------------------------------------ the guard

    def refusal(self, tool: str, args: object, kind: EffectKind) -> Refusal | None:
        """Why an identical earlier call forbids forwarding this one, or None.

        Only a ``WRITE`` or ``IRREVERSIBLE`` call is refused, and only while an earlier
        identical effect of this name is to be escalated. The decision is read from the
        store each time, so a resolution recorded meanwhile lets the call through.
        """
        if kind not in (EffectKind.WRITE, EffectKind.IRREVERSIBLE):
            return None
        key = (tool, args_digest({} if args is None else args))
        earlier = self._earlier.get(key, ())
        if earlier:
            reader = _inspect.reader(self.directory)
            for run_id, effect_id in earlier:
                refusal = _escalated(run_id, reader.run(run_id)[1], effect_id)
                if refusal is not None:
                    return refusal
        with self._lock:
            doubtful = self._doubtful.get(key)
            if not doubtful:
                return None
            self._reload()  # a person may have resolved one since this log read the run
            for effect_id in sorted(doubtful):
                decision = self._log.decide(effect_id)
                if decision.step is NextStep.ESCALATE:
                    return Refusal(self.run_id, effect_id, decision.reason)
                # Settled: by a person, or by a worker whose word the guard does not take
                # (rare: the whole run is read only then).
                refusal = _escalated(self.run_id, self._log.history(), effect_id)
                if refusal is not None:
                    return refusal
                doubtful.discard(effect_id)
        return None

    # ------------------------------------------------------------------ records

    def trace_meta(self, effect_id: str) -> dict[str, str]:
        """The W3C trace context of the effect's open span (``{}`` for none), for ``_meta``."""
        return _telemetry.span_meta(self._log, effect_id)

    def claim(
        self,
        tool: str,
        args: object,
        *,
        kind: EffectKind,
        backend: str,
        server: str,
        approval: ApprovalPolicy | None = None,
    ) -> EffectClaim:
        """Claim one tool call, durably; ``ValueError`` for what cannot be claimed.

        With ``approval``, the call is claimed only under a person's grant for its exact
        action, and the claim's effect id is the one its request reserved; without
        one, :class:`ledger.errors.ApprovalPending` (its request written) or
        :class:`ledger.errors.ApprovalDenied`, and nothing is claimed.

        ``server`` names the resource (``mcp://SERVER/TOOL``). The arguments are
        recorded in the claim (unless this run records nothing, or they are too large
        or not JSON-exact: then not, and the call is claimed all the same). Raises
        :class:`EffectPersistenceError` when the claim could not be persisted even after
        loading the run again: then it exists nowhere and the call must not be made.
        """
        args = {} if args is None else args  # no arguments: the tool gets none
        operation = OperationRef(tool, backend, args_digest(args))
        gated = (tool, operation.args_sha256, kind, backend, server)
        with self._lock:
            # A gated call claims the effect id its request reserved: given the same one
            # again, its action id names it, as every proxy effect's does.
            effect_id = self._reserved.get(gated) if approval is not None else None
        effect_id = effect_id or new_effect_id()
        target = resource_ref(ExternalResource(f"mcp://{server}/{tool}"), "target")
        recorded = (
            recordable(args, MAX_RECORDED_BYTES, what=f"the arguments of a call to {tool}")[0]
            if self.record
            else None
        )

        def attempt() -> EffectClaim:
            return self._log.claim(
                effect_id=effect_id,
                action_id=action_prefix(self.name) + effect_id,
                operation=operation,
                impact_scope=[target],
                kind=kind,
                args=recorded,
                approval=approval,
            )

        with self._lock:
            try:
                try:
                    claim = attempt()
                except EffectPersistenceError:
                    self._reload()  # and if the run cannot be loaded, the claim is refused
                    claim = self._log.history().claim(effect_id) or attempt()
            except ApprovalPending as e:
                self._reserved[gated] = e.effect_id
                raise
            if approval is not None:
                self._reserved.pop(gated, None)  # used: the next identical call asks again
            self._keys[claim.effect_id] = (tool, operation.args_sha256)
        return claim

    def answer(self, approval_id: str, *, granted: bool, by: str, note: str = "") -> None:
        """Record the decision the person at the client gave through the proxy's form.

        ``ValueError`` when it cannot be recorded (decided already, or expired), and
        :class:`EffectPersistenceError` when the store fails.
        """

        def attempt() -> None:
            self._log.answer_approval(
                approval_id,
                granted=granted,
                by=by,
                note=note,
                source=ApprovalSource.ELICITATION,
            )

        with self._lock:
            try:
                attempt()
            except EffectPersistenceError:
                # The run moved on (a resolution written meanwhile): load it and answer
                # again; an answer the first attempt did write makes this a ValueError.
                self._reload()
                attempt()

    def settle(
        self,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        *,
        result: object = None,
        answered: bool = False,
    ) -> None:
        """Record the call's outcome; :class:`EffectPersistenceError` if it cannot be persisted.

        ``result`` is the server's result object when it ``answered`` with one: recorded
        (unless this run records nothing, or it is too large or not JSON-exact). Returns
        once the outcome is durable: only then is the client told the answer.
        """
        recorded = False
        if answered and self.record:
            result, recorded = recordable(
                result, MAX_RECORDED_BYTES, what=f"the result of effect {effect_id}"
            )
        self._outcome(effect_id, execution, impact, result if recorded else None, recorded)

    def refused(
        self,
        tool: str,
        args: object,
        *,
        kind: EffectKind,
        backend: str,
        server: str,
        answer: Mapping[str, object],
    ) -> str:
        """Record a call the guard did not forward; the new effect's id.

        The call is claimed as any other (so the run shows what was asked, and when),
        and settled at once as failed with impact none: it never reached the server.
        Its result is ``answer``, the tool error the client gets, recorded even when
        this run records nothing else (the arguments then are not): it is the proxy's
        own text, naming the effect that blocked the call. Raises as :meth:`claim` and
        :meth:`settle` do.
        """
        claim = self.claim(tool, args, kind=kind, backend=backend, server=server)
        result, recorded = recordable(
            dict(answer), MAX_RECORDED_BYTES, what=f"the result of effect {claim.effect_id}"
        )
        self._outcome(claim.effect_id, ExecutionOutcome.FAILED, Impact.NONE, result, recorded)
        return claim.effect_id

    def _outcome(
        self,
        effect_id: str,
        execution: ExecutionOutcome,
        impact: Impact,
        result: object,
        recorded: bool,
    ) -> None:
        request = OutcomeRequest(
            effect_id=effect_id,
            execution=execution,
            impact=impact,
            result=result,
            result_recorded=recorded,
        )
        with self._lock:
            written = True  # this outcome, by this call: the effect's only one
            try:
                # Strict: an outcome that cannot be written raises and leaves the log as it
                # was, rather than degrading it ("nothing more will be written" is not so
                # here): the run is loaded again and the outcome written once more.
                self._log.outcome_many((request,), strict=True)
            except EffectPersistenceError:
                self._reload()
                written = self._log.assess(effect_id).execution is None
                if written:
                    self._log.outcome_many((request,), strict=True)
            if (not written or _may_escalate(execution, impact)) and (
                self._log.decide(effect_id).step is NextStep.ESCALATE
            ):
                self._doubtful.setdefault(self._keys[effect_id], set()).add(effect_id)

    def _reload(self) -> None:
        """Load the run again: the store may hold records another process wrote."""
        with self._lock:
            self._log = self._log.reload()

    def close(self) -> None:
        """Release the run."""
        with self._lock:
            self._log.close()


def _may_escalate(execution: ExecutionOutcome, impact: Impact) -> bool:
    """Whether a call just settled so may be one a person must check.

    A proxy's claim names no postcondition and is never retried, so when this outcome
    is the effect's, the decision rules (``ledger.effects.decide``) give a reported
    success DONE and a failure without effect RETRY, whatever its kind: only the other
    outcomes need deciding.
    """
    return execution is not ExecutionOutcome.REPORTED_SUCCESS and not (
        execution is ExecutionOutcome.FAILED and impact is Impact.NONE
    )
