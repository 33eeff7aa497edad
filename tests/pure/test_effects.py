"""The record values of ``ledger.effects``: validation, equality, dict round trips, overlap."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import effects as fx
from ledger.resources import FilesystemRoot, OwnedResource
from tests.builders import FAILED, INTERRUPTED, RUNNING, SUCCESS, file_ref, fs_ref, op, sha

NOW = fx.utc_now()
A = fs_ref("/sandbox/a.txt")
DIGEST = sha(b"hello")

# --------------------------------------------------------------------------- builders


def _claim(**changes: Any) -> fx.EffectClaim:
    fields: dict[str, Any] = {
        "effect_id": "e1",
        "seq": 1,
        "action_id": "a1",
        "operation": op(),
        "impact_scope": (A,),
        "obligations": (fx.Postcondition(A, fx.Predicate.SHA256, DIGEST),),
        "recorded_at": NOW,
    }
    fields.update(changes)
    return fx.EffectClaim(**fields)


def _outcome(**changes: Any) -> fx.EffectOutcome:
    fields: dict[str, Any] = {
        "effect_id": "e1",
        "seq": 2,
        "execution": fx.ExecutionOutcome.INTERRUPTED,
        "impact": fx.Impact.POSSIBLE,
        "execution_id": "x1",
        "replayed": True,
        "recorded_at": NOW,
    }
    fields.update(changes)
    return fx.EffectOutcome(**fields)


def _observation(**changes: Any) -> fx.Observation:
    fields: dict[str, Any] = {
        "observation_id": "o1",
        "seq": 3,
        "resource": A,
        "mechanism": fx.ObservationMechanism.FILESYSTEM_READ,
        "coverage": fx.Coverage.COMPLETE,
        "source_action_id": "a2",
        "exists": True,
        "sha256": DIGEST,
        "revision": "r1",
        "recorded_at": NOW,
    }
    fields.update(changes)
    return fx.Observation(**fields)


def _assessment(**changes: Any) -> fx.Assessment:
    fields: dict[str, Any] = {
        "effect_id": "e1",
        "verdict": fx.EffectVerdict.VERIFIED,
        "execution": fx.ExecutionOutcome.REPORTED_SUCCESS,
        "impact": fx.Impact.CERTAIN,
        "unresolved_impact": False,
        "evidence": ("o1",),
        "stale": ("o0",),
    }
    fields.update(changes)
    return fx.Assessment(**fields)


def _history() -> fx.History:
    return fx.History(claims=(_claim(),), outcomes=(_outcome(),), observations=(_observation(),))


# One fresh (equal, not identical) sample per record type, and a field to change in it.
SAMPLES: dict[str, tuple[Callable[[], Any], str, Any]] = {
    "ResourceRef": (
        lambda: fx.ResourceRef("owned", "svc/u/t/notes/n1", "target", "r1"),
        "role",
        "source",
    ),
    "OperationRef": (lambda: fx.OperationRef("write_file", "", DIGEST), "backend", "fs/2"),
    "Postcondition": (
        lambda: fx.Postcondition(A, fx.Predicate.SHA256, DIGEST),
        "expected",
        sha(b"x"),
    ),
    "EffectClaim": (_claim, "action_id", "a9"),
    "EffectOutcome": (_outcome, "execution_id", "x2"),
    "Observation": (_observation, "exists", None),
    "History": (_history, "observations", ()),
    "Assessment": (_assessment, "stale", ()),
}
CLASSES = {name: type(make()) for name, (make, _, _) in SAMPLES.items()}


def _mutated(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with the item at ``path`` replaced by ``value``."""
    result = copy.deepcopy(data)
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return result


def _assert_only_json_types(value: object) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            _assert_only_json_types(item)
    elif isinstance(value, list):
        for item in value:
            _assert_only_json_types(item)
    else:
        assert value is None or type(value) in (str, int, bool, float), repr(value)


# --------------------------------------------------------------------------- strategies

_PRINTABLE = st.characters(
    exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), include_characters=" "
)
identifiers = st.text(_PRINTABLE, min_size=1, max_size=200)
hex64 = st.binary(max_size=16).map(sha)
_utc_datetimes = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(0))]))
timestamps = _utc_datetimes.map(datetime.isoformat) | _utc_datetimes.map(
    lambda d: d.isoformat().replace("+00:00", "Z")
)
_segments = st.text(
    st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1, max_size=8
).filter(lambda s: s not in {".", ".."})
fs_locators = st.lists(_segments, max_size=4).map(lambda parts: "/" + "/".join(parts))
owned_locators = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), min_size=1, max_size=40
)
optional_ids = st.none() | identifiers
seqs = st.integers(min_value=1, max_value=2**63 - 1)

resource_refs = st.builds(
    fx.ResourceRef, st.just("fs"), fs_locators, identifiers, optional_ids
) | st.builds(fx.ResourceRef, st.just("owned"), owned_locators, identifiers, optional_ids)
operations = st.builds(fx.OperationRef, identifiers, st.just("") | identifiers, hex64)
postconditions = (
    st.builds(
        fx.Postcondition, resource_refs, st.sampled_from([fx.Predicate.EXISTS, fx.Predicate.ABSENT])
    )
    | st.builds(fx.Postcondition, resource_refs, st.just(fx.Predicate.SHA256), hex64)
    | st.builds(fx.Postcondition, resource_refs, st.just(fx.Predicate.REVISION), identifiers)
)
# What a recorded argument or result may be: any value JSON holds exactly.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=5), inner, max_size=3
        )
    ),
    max_leaves=8,
)
steps = st.just("") | identifiers
claims = st.builds(
    fx.EffectClaim,
    effect_id=identifiers,
    seq=seqs,
    action_id=identifiers,
    operation=operations,
    impact_scope=st.lists(resource_refs, max_size=3).map(tuple),
    obligations=st.lists(postconditions, max_size=3).map(tuple),
    recorded_at=timestamps,
    step=steps,
    args=st.none() | st.dictionaries(identifiers, json_values, max_size=3),
)


@st.composite
def outcomes(draw: st.DrawFn) -> fx.EffectOutcome:
    execution = draw(st.sampled_from(fx.ExecutionOutcome))
    interrupted = execution is fx.ExecutionOutcome.INTERRUPTED
    return fx.EffectOutcome(
        draw(identifiers),
        draw(seqs),
        execution,
        fx.Impact.POSSIBLE if interrupted else draw(st.sampled_from(fx.Impact)),
        execution_id=draw(optional_ids),
        replayed=draw(st.booleans()) if interrupted else False,
        recorded_at=draw(st.none() | timestamps),
        result=(result := draw(json_values)),
        result_recorded=result is not None or draw(st.booleans()),
    )


observations = st.builds(
    fx.Observation,
    observation_id=identifiers,
    seq=seqs,
    resource=resource_refs,
    mechanism=st.sampled_from(fx.ObservationMechanism),
    coverage=st.sampled_from(fx.Coverage),
    source_action_id=identifiers,
    exists=st.none() | st.booleans(),
    sha256=st.none() | hex64,
    revision=optional_ids,
    recorded_at=timestamps,
)


@st.composite
def histories(draw: st.DrawFn) -> fx.History:
    records = [
        *draw(st.lists(claims, max_size=3)),
        *draw(st.lists(outcomes(), max_size=3)),
        *draw(st.lists(observations, max_size=3)),
    ]
    numbers = draw(st.permutations(range(1, len(records) + 1)))
    renumbered = [dataclasses.replace(r, seq=n) for r, n in zip(records, numbers, strict=True)]

    def of(cls: type[Any]) -> tuple[Any, ...]:
        return tuple(sorted((r for r in renumbered if isinstance(r, cls)), key=lambda r: r.seq))

    return fx.History(of(fx.EffectClaim), of(fx.EffectOutcome), of(fx.Observation))


assessments = st.builds(
    fx.Assessment,
    effect_id=identifiers,
    verdict=st.sampled_from(fx.EffectVerdict),
    execution=st.none() | st.sampled_from(fx.ExecutionOutcome),
    impact=st.none() | st.sampled_from(fx.Impact),
    unresolved_impact=st.booleans(),
    evidence=st.lists(identifiers, max_size=3).map(tuple),
    stale=st.lists(identifiers, max_size=3).map(tuple),
)

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "ResourceRef": resource_refs,
    "OperationRef": operations,
    "Postcondition": postconditions,
    "EffectClaim": claims,
    "EffectOutcome": outcomes(),
    "Observation": observations,
    "History": histories(),
    "Assessment": assessments,
}

# --------------------------------------------------------------------------- value semantics


@pytest.mark.parametrize("name", SAMPLES)
def test_records_are_frozen(name: str) -> None:
    """Assigning to a field of any record raises FrozenInstanceError."""
    make, field, value = SAMPLES[name]
    record = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, field, value)
    assert record == make()


@pytest.mark.parametrize("name", SAMPLES)
def test_records_are_equal_and_hash_equal_by_value(name: str) -> None:
    """Two separately built records with the same fields are equal and collapse in a set."""
    make, _, _ = SAMPLES[name]
    first, second = make(), make()
    assert first is not second
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1


@pytest.mark.parametrize("name", SAMPLES)
def test_records_differing_in_one_field_are_unequal(name: str) -> None:
    """Changing one field makes a record unequal to the original."""
    make, field, value = SAMPLES[name]
    changed = dataclasses.replace(make(), **{field: value})
    assert changed != make()
    assert len({changed, make()}) == 2


def test_sequences_given_as_lists_are_stored_as_tuples() -> None:
    """Records built from lists hold tuples, so they stay hashable."""
    claim = _claim(impact_scope=[A], obligations=[fx.Postcondition(A, fx.Predicate.EXISTS)])
    history = fx.History(claims=[claim], outcomes=[], observations=[])
    assessment = _assessment(evidence=["o1"], stale=[])
    assert claim.impact_scope == (A,)
    assert claim.obligations == (fx.Postcondition(A, fx.Predicate.EXISTS),)
    assert history.claims == (claim,)
    assert history.outcomes == ()
    assert assessment.evidence == ("o1",)
    assert assessment.stale == ()
    assert len({claim, history, assessment}) == 3


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", STRATEGIES)
@settings(deadline=None, max_examples=50)
@given(data=st.data())
def test_from_dict_of_to_dict_is_identity(name: str, data: st.DataObject) -> None:
    """For every record type, ``X.from_dict(x.to_dict()) == x``."""
    record = data.draw(STRATEGIES[name])
    assert CLASSES[name].from_dict(record.to_dict()) == record


@pytest.mark.parametrize("name", STRATEGIES)
@settings(deadline=None, max_examples=50)
@given(data=st.data())
def test_to_dict_is_plain_json(name: str, data: st.DataObject) -> None:
    """to_dict produces only JSON types, which survive JSON text and rebuild the record."""
    record = data.draw(STRATEGIES[name])
    as_dict = record.to_dict()
    _assert_only_json_types(as_dict)
    parsed = json.loads(json.dumps(as_dict, allow_nan=False))
    assert parsed == as_dict
    assert CLASSES[name].from_dict(parsed) == record


def test_to_dict_shape_of_a_claim() -> None:
    """A claim's dict nests its operation, scope and obligations with enum words as strings."""
    assert _claim().to_dict() == {
        "effect_id": "e1",
        "seq": 1,
        "action_id": "a1",
        "operation": {"name": "write_file", "backend": "test/1", "args_sha256": sha(b"{}")},
        "impact_scope": [
            {"kind": "fs", "locator": "/sandbox/a.txt", "role": "target", "revision": None}
        ],
        "obligations": [
            {
                "target": {
                    "kind": "fs",
                    "locator": "/sandbox/a.txt",
                    "role": "target",
                    "revision": None,
                },
                "predicate": "sha256",
                "expected": DIGEST,
            }
        ],
        "recorded_at": NOW,
        "kind": "write",
        "idempotency_key": "",
        "retry_of": None,
        "step": "",
        "args": None,
        "traceparent": None,
        "approval_id": None,
    }


def test_to_dict_shape_of_an_outcome_and_an_observation() -> None:
    """Outcomes and observations store enum values as their lowercase words."""
    outcome = _outcome().to_dict()
    assert outcome["execution"] == "interrupted"
    assert outcome["impact"] == "possible"
    assert outcome["replayed"] is True
    observation = _observation().to_dict()
    assert observation["mechanism"] == "filesystem_read"
    assert observation["coverage"] == "complete"
    assert observation["resource"] == A.to_dict()


# --------------------------------------------------------------------------- from_dict errors

# Keys added after the first format: a dict written before them still reads (below).
LATER_KEYS = {
    ("EffectClaim", "kind"): fx.EffectKind.WRITE,
    ("EffectClaim", "idempotency_key"): "",
    ("EffectClaim", "retry_of"): None,
    ("EffectClaim", "step"): "",
    ("EffectClaim", "args"): None,
    ("EffectClaim", "traceparent"): None,
    ("EffectClaim", "approval_id"): None,
    ("EffectOutcome", "result"): None,
    ("EffectOutcome", "result_recorded"): False,
    ("History", "resolutions"): (),
    ("History", "approval_requests"): (),
    ("History", "approval_decisions"): (),
    ("Assessment", "resolution"): None,
}
MISSING_KEYS = [
    (name, key)
    for name, (make, _, _) in SAMPLES.items()
    for key in make().to_dict()
    if (name, key) not in LATER_KEYS
]


@pytest.mark.parametrize(("name", "key"), list(LATER_KEYS))
def test_from_dict_reads_a_dict_written_before_a_later_key(name: str, key: str) -> None:
    """An export made before kinds, keys, retries, resolutions and steps existed still reads."""
    data = SAMPLES[name][0]().to_dict()
    del data[key]
    assert getattr(CLASSES[name].from_dict(data), key) == LATER_KEYS[name, key]


@pytest.mark.parametrize(("name", "key"), MISSING_KEYS)
def test_from_dict_rejects_a_missing_key(name: str, key: str) -> None:
    """from_dict raises ValueError when any one key is missing."""
    data = SAMPLES[name][0]().to_dict()
    del data[key]
    with pytest.raises(ValueError, match=key):
        CLASSES[name].from_dict(data)


@pytest.mark.parametrize("name", SAMPLES)
def test_from_dict_rejects_an_extra_key(name: str) -> None:
    """from_dict raises ValueError on a key the record does not have."""
    data = SAMPLES[name][0]().to_dict()
    data["surplus"] = None
    with pytest.raises(ValueError, match="surplus"):
        CLASSES[name].from_dict(data)


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("data", [None, [], "{}", 1, ["kind", "fs"]])
def test_from_dict_rejects_a_non_object(name: str, data: object) -> None:
    """from_dict raises ValueError when given anything but a JSON object."""
    with pytest.raises(ValueError):
        CLASSES[name].from_dict(data)


BAD_VALUES: list[Any] = [
    # int where a str belongs
    pytest.param("ResourceRef", ("kind",), 1, id="ref-kind-int"),
    pytest.param("ResourceRef", ("locator",), 1, id="ref-locator-int"),
    pytest.param("ResourceRef", ("role",), 1, id="ref-role-int"),
    pytest.param("ResourceRef", ("revision",), 7, id="ref-revision-int"),
    pytest.param("ResourceRef", ("kind",), "file", id="ref-kind-unknown"),
    pytest.param("OperationRef", ("name",), 1, id="op-name-int"),
    pytest.param("OperationRef", ("backend",), None, id="op-backend-none"),
    pytest.param("OperationRef", ("args_sha256",), 1, id="op-digest-int"),
    pytest.param("EffectClaim", ("effect_id",), 1, id="claim-effect-id-int"),
    pytest.param("EffectClaim", ("action_id",), 1, id="claim-action-id-int"),
    pytest.param("EffectClaim", ("recorded_at",), 1_700_000_000, id="claim-recorded-at-int"),
    pytest.param("EffectOutcome", ("effect_id",), 1, id="outcome-effect-id-int"),
    pytest.param("EffectOutcome", ("execution_id",), 1, id="outcome-execution-id-int"),
    pytest.param("Observation", ("observation_id",), 1, id="obs-id-int"),
    pytest.param("Observation", ("source_action_id",), 1, id="obs-source-int"),
    pytest.param("Observation", ("revision",), 1, id="obs-revision-int"),
    pytest.param("Assessment", ("effect_id",), 1, id="assessment-effect-id-int"),
    pytest.param("Assessment", ("evidence",), [1], id="assessment-evidence-int-item"),
    # str, float or bool where an int belongs
    pytest.param("EffectClaim", ("seq",), "1", id="claim-seq-str"),
    pytest.param("EffectClaim", ("seq",), 1.0, id="claim-seq-float"),
    pytest.param("EffectClaim", ("seq",), True, id="claim-seq-bool"),
    pytest.param("EffectClaim", ("seq",), 0, id="claim-seq-zero"),
    pytest.param("EffectClaim", ("seq",), -1, id="claim-seq-negative"),
    pytest.param("EffectClaim", ("seq",), None, id="claim-seq-none"),
    pytest.param("EffectOutcome", ("seq",), "2", id="outcome-seq-str"),
    pytest.param("EffectOutcome", ("seq",), True, id="outcome-seq-bool"),
    pytest.param("Observation", ("seq",), "3", id="obs-seq-str"),
    pytest.param("Observation", ("seq",), False, id="obs-seq-bool"),
    # bool fields given other things, and sequences given a bool
    pytest.param("Observation", ("exists",), 1, id="obs-exists-int"),
    pytest.param("Observation", ("exists",), "true", id="obs-exists-str"),
    pytest.param("EffectOutcome", ("replayed",), 1, id="outcome-replayed-int"),
    pytest.param("EffectOutcome", ("replayed",), None, id="outcome-replayed-none"),
    pytest.param("EffectOutcome", ("replayed",), "false", id="outcome-replayed-str"),
    pytest.param("Assessment", ("unresolved_impact",), 0, id="assessment-unresolved-int"),
    pytest.param("Assessment", ("unresolved_impact",), None, id="assessment-unresolved-none"),
    pytest.param("EffectClaim", ("impact_scope",), True, id="claim-scope-bool"),
    pytest.param("EffectClaim", ("obligations",), False, id="claim-obligations-bool"),
    pytest.param("History", ("claims",), True, id="history-claims-bool"),
    pytest.param("Assessment", ("evidence",), True, id="assessment-evidence-bool"),
    # list where a dict belongs, dict or str where a list belongs
    pytest.param("EffectClaim", ("operation",), ["write_file", "", DIGEST], id="claim-op-list"),
    pytest.param(
        "Postcondition", ("target",), ["fs", "/sandbox/a.txt", "t", None], id="cond-target-list"
    ),
    pytest.param("Observation", ("resource",), [], id="obs-resource-list"),
    pytest.param("Observation", ("resource",), "/sandbox/a.txt", id="obs-resource-str"),
    pytest.param("EffectClaim", ("impact_scope",), {}, id="claim-scope-dict"),
    pytest.param("EffectClaim", ("impact_scope",), A.to_dict(), id="claim-scope-single-dict"),
    pytest.param("EffectClaim", ("impact_scope",), ["/sandbox/a.txt"], id="claim-scope-str-item"),
    pytest.param("EffectClaim", ("obligations",), [1], id="claim-obligations-int-item"),
    pytest.param("History", ("claims",), {}, id="history-claims-dict"),
    pytest.param("History", ("outcomes",), None, id="history-outcomes-none"),
    pytest.param("History", ("observations",), [[]], id="history-obs-list-item"),
    pytest.param("Assessment", ("evidence",), "o1", id="assessment-evidence-str"),
    pytest.param("Assessment", ("stale",), {"o1": 1}, id="assessment-stale-dict"),
    # nested trouble is reported by the outer from_dict too
    pytest.param("EffectClaim", ("impact_scope", 0, "kind"), "disk", id="claim-nested-kind"),
    pytest.param("History", ("claims", 0, "seq"), "1", id="history-nested-seq"),
    pytest.param("History", ("outcomes", 0, "surplus"), 1, id="history-nested-extra"),
    # unknown enum words (including the member names, which are not the stored words)
    pytest.param("Postcondition", ("predicate",), "EXISTS", id="predicate-name"),
    pytest.param("Postcondition", ("predicate",), "contains", id="predicate-unknown"),
    pytest.param("Postcondition", ("predicate",), 0, id="predicate-int"),
    pytest.param("EffectOutcome", ("execution",), "succeeded", id="execution-unknown"),
    pytest.param("EffectOutcome", ("execution",), "INTERRUPTED", id="execution-name"),
    pytest.param("EffectOutcome", ("impact",), "maybe", id="impact-unknown"),
    pytest.param("EffectOutcome", ("impact",), None, id="impact-none"),
    pytest.param("Observation", ("mechanism",), "eyeball", id="mechanism-unknown"),
    pytest.param("Observation", ("coverage",), "full", id="coverage-unknown"),
    pytest.param("Assessment", ("verdict",), "ok", id="verdict-unknown"),
    pytest.param("Assessment", ("verdict",), None, id="verdict-none"),
    pytest.param("Assessment", ("execution",), "done", id="assessment-execution-unknown"),
    pytest.param("Assessment", ("impact",), "some", id="assessment-impact-unknown"),
    # bad digests
    pytest.param("OperationRef", ("args_sha256",), DIGEST.upper(), id="op-digest-upper"),
    pytest.param("OperationRef", ("args_sha256",), DIGEST[:63], id="op-digest-63"),
    pytest.param("OperationRef", ("args_sha256",), DIGEST + "0", id="op-digest-65"),
    pytest.param("OperationRef", ("args_sha256",), "g" * 64, id="op-digest-non-hex"),
    pytest.param("OperationRef", ("args_sha256",), "", id="op-digest-empty"),
    pytest.param("Postcondition", ("expected",), DIGEST.upper(), id="cond-digest-upper"),
    pytest.param("Postcondition", ("expected",), DIGEST[:63], id="cond-digest-63"),
    pytest.param("Postcondition", ("expected",), "z" * 64, id="cond-digest-non-hex"),
    pytest.param("Postcondition", ("expected",), None, id="cond-digest-missing"),
    pytest.param("Observation", ("sha256",), DIGEST.upper(), id="obs-digest-upper"),
    pytest.param("Observation", ("sha256",), DIGEST[:63], id="obs-digest-63"),
    pytest.param("Observation", ("sha256",), " " + DIGEST[1:], id="obs-digest-space"),
    # timestamps that are not UTC ISO-8601
    pytest.param("EffectClaim", ("recorded_at",), "2024-05-01T12:00:00", id="ts-naive"),
    pytest.param("EffectClaim", ("recorded_at",), "2024-05-01T12:00:00+02:00", id="ts-plus-two"),
    pytest.param("EffectClaim", ("recorded_at",), "2024-05-01T12:00:00-05:00", id="ts-minus-five"),
    pytest.param("EffectClaim", ("recorded_at",), "yesterday", id="ts-word"),
    pytest.param("EffectClaim", ("recorded_at",), "", id="ts-empty"),
    pytest.param("EffectClaim", ("recorded_at",), "2024-13-01T00:00:00+00:00", id="ts-month-13"),
    pytest.param("EffectClaim", ("recorded_at",), "Wed, 01 May 2024 12:00:00 GMT", id="ts-rfc2822"),
    pytest.param("EffectClaim", ("recorded_at",), None, id="ts-none"),
    pytest.param(
        "Observation", ("recorded_at",), "2024-05-01T12:00:00+01:00", id="obs-ts-plus-one"
    ),
    pytest.param("Observation", ("recorded_at",), "1714564800", id="obs-ts-epoch-str"),
    pytest.param("EffectOutcome", ("recorded_at",), "2024-05-01 12:00", id="outcome-ts-naive"),
    # values the constructors refuse
    pytest.param("EffectClaim", ("effect_id",), "", id="claim-effect-id-empty"),
    pytest.param("EffectOutcome", ("impact",), "none", id="interrupted-impact-none"),
    pytest.param("Observation", ("observation_id",), "o\x00", id="obs-id-nul"),
    pytest.param("ResourceRef", ("kind",), "fs", id="ref-fs-relative-locator"),
]


@pytest.mark.parametrize(("name", "path", "value"), BAD_VALUES)
def test_from_dict_rejects_malformed_values(
    name: str, path: tuple[str | int, ...], value: object
) -> None:
    """from_dict raises ValueError (never TypeError) for a wrong type or a bad value."""
    data = _mutated(SAMPLES[name][0]().to_dict(), path, value)
    with pytest.raises(ValueError):
        CLASSES[name].from_dict(data)


@pytest.mark.parametrize(
    "recorded_at",
    ["2024-05-01T12:00:00+00:00", "2024-05-01T12:00:00.123456+00:00", "2024-05-01T12:00:00Z"],
)
def test_utc_timestamps_are_accepted(recorded_at: str) -> None:
    """UTC ISO-8601 timestamps, with an offset of zero or ``Z``, are accepted and kept as given."""
    data = _mutated(_claim().to_dict(), ("recorded_at",), recorded_at)
    assert fx.EffectClaim.from_dict(data).recorded_at == recorded_at


def test_utc_now_is_a_utc_iso_timestamp() -> None:
    """utc_now returns an ISO-8601 string with a zero UTC offset that records accept."""
    stamp = fx.utc_now()
    parsed = datetime.fromisoformat(stamp)
    assert parsed.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - parsed) < timedelta(minutes=1)
    assert _claim(recorded_at=stamp).recorded_at == stamp


def test_outcome_without_timestamp_round_trips() -> None:
    """An outcome may carry recorded_at None, and its defaults round-trip."""
    outcome = fx.EffectOutcome("e1", 2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN)
    assert outcome.execution_id is None
    assert outcome.replayed is False
    assert outcome.recorded_at is None
    assert fx.EffectOutcome.from_dict(outcome.to_dict()) == outcome


# --------------------------------------------------------------------------- enums

ENUMS: list[tuple[type[enum.Enum], list[str]]] = [
    (fx.Predicate, ["EXISTS", "ABSENT", "SHA256", "REVISION"]),
    (fx.ExecutionOutcome, ["RUNNING", "REPORTED_SUCCESS", "FAILED", "INTERRUPTED"]),
    (fx.Impact, ["NONE", "POSSIBLE", "CERTAIN"]),
    (
        fx.ObservationMechanism,
        ["FILESYSTEM_READ", "FILESYSTEM_STAT", "RECORD_READ", "BACKEND_QUERY"],
    ),
    (fx.Coverage, ["COMPLETE", "PARTIAL"]),
    (fx.EffectVerdict, ["PENDING", "VERIFIED", "UNVERIFIED", "CONTRADICTED", "FAILED"]),
]


@pytest.mark.parametrize(("cls", "names"), ENUMS)
def test_enum_members_are_the_documented_ones(cls: type[enum.Enum], names: list[str]) -> None:
    """Each enum is an enum.Enum with exactly the documented members."""
    assert issubclass(cls, enum.Enum)
    assert [member.name for member in cls] == names


@pytest.mark.parametrize(("cls", "names"), ENUMS)
def test_enum_values_are_lowercase_names(cls: type[enum.Enum], names: list[str]) -> None:
    """Every member's value is its name in lowercase, and that word looks the member up."""
    for name in names:
        member = cls[name]
        assert member.value == name.lower()
        assert cls(name.lower()) is member


def test_reported_success_word() -> None:
    """REPORTED_SUCCESS is stored as the word ``reported_success``."""
    assert fx.ExecutionOutcome.REPORTED_SUCCESS.value == "reported_success"


# --------------------------------------------------------------------------- postconditions


def test_sha256_postcondition_takes_a_digest() -> None:
    """A SHA256 postcondition keeps its 64-hex expected digest."""
    assert fx.Postcondition(A, fx.Predicate.SHA256, DIGEST).expected == DIGEST


def test_revision_postcondition_takes_a_revision() -> None:
    """A REVISION postcondition keeps its expected revision."""
    assert fx.Postcondition(A, fx.Predicate.REVISION, "r7").expected == "r7"


@pytest.mark.parametrize("predicate", [fx.Predicate.EXISTS, fx.Predicate.ABSENT])
def test_exists_and_absent_take_no_expected(predicate: fx.Predicate) -> None:
    """EXISTS and ABSENT work without expected and refuse one."""
    assert fx.Postcondition(A, predicate).expected is None
    with pytest.raises(ValueError):
        fx.Postcondition(A, predicate, DIGEST)
    with pytest.raises(ValueError):
        fx.Postcondition(A, predicate, "r1")


@pytest.mark.parametrize("predicate", [fx.Predicate.SHA256, fx.Predicate.REVISION])
def test_sha256_and_revision_require_expected(predicate: fx.Predicate) -> None:
    """SHA256 and REVISION without expected raise ValueError."""
    with pytest.raises(ValueError):
        fx.Postcondition(A, predicate)
    with pytest.raises(ValueError):
        fx.Postcondition.from_dict(
            {"target": A.to_dict(), "predicate": predicate.value, "expected": None}
        )


@pytest.mark.parametrize(
    "expected", [DIGEST.upper(), DIGEST[:63], DIGEST + "a", "x" * 64, "", "r1"]
)
def test_sha256_expected_must_be_64_lowercase_hex(expected: str) -> None:
    """A SHA256 postcondition refuses anything but 64 lowercase hex characters."""
    with pytest.raises(ValueError):
        fx.Postcondition(A, fx.Predicate.SHA256, expected)


def test_expected_from_dict_for_exists_is_refused() -> None:
    """from_dict refuses an EXISTS postcondition that carries an expected value."""
    data = {"target": A.to_dict(), "predicate": "exists", "expected": DIGEST}
    with pytest.raises(ValueError):
        fx.Postcondition.from_dict(data)


# --------------------------------------------------------------------------- identifiers

IDENTIFIER_FIELDS: dict[str, Callable[[Any], Any]] = {
    "claim.effect_id": lambda v: _claim(effect_id=v),
    "claim.action_id": lambda v: _claim(action_id=v),
    "outcome.effect_id": lambda v: _outcome(effect_id=v),
    "outcome.execution_id": lambda v: _outcome(execution_id=v),
    "observation.observation_id": lambda v: _observation(observation_id=v),
    "observation.source_action_id": lambda v: _observation(source_action_id=v),
}
BAD_IDENTIFIER_TEXT = {
    "empty": "",
    "201-chars": "x" * 201,
    "nul": "e\x001",
    "newline": "e\n1",
    "tab": "e\t1",
    "escape": "\x1b[31me1",
    "delete": "e\x7f",
    "line-separator": "e\u20281",
    "only-nul": "\x00",
}


@pytest.mark.parametrize("field", IDENTIFIER_FIELDS)
@pytest.mark.parametrize("value", BAD_IDENTIFIER_TEXT.values(), ids=BAD_IDENTIFIER_TEXT.keys())
def test_identifiers_reject_bad_text(field: str, value: str) -> None:
    """Empty, over-long, NUL or control-character identifiers raise ValueError."""
    with pytest.raises(ValueError):
        IDENTIFIER_FIELDS[field](value)


@pytest.mark.parametrize("field", IDENTIFIER_FIELDS)
@pytest.mark.parametrize("value", [5, b"e1", ["e1"], 1.5])
def test_identifiers_reject_non_strings(field: str, value: object) -> None:
    """A non-string identifier raises TypeError or ValueError."""
    with pytest.raises((TypeError, ValueError)):
        IDENTIFIER_FIELDS[field](value)


@pytest.mark.parametrize("field", IDENTIFIER_FIELDS)
@pytest.mark.parametrize("value", ["x" * 200, "e", "write a.txt → ✓ 100%_"])
def test_identifiers_accept_printable_text_up_to_200(field: str, value: str) -> None:
    """Printable identifiers of 1 to 200 characters, spaces and non-ASCII included, are accepted."""
    record = IDENTIFIER_FIELDS[field](value)
    assert getattr(record, field.split(".")[1]) == value


@pytest.mark.parametrize("field", [f for f in IDENTIFIER_FIELDS if f != "outcome.execution_id"])
def test_required_identifiers_reject_none(field: str) -> None:
    """None is not an identifier, except for the optional execution_id."""
    with pytest.raises((TypeError, ValueError)):
        IDENTIFIER_FIELDS[field](None)
    assert _outcome(execution_id=None).execution_id is None


def test_check_identifier_directly() -> None:
    """check_identifier accepts 200 printable chars and refuses 201, NUL and non-strings."""
    fx.check_identifier("x" * 200, "id")
    fx.check_identifier(None, "id", optional=True)
    with pytest.raises(ValueError, match="id"):
        fx.check_identifier("x" * 201, "id")
    with pytest.raises(ValueError):
        fx.check_identifier("a\x00", "id")
    with pytest.raises(TypeError):
        fx.check_identifier(None, "id")
    with pytest.raises(TypeError):
        fx.check_identifier(3, "id")


# --------------------------------------------------------------------------- outcomes


@pytest.mark.parametrize("impact", [fx.Impact.NONE, fx.Impact.CERTAIN])
def test_interrupted_requires_possible_impact(impact: fx.Impact) -> None:
    """An INTERRUPTED outcome with impact other than POSSIBLE raises ValueError."""
    with pytest.raises(ValueError):
        _outcome(impact=impact, replayed=False)
    with pytest.raises(ValueError):
        fx.EffectOutcome.from_dict(_outcome().to_dict() | {"impact": impact.value})


@pytest.mark.parametrize("replayed", [False, True])
def test_interrupted_with_possible_impact_is_accepted(replayed: bool) -> None:
    """INTERRUPTED with POSSIBLE is valid, replayed or not."""
    outcome = _outcome(replayed=replayed)
    assert outcome.execution is fx.ExecutionOutcome.INTERRUPTED
    assert outcome.impact is fx.Impact.POSSIBLE
    assert outcome.replayed is replayed


@pytest.mark.parametrize(
    "execution",
    [fx.ExecutionOutcome.RUNNING, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.ExecutionOutcome.FAILED],
)
def test_only_interrupted_outcomes_are_replayed(execution: fx.ExecutionOutcome) -> None:
    """replayed=True with any execution but INTERRUPTED raises ValueError; False is fine."""
    with pytest.raises(ValueError):
        _outcome(execution=execution, replayed=True)
    with pytest.raises(ValueError):
        fx.EffectOutcome.from_dict(_outcome().to_dict() | {"execution": execution.value})
    assert _outcome(execution=execution, replayed=False).replayed is False


def test_only_running_is_not_terminal() -> None:
    """RUNNING outcomes are not terminal; every other execution is."""
    for execution in fx.ExecutionOutcome:
        interrupted = execution is fx.ExecutionOutcome.INTERRUPTED
        outcome = _outcome(execution=execution, replayed=interrupted)
        assert outcome.terminal is (execution is not fx.ExecutionOutcome.RUNNING)


# --------------------------------------------------------------------------- constructors


CONSTRUCTOR_TYPE_ERRORS: list[Any] = [
    pytest.param(lambda: fx.ResourceRef(1, "/a", "t"), id="ref-kind-int"),
    pytest.param(lambda: fx.ResourceRef("fs", 1, "t"), id="ref-locator-int"),
    pytest.param(lambda: fx.Postcondition("/a", fx.Predicate.EXISTS), id="cond-target-str"),
    pytest.param(lambda: fx.Postcondition(A, "exists"), id="cond-predicate-str"),
    pytest.param(lambda: _claim(operation="write_file"), id="claim-op-str"),
    pytest.param(lambda: _claim(impact_scope="/a"), id="claim-scope-str"),
    pytest.param(lambda: _claim(impact_scope=("/a",)), id="claim-scope-str-item"),
    pytest.param(lambda: _claim(obligations=(A,)), id="claim-obligation-ref"),
    pytest.param(lambda: _claim(seq=True), id="claim-seq-bool"),
    pytest.param(lambda: _claim(seq="1"), id="claim-seq-str"),
    pytest.param(lambda: _outcome(execution="interrupted"), id="outcome-execution-str"),
    pytest.param(lambda: _outcome(replayed=1), id="outcome-replayed-int"),
    pytest.param(lambda: _observation(exists=1), id="obs-exists-int"),
    pytest.param(lambda: _observation(coverage="complete"), id="obs-coverage-str"),
    pytest.param(lambda: _observation(resource=A.to_dict()), id="obs-resource-dict"),
    pytest.param(lambda: fx.History(claims=(_outcome(),)), id="history-wrong-kind"),
    pytest.param(lambda: _assessment(unresolved_impact=None), id="assessment-unresolved-none"),
]


@pytest.mark.parametrize("build", CONSTRUCTOR_TYPE_ERRORS)
def test_constructors_reject_wrong_types(build: Callable[[], object]) -> None:
    """Building a record with a wrongly typed field raises TypeError."""
    with pytest.raises(TypeError):
        build()


def test_history_requires_seq_order_within_each_kind() -> None:
    """A history whose claims are out of seq order raises ValueError."""
    second = _claim(effect_id="e2", seq=2)
    with pytest.raises(ValueError):
        fx.History(claims=(second, _claim()))
    with pytest.raises(ValueError):
        fx.History(claims=(_claim(), _claim(effect_id="e2")))
    assert fx.History(claims=(_claim(), second)).claims == (_claim(), second)


def test_history_records_merges_kinds_in_seq_order() -> None:
    """History.records lists claims, outcomes and observations together by seq."""
    history = _history()
    assert history.records() == (_claim(), _outcome(), _observation())
    assert history.claim("e1") == _claim()
    assert history.claim("e2") is None


# --------------------------------------------------------------------------- locators


@pytest.mark.parametrize(
    "locator",
    [
        "a.txt",
        "sandbox/a.txt",
        "",
        "/a/",
        "/a/./b",
        "/a/../b",
        "/..",
        "//a",
        "///a",
        "/a//b",
        "/a/b/.",
        "/a\x00b",
        "./a",
    ],
)
def test_fs_locators_must_be_normalised_absolute_paths(locator: str) -> None:
    """An fs locator that is relative, empty or not normalised raises ValueError."""
    with pytest.raises(ValueError):
        fx.ResourceRef("fs", locator, "target")


@pytest.mark.parametrize("locator", ["/", "/a", "/a/b c/d.txt", "/a/..b", "/a/.hidden", "/%_/é"])
def test_normalised_absolute_fs_locators_are_accepted(locator: str) -> None:
    """Normalised absolute paths, including ``/``, are valid fs locators."""
    assert fx.ResourceRef("fs", locator, "target").locator == locator


def test_owned_locators_need_not_be_paths() -> None:
    """An owned locator is any non-empty text; an empty one raises ValueError."""
    assert fx.ResourceRef("owned", "notes/u1/t1/c/r1", "target", "r2").revision == "r2"
    assert fx.ResourceRef("owned", "relative", "target").locator == "relative"
    with pytest.raises(ValueError):
        fx.ResourceRef("owned", "", "target")


@pytest.mark.parametrize("kind", ["", "FS", "file", "http"])
def test_unknown_resource_kinds_are_refused(kind: str) -> None:
    """A resource kind other than ``fs`` or ``owned`` raises ValueError."""
    with pytest.raises(ValueError):
        fx.ResourceRef(kind, "/a", "target")


def test_resource_ref_of_a_file_and_a_record(sandbox: FilesystemRoot) -> None:
    """resource_ref gives kind fs with the real path, and kind owned with the record revision."""
    ref = file_ref(sandbox, "a.txt", role="written")
    assert ref == fx.ResourceRef("fs", str(sandbox.path / "a.txt"), "written")
    record = OwnedResource("notes", "u1", "t1", "c", "n1", revision="r3")
    owned = fx.resource_ref(record, "edited")
    assert (owned.kind, owned.role, owned.revision) == ("owned", "edited", "r3")
    assert owned.locator == record.locator
    with pytest.raises(TypeError):
        fx.resource_ref("/a", "target")


# --------------------------------------------------------------------------- overlaps


def _owned(locator: str, role: str = "target", revision: str | None = None) -> fx.ResourceRef:
    return fx.ResourceRef("owned", locator, role, revision)


OVERLAPS: list[Any] = [
    pytest.param(fs_ref("/a"), fs_ref("/a"), True, id="fs-equal"),
    pytest.param(fs_ref("/a"), fs_ref("/a/b"), True, id="fs-parent"),
    pytest.param(fs_ref("/a"), fs_ref("/a/b/c"), True, id="fs-ancestor"),
    pytest.param(fs_ref("/a"), fs_ref("/ab"), False, id="fs-shared-prefix"),
    pytest.param(fs_ref("/a/b"), fs_ref("/a/bc/d"), False, id="fs-shared-prefix-deeper"),
    pytest.param(fs_ref("/a/b"), fs_ref("/a/c"), False, id="fs-siblings"),
    pytest.param(fs_ref("/a-b"), fs_ref("/a/b"), False, id="fs-dash"),
    pytest.param(fs_ref("/"), fs_ref("/x"), True, id="fs-root-child"),
    pytest.param(fs_ref("/"), fs_ref("/x/y/z"), True, id="fs-root-deep"),
    pytest.param(fs_ref("/"), fs_ref("/"), True, id="fs-root-root"),
    pytest.param(fs_ref("/a", "source"), fs_ref("/a", "target"), True, id="fs-role-ignored"),
    pytest.param(
        fx.ResourceRef("fs", "/a", "t", "r1"), fs_ref("/a/b"), True, id="fs-revision-ignored"
    ),
    pytest.param(fs_ref("/a"), _owned("/a"), False, id="kinds-differ-same-locator"),
    pytest.param(fs_ref("/"), _owned("x"), False, id="fs-root-vs-owned"),
    pytest.param(_owned("n/1"), _owned("n/1"), True, id="owned-equal"),
    pytest.param(_owned("n"), _owned("n/1"), False, id="owned-no-prefix"),
    pytest.param(_owned("/"), _owned("/a"), False, id="owned-slash-not-root"),
    pytest.param(
        _owned("n/1", "a", "r1"), _owned("n/1", "b", "r2"), True, id="owned-role-revision-ignored"
    ),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_overlaps(a: fx.ResourceRef, b: fx.ResourceRef, expected: bool) -> None:
    """Overlap needs equal kinds and equal or ancestor fs locators, in either order."""
    assert fx.overlaps(a, b) is expected
    assert fx.overlaps(b, a) is expected


@given(a=resource_refs, b=resource_refs)
def test_overlaps_property(a: fx.ResourceRef, b: fx.ResourceRef) -> None:
    """Overlap is symmetric, reflexive, and for fs is exactly the path-ancestor relation."""
    assert fx.overlaps(a, a)
    assert fx.overlaps(a, b) == fx.overlaps(b, a)
    if a.kind != b.kind:
        assert not fx.overlaps(a, b)
    elif a.kind == "owned":
        assert fx.overlaps(a, b) == (a.locator == b.locator)
    else:
        parts_a = [p for p in a.locator.split("/") if p]
        parts_b = [p for p in b.locator.split("/") if p]
        shorter = min(len(parts_a), len(parts_b))
        assert fx.overlaps(a, b) == (parts_a[:shorter] == parts_b[:shorter])


# --------------------------------------------------------------------------- check_history


def _c(effect_id: str, seq: int) -> fx.EffectClaim:
    return _claim(effect_id=effect_id, seq=seq)


def _o(effect_id: str, seq: int, execution: fx.ExecutionOutcome) -> fx.EffectOutcome:
    interrupted = execution is fx.ExecutionOutcome.INTERRUPTED
    impact = fx.Impact.POSSIBLE if interrupted else fx.Impact.CERTAIN
    return fx.EffectOutcome(effect_id, seq, execution, impact, recorded_at=NOW)


def _v(observation_id: str, seq: int) -> fx.Observation:
    return _observation(observation_id=observation_id, seq=seq)


VALID_HISTORIES: list[Any] = [
    pytest.param(fx.History(), id="empty"),
    pytest.param(fx.History(observations=(_v("o1", 1),)), id="observation-only"),
    pytest.param(fx.History(claims=(_c("e1", 1),)), id="claim-only"),
    pytest.param(
        fx.History(
            claims=(_c("e1", 1),), outcomes=(_o("e1", 2, SUCCESS),), observations=(_v("o1", 3),)
        ),
        id="claim-outcome-observation",
    ),
    pytest.param(
        fx.History(
            claims=(_c("e1", 2), _c("e2", 3)),
            outcomes=(_o("e1", 4, RUNNING), _o("e2", 5, INTERRUPTED), _o("e1", 6, FAILED)),
            observations=(_v("o1", 1), _v("o2", 7)),
        ),
        id="interleaved-running-then-terminal",
    ),
    pytest.param(
        fx.History(claims=(_c("e1", 1),), outcomes=(_o("e1", 2, RUNNING), _o("e1", 3, RUNNING))),
        id="running-twice",
    ),
]


@pytest.mark.parametrize("history", VALID_HISTORIES)
def test_check_history_accepts_valid_histories(history: fx.History) -> None:
    """check_history returns None for gap-free histories with outcomes after their claims."""
    assert fx.check_history(history) is None


INVALID_HISTORIES: list[Any] = [
    pytest.param(fx.History(claims=(_c("e1", 2),)), id="starts-at-2"),
    pytest.param(fx.History(claims=(_c("e1", 1),), outcomes=(_o("e1", 3, SUCCESS),)), id="gap"),
    pytest.param(
        fx.History(claims=(_c("e1", 1),), observations=(_v("o1", 1),)), id="repeat-across-kinds"
    ),
    pytest.param(
        fx.History(claims=(_c("e1", 2),), outcomes=(_o("e1", 1, SUCCESS),)),
        id="outcome-before-claim",
    ),
    pytest.param(
        fx.History(claims=(_c("e1", 1),), outcomes=(_o("e2", 2, SUCCESS),)),
        id="outcome-for-unclaimed",
    ),
    pytest.param(
        fx.History(claims=(_c("e1", 1),), outcomes=(_o("e1", 2, SUCCESS), _o("e1", 3, FAILED))),
        id="terminal-after-terminal",
    ),
    pytest.param(
        fx.History(claims=(_c("e1", 1),), outcomes=(_o("e1", 2, FAILED), _o("e1", 3, RUNNING))),
        id="running-after-terminal",
    ),
    pytest.param(
        fx.History(
            claims=(_c("e1", 1),), outcomes=(_o("e1", 2, INTERRUPTED), _o("e1", 3, SUCCESS))
        ),
        id="success-after-interrupted",
    ),
    pytest.param(fx.History(claims=(_c("e1", 1), _c("e1", 2))), id="duplicate-effect-id"),
    pytest.param(
        fx.History(observations=(_v("o1", 1), _v("o1", 2))), id="duplicate-observation-id"
    ),
]


@pytest.mark.parametrize("history", INVALID_HISTORIES)
def test_check_history_rejects_impossible_histories(history: fx.History) -> None:
    """check_history raises ValueError for gaps, repeats, orphan or late outcomes, duplicate ids."""
    with pytest.raises(ValueError):
        fx.check_history(history)


EARLIER = "2020-01-01T00:00:00.000000+00:00"


@pytest.mark.parametrize(
    ("history", "says"),
    [
        pytest.param(
            fx.History(
                claims=(_c("e1", 1),),
                outcomes=(fx.EffectOutcome("e1", 2, FAILED, fx.Impact.NONE, recorded_at=EARLIER),),
            ),
            f"outcome at seq 2: recorded_at {EARLIER} is before the recorded_at",
            id="outcome-dated-before-its-claim",
        ),
        *(
            pytest.param(
                fx.History(
                    claims=(_c("e1", 1),),
                    outcomes=(fx.EffectOutcome("e1", 2, FAILED, fx.Impact.NONE, recorded_at=at),),
                ),
                f"outcome at seq 2: recorded_at {at!r} is not in the form the library writes",
                id=name,
            )
            for name, at in (
                ("z", "2030-01-01T00:00:00.000000Z"),
                ("no-microseconds", "2030-01-01T00:00:00+00:00"),
                ("milliseconds", "2030-01-01T00:00:00.000+00:00"),
                ("space", "2030-01-01 00:00:00.000000+00:00"),
                ("minus-zero", "2030-01-01T00:00:00.000000-00:00"),
            )
        ),
        pytest.param(
            fx.History(claims=(_claim(recorded_at="2030-01-01T00:00Z"),)),
            "claim at seq 1: recorded_at '2030-01-01T00:00Z' is not in the form",
            id="claim-in-another-form",
        ),
    ],
)
def test_check_history_holds_times_to_the_form_and_order_the_library_writes(
    history: fx.History, says: str
) -> None:
    """What import refused alone, every reader refuses: check_history is the one place."""
    with pytest.raises(ValueError, match=re.escape(says)):
        fx.check_history(history)


def test_check_history_accepts_an_outcome_at_its_claim_s_very_time() -> None:
    """The library dates an outcome no earlier than its claim: the same moment is valid."""
    claim = _c("e1", 1)
    outcome = fx.EffectOutcome("e1", 2, FAILED, fx.Impact.NONE, recorded_at=claim.recorded_at)
    assert fx.check_history(fx.History(claims=(claim,), outcomes=(outcome,))) is None


# --------------------------------------------------------------------------- steps and recorded values


def test_recorded_values_read_back_as_json_does() -> None:
    """Tuples are recorded as arrays: a record equals its own round trip through the store."""
    claim = _claim(step="fetch#1", args={"ids": (1, 2), "q": "x"})
    assert claim.args == {"ids": [1, 2], "q": "x"}
    assert fx.EffectClaim.from_dict(json.loads(json.dumps(claim.to_dict()))) == claim
    assert fx.recorded_json(claim.args) == '{"ids":[1,2],"q":"x"}'


def test_a_recorded_none_result_is_told_from_none_recorded() -> None:
    """``result_recorded`` says whether a ``None`` result was the call's answer."""
    none = fx.EffectOutcome("e1", 2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN)
    null = fx.EffectOutcome(
        "e1", 2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, result_recorded=True
    )
    given = fx.EffectOutcome(
        "e1", 2, fx.ExecutionOutcome.REPORTED_SUCCESS, fx.Impact.CERTAIN, result=[1]
    )
    assert (none.result_recorded, null.result_recorded, given.result_recorded) == (
        False,
        True,
        True,
    )
    assert none != null
    assert len({none, null, given}) == 3  # still hashable
    with pytest.raises(ValueError, match="recorded"):
        fx.EffectOutcome(
            "e1", 2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, result=1, result_recorded=False
        )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"x": float("nan")}, ValueError),
        ({"x": {1, 2}}, ValueError),
        ({1: "x"}, ValueError),
        ({"x": b"bytes"}, ValueError),
    ],
)
def test_a_recorded_value_json_cannot_hold_is_refused_by_the_record(
    value: object, error: type[Exception]
) -> None:
    """The record layer refuses what it cannot store exactly (log.effect stores it as not recorded)."""
    with pytest.raises(error):
        _claim(args=value)
    with pytest.raises(error):
        fx.EffectOutcome("e1", 2, fx.ExecutionOutcome.FAILED, fx.Impact.NONE, result=value)


@pytest.mark.parametrize("step", [1, None, "a\x00b", "line\nbreak", "x" * 1001])
def test_a_bad_step_is_refused(step: object) -> None:
    """A step is printable text of at most 1000 characters."""
    with pytest.raises((TypeError, ValueError)):
        _claim(step=step)


def test_a_value_nested_deeper_than_the_bound_is_refused_as_a_value_error() -> None:
    """Never a RecursionError: a value must read back from any stack that wrote it."""
    deep: list[object] = []
    for _ in range(fx.MAX_JSON_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper"):
        fx.canonical_args(deep)
    with pytest.raises(ValueError, match="deeper"):
        _claim(args={"x": deep})
    data = _claim().to_dict() | {"args": {"x": deep}}
    with pytest.raises(ValueError, match="deeper"):
        fx.EffectClaim.from_dict(data)
