"""What a claim records of a call's arguments: the log's own copy, as the store reads it back."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger._run.recorded import Recording
from ledger.effects import canonical_args

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _shape(value: Any) -> Any:
    """``value`` with its types and key order showing, for an exact comparison."""
    if isinstance(value, dict):
        return ("dict", [(key, _shape(item)) for key, item in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(item) for item in value])
    return (type(value).__name__, repr(value))


@given(st.dictionaries(st.text(max_size=5), _VALUES, max_size=5))
def test_stored_args_are_what_their_canonical_text_reads_back_as(args: dict[str, Any]) -> None:
    canonical = canonical_args(args)
    stored = Recording().stored_args(args, canonical, "the arguments")
    assert _shape(stored) == _shape(json.loads(canonical))
    assert stored is not args


def test_stored_args_do_not_follow_later_changes_to_the_callers_value() -> None:
    args: dict[str, Any] = {"b": [1, {"c": 2}], "a": (3,)}
    stored = Recording().stored_args(args, canonical_args(args), "the arguments")
    args["b"][1]["c"] = 99
    args["b"].append(4)
    args["z"] = 0
    assert stored == {"a": [3], "b": [1, {"c": 2}]}
    assert list(stored) == ["a", "b"]  # type: ignore[arg-type]


def test_stored_args_too_large_or_not_recorded_are_none() -> None:
    args = {"text": "x" * 100}
    canonical = canonical_args(args)
    assert Recording(max_bytes=len(canonical) - 1).stored_args(args, canonical, "a") is None
    assert Recording(max_bytes=len(canonical)).stored_args(args, canonical, "a") == args
    assert Recording(args=False).stored_args(args, canonical, "a") is None
