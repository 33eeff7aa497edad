"""The record types: what a run holds (claims, outcomes, observations, resolutions).

Each is a frozen dataclass validated when built and converted exactly with
``to_dict()`` / ``from_dict()``; :data:`Record` is any of the four a run is made of.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from typing import Any, ClassVar, Self

from ledger._core.approvals import ApprovalDecision, ApprovalRequest, check_process
from ledger._core.enums import (
    Coverage,
    EffectKind,
    ExecutionOutcome,
    Impact,
    ObservationMechanism,
    Predicate,
    ResolutionOrigin,
)
from ledger._core.values import (
    RESOURCE_KINDS,
    InvalidTypeError,
    _build,
    _check_enum,
    _check_hex64,
    _check_key,
    _check_optional_bool,
    _check_seq,
    _check_str,
    _check_timestamp,
    _Fields,
    _frozen,
    _recorded,
    _tuple_of,
    check_identifier,
    check_step,
    check_traceparent,
)

_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceRef:
    """A resource an effect may touch or an observation saw.

    ``kind`` is ``"fs"`` (``locator`` is a normalised absolute path),
    ``"owned"`` (``locator`` joins an application record's identity) or
    ``"external"`` (``locator`` is a URI of another system's resource). ``role``
    says how the effect relates to it; ``revision`` is the record revision the
    reference points at, when known.
    """

    kind: str
    locator: str
    role: str
    revision: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str):
            raise InvalidTypeError(f"kind must be a str, not {type(self.kind).__name__}")
        if self.kind not in RESOURCE_KINDS:
            raise ValueError(
                f"kind must be one of {', '.join(RESOURCE_KINDS)}, got {self.kind!r:.40}"
            )
        _check_str(self.locator, "locator")
        if self.kind == "fs" and (
            not self.locator.startswith("/")
            or self.locator.startswith("//")
            or posixpath.normpath(self.locator) != self.locator
        ):
            raise ValueError(
                f"an fs locator must be a normalised absolute path: {self.locator!r:.80}"
            )
        if self.kind == "external" and (
            not _URI_SCHEME.match(self.locator)
            or any(c.isspace() or not c.isprintable() for c in self.locator)
        ):
            raise ValueError(
                "an external locator must be a URI with a scheme and no white space or "
                f"control characters: {self.locator!r:.80}"
            )
        check_identifier(self.role, "role")
        check_identifier(self.revision, "revision", optional=True)

    def to_dict(self) -> dict[str, Any]:
        """Return the reference as JSON types."""
        return {
            "kind": self.kind,
            "locator": self.locator,
            "role": self.role,
            "revision": self.revision,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a reference from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            kind=f.raw("kind"),
            locator=f.raw("locator"),
            role=f.raw("role"),
            revision=f.raw("revision"),
        )

    def same_target(self, other: ResourceRef) -> bool:
        """Whether both name the same resource (role and revision aside)."""
        return self.kind == other.kind and self.locator == other.locator


def overlaps(a: ResourceRef, b: ResourceRef) -> bool:
    """Whether two references may name intersecting resources.

    Kinds must be equal; then the locators are equal, or (for ``fs`` and
    ``external``) one is a prefix of the other that ends at a ``/`` of it: an
    ancestor directory, or a URI above another. The locator ``/`` is every
    path's ancestor. Role and revision do not matter.
    """
    if a.kind != b.kind:
        return False
    if a.locator == b.locator:
        return True
    if a.kind == "owned":
        return False
    short, long = sorted((a.locator, b.locator), key=len)
    return long.startswith(short) and (short.endswith("/") or long[len(short)] == "/")


def resource_ref(resource: object, role: str) -> ResourceRef:
    """Return the :class:`ResourceRef` of a ``FilesystemResource`` or ``OwnedResource``."""
    to_ref = getattr(resource, "to_ref", None)
    if to_ref is None or not callable(to_ref):
        raise InvalidTypeError(
            f"resource must be a FilesystemResource or OwnedResource, not {type(resource).__name__}"
        )
    ref = to_ref(role)
    if not isinstance(ref, ResourceRef):
        raise InvalidTypeError("resource.to_ref() did not return a ResourceRef")
    return ref


@dataclasses.dataclass(frozen=True, slots=True)
class OperationRef:
    """The tool call an effect makes: its name, backend label and argument digest."""

    name: str
    backend: str
    args_sha256: str

    def __post_init__(self) -> None:
        check_identifier(self.name, "operation name")
        if not isinstance(self.backend, str):
            raise InvalidTypeError(f"backend must be a str, not {type(self.backend).__name__}")
        if self.backend:
            check_identifier(self.backend, "backend")
        _check_hex64(self.args_sha256, "args_sha256")

    def to_dict(self) -> dict[str, Any]:
        """Return the operation as JSON types."""
        return {"name": self.name, "backend": self.backend, "args_sha256": self.args_sha256}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an operation from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls, name=f.raw("name"), backend=f.raw("backend"), args_sha256=f.raw("args_sha256")
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Postcondition:
    """What should hold of ``target`` once the effect has happened."""

    target: ResourceRef
    predicate: Predicate
    expected: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, ResourceRef):
            raise InvalidTypeError(
                f"target must be a ResourceRef, not {type(self.target).__name__}"
            )
        _check_enum(self.predicate, Predicate, "predicate")
        if self.predicate is Predicate.SHA256:
            if self.expected is None:
                raise ValueError("a SHA256 postcondition needs expected (64 hex characters)")
            _check_hex64(self.expected, "expected")
        elif self.predicate is Predicate.REVISION:
            if self.expected is None:
                raise ValueError("a REVISION postcondition needs expected (the revision)")
            check_identifier(self.expected, "expected")
        elif self.expected is not None:
            raise ValueError(f"a {self.predicate.name} postcondition takes no expected value")

    def to_dict(self) -> dict[str, Any]:
        """Return the postcondition as JSON types."""
        return {
            "target": self.target.to_dict(),
            "predicate": self.predicate.value,
            "expected": self.expected,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a postcondition from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            target=ResourceRef.from_dict(f.raw("target")),
            predicate=f.enum("predicate", Predicate),
            expected=f.raw("expected"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EffectClaim:
    """The durable promise, written before the call, that an effect is about to happen."""

    effect_id: str
    seq: int
    action_id: str
    operation: OperationRef
    impact_scope: tuple[ResourceRef, ...]
    obligations: tuple[Postcondition, ...]
    recorded_at: str
    kind: EffectKind = EffectKind.WRITE
    # Empty only on a claim built by hand: the log gives every claim its key.
    idempotency_key: str = ""
    retry_of: str | None = None
    # The call's identity across restarts ("" for a claim made without one), and its
    # arguments as recorded (None: not recorded). Both are stored and chained.
    step: str = ""
    args: Any = dataclasses.field(default=None, hash=False)
    # The caller's trace context when it claimed (W3C traceparent; None: none known), so
    # that a span for the effect, even one recovery makes in another process, joins the
    # caller's trace. Stored and chained.
    traceparent: str | None = None
    # The approval it was made under (an ApprovalRequest of the run, granted and used by
    # this claim alone; None: made without one). Stored and chained.
    approval_id: str | None = None

    record_type: ClassVar[str] = "claim"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        check_identifier(self.action_id, "action_id")
        if not isinstance(self.operation, OperationRef):
            raise InvalidTypeError(
                f"operation must be an OperationRef, not {type(self.operation).__name__}"
            )
        _frozen(self, "impact_scope", _tuple_of(self.impact_scope, ResourceRef, "impact_scope"))
        _frozen(self, "obligations", _tuple_of(self.obligations, Postcondition, "obligations"))
        _check_timestamp(self.recorded_at)
        _check_enum(self.kind, EffectKind, "kind")
        _check_key(self.idempotency_key)
        check_identifier(self.retry_of, "retry_of", optional=True)
        if self.retry_of == self.effect_id:
            raise ValueError(f"effect {self.effect_id!r} cannot be a retry of itself")
        check_step(self.step)
        _frozen(self, "args", _recorded(self.args, "args"))
        if self.traceparent is not None:  # nearly every claim: no call for it
            check_traceparent(self.traceparent)
        if self.approval_id is not None:
            check_identifier(self.approval_id, "approval_id")

    def to_dict(self) -> dict[str, Any]:
        """Return the claim as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "action_id": self.action_id,
            "operation": self.operation.to_dict(),
            "impact_scope": [r.to_dict() for r in self.impact_scope],
            "obligations": [p.to_dict() for p in self.obligations],
            "recorded_at": self.recorded_at,
            "kind": self.kind.value,
            "idempotency_key": self.idempotency_key,
            "retry_of": self.retry_of,
            "step": self.step,
            "args": self.args,
            "traceparent": self.traceparent,
            "approval_id": self.approval_id,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a claim from :meth:`to_dict` output.

        A claim written before kinds existed reads as a ``WRITE`` with no retry and an
        empty key (the import gives it the key its run and effect id derive); one written
        before steps existed has no step and no recorded arguments, and one written before
        trace contexts were stored has none, nor one written before approvals an approval.
        """
        later = {
            "kind": EffectKind.WRITE.value,
            "idempotency_key": "",
            "retry_of": None,
            "step": "",
            "args": None,
            "traceparent": None,
            "approval_id": None,
        }
        f = _Fields(data, cls, later=later)
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            action_id=f.raw("action_id"),
            operation=OperationRef.from_dict(f.raw("operation")),
            impact_scope=f.items("impact_scope", ResourceRef),
            obligations=f.items("obligations", Postcondition),
            recorded_at=f.raw("recorded_at"),
            kind=f.enum("kind", EffectKind),
            idempotency_key=f.raw("idempotency_key"),
            retry_of=f.raw("retry_of"),
            step=f.raw("step"),
            args=f.raw("args"),
            traceparent=f.raw("traceparent"),
            approval_id=f.raw("approval_id"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EffectOutcome:
    """How the call of a claimed effect ended, or that it is still running."""

    effect_id: str
    seq: int
    execution: ExecutionOutcome
    impact: Impact
    execution_id: str | None = None
    replayed: bool = False
    recorded_at: str | None = None
    # What the call returned, as recorded: a JSON value. ``result_recorded`` tells a
    # recorded ``None`` (JSON null) from none recorded; by default, whether result is set.
    result: Any = dataclasses.field(default=None, hash=False)
    result_recorded: bool | None = None  # None: whether result is set (a bool once built)

    record_type: ClassVar[str] = "outcome"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        _check_enum(self.execution, ExecutionOutcome, "execution")
        _check_enum(self.impact, Impact, "impact")
        check_identifier(self.execution_id, "execution_id", optional=True)
        if not isinstance(self.replayed, bool):
            raise InvalidTypeError(f"replayed must be a bool, not {type(self.replayed).__name__}")
        if self.recorded_at is not None:
            _check_timestamp(self.recorded_at)
        if self.execution is ExecutionOutcome.INTERRUPTED and self.impact is not Impact.POSSIBLE:
            raise ValueError("an INTERRUPTED outcome must have impact POSSIBLE")
        if self.replayed and self.execution is not ExecutionOutcome.INTERRUPTED:
            raise ValueError("only an INTERRUPTED outcome can be replayed")
        if self.result_recorded is None:
            _frozen(self, "result_recorded", self.result is not None)
        elif not isinstance(self.result_recorded, bool):
            raise InvalidTypeError(
                f"result_recorded must be a bool, not {type(self.result_recorded).__name__}"
            )
        elif not self.result_recorded and self.result is not None:
            raise ValueError("an outcome with a result has it recorded (result_recorded=True)")
        _frozen(self, "result", _recorded(self.result, "result"))

    @property
    def terminal(self) -> bool:
        """Whether this outcome settles the effect (anything but RUNNING)."""
        return self.execution is not ExecutionOutcome.RUNNING

    def to_dict(self) -> dict[str, Any]:
        """Return the outcome as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "execution": self.execution.value,
            "impact": self.impact.value,
            "execution_id": self.execution_id,
            "replayed": self.replayed,
            "recorded_at": self.recorded_at,
            "result": self.result,
            "result_recorded": self.result_recorded,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an outcome from :meth:`to_dict` output.

        One written before results were recorded has none.
        """
        f = _Fields(data, cls, later={"result": None, "result_recorded": False})
        recorded = f.raw("result_recorded")
        if not isinstance(recorded, bool):
            raise ValueError("EffectOutcome.result_recorded must be a boolean")  # noqa: TRY004 - as above
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            execution=f.enum("execution", ExecutionOutcome),
            impact=f.enum("impact", Impact),
            execution_id=f.raw("execution_id"),
            replayed=f.raw("replayed"),
            recorded_at=f.raw("recorded_at"),
            result=f.raw("result"),
            result_recorded=recorded,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """What the worker saw of a resource, by which mechanism, how completely."""

    observation_id: str
    seq: int
    resource: ResourceRef
    mechanism: ObservationMechanism
    coverage: Coverage
    source_action_id: str
    exists: bool | None
    sha256: str | None
    revision: str | None
    recorded_at: str

    record_type: ClassVar[str] = "observation"

    def __post_init__(self) -> None:
        check_identifier(self.observation_id, "observation_id")
        _check_seq(self.seq)
        if not isinstance(self.resource, ResourceRef):
            raise InvalidTypeError(
                f"resource must be a ResourceRef, not {type(self.resource).__name__}"
            )
        _check_enum(self.mechanism, ObservationMechanism, "mechanism")
        _check_enum(self.coverage, Coverage, "coverage")
        check_identifier(self.source_action_id, "source_action_id")
        _check_optional_bool(self.exists, "exists")
        if self.sha256 is not None:
            _check_hex64(self.sha256, "sha256")
        check_identifier(self.revision, "revision", optional=True)
        _check_timestamp(self.recorded_at)

    def to_dict(self) -> dict[str, Any]:
        """Return the observation as JSON types."""
        return {
            "observation_id": self.observation_id,
            "seq": self.seq,
            "resource": self.resource.to_dict(),
            "mechanism": self.mechanism.value,
            "coverage": self.coverage.value,
            "source_action_id": self.source_action_id,
            "exists": self.exists,
            "sha256": self.sha256,
            "revision": self.revision,
            "recorded_at": self.recorded_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild an observation from :meth:`to_dict` output."""
        f = _Fields(data, cls)
        return _build(
            cls,
            observation_id=f.raw("observation_id"),
            seq=f.raw("seq"),
            resource=ResourceRef.from_dict(f.raw("resource")),
            mechanism=f.enum("mechanism", ObservationMechanism),
            coverage=f.enum("coverage", Coverage),
            source_action_id=f.raw("source_action_id"),
            exists=f.raw("exists"),
            sha256=f.raw("sha256"),
            revision=f.raw("revision"),
            recorded_at=f.raw("recorded_at"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """A person's word, after checking the world, that an effect did or did not land.

    It leaves the verdict alone (that is the ledger's own evidence) and settles the
    effect's impact: :func:`decide` follows it.

    ``by`` is whom the writer names; the process that wrote the record is recorded
    beside it: ``origin`` (``person`` for the ``ledger resolve`` command, ``worker`` for
    a program's ``EffectLog.resolve``, ``reconciler`` for one that said
    ``allow_self=True``), and that process's OS user, host, program and pid. A
    resolution written before the store recorded them has none: all five are None.
    """

    effect_id: str
    seq: int
    applied: bool
    by: str
    recorded_at: str
    note: str = ""
    origin: ResolutionOrigin | None = None
    os_user: str | None = None
    host: str | None = None
    program: str | None = None
    pid: int | None = None

    record_type: ClassVar[str] = "resolution"

    def __post_init__(self) -> None:
        check_identifier(self.effect_id, "effect_id")
        _check_seq(self.seq)
        if not isinstance(self.applied, bool):
            raise InvalidTypeError(f"applied must be a bool, not {type(self.applied).__name__}")
        check_identifier(self.by, "by")
        _check_timestamp(self.recorded_at)
        _check_str(self.note, "note", empty=True)
        if self.origin is None:
            given = [f for f in _WRITTEN_BY if getattr(self, f) is not None]
            if given:
                raise ValueError(
                    f"a resolution without an origin records no writing process, yet {given[0]} "
                    "is set"
                )
            return
        _check_enum(self.origin, ResolutionOrigin, "origin")
        check_process(self)

    @property
    def word(self) -> str:
        """``"applied"`` or ``"not_applied"``, as :attr:`Assessment.resolution` says it."""
        return "applied" if self.applied else "not_applied"

    @property
    def by_person(self) -> bool:
        """Whether a person's command wrote it, or it predates the record of who wrote it.

        A worker's or reconciler's own resolution is not a person's word, whatever
        ``by`` names: the MCP guard does not take it.
        """
        return self.origin is None or self.origin is ResolutionOrigin.PERSON

    def to_dict(self) -> dict[str, Any]:
        """Return the resolution as JSON types."""
        return {
            "effect_id": self.effect_id,
            "seq": self.seq,
            "applied": self.applied,
            "by": self.by,
            "recorded_at": self.recorded_at,
            "note": self.note,
            "origin": None if self.origin is None else self.origin.value,
            "os_user": self.os_user,
            "host": self.host,
            "program": self.program,
            "pid": self.pid,
        }

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """Validate and rebuild a resolution from :meth:`to_dict` output.

        A dict written before resolutions recorded their writer (without the five keys)
        stands for one that records none.
        """
        f = _Fields(data, cls, later=dict.fromkeys(_WRITTEN_BY))
        return _build(
            cls,
            effect_id=f.raw("effect_id"),
            seq=f.raw("seq"),
            applied=f.raw("applied"),
            by=f.raw("by"),
            recorded_at=f.raw("recorded_at"),
            note=f.raw("note"),
            origin=f.optional_enum("origin", ResolutionOrigin),
            os_user=f.raw("os_user"),
            host=f.raw("host"),
            program=f.raw("program"),
            pid=f.raw("pid"),
        )


# A resolution's writing process: all set, or (written before they were recorded) none.
_WRITTEN_BY = ("origin", "os_user", "host", "program", "pid")


# ApprovalRequest and ApprovalDecision are defined with the rest of approvals.
Record = EffectClaim | EffectOutcome | Observation | Resolution | ApprovalRequest | ApprovalDecision
