"""The error tree of ``ledger.errors``: every leaf under one root, each drawn in its docstring.

Where each leaf is raised: on any backend, ``tests/contract/test_errors.py``; the
translation of SQLite's errors, ``tests/sqlite/test_errors.py``.
"""

from __future__ import annotations

import ledger.errors
from ledger.errors import EffectPersistenceError
from tests.builders import ERROR_LEAVES, subclasses


def test_every_leaf_is_an_effect_persistence_error() -> None:
    """Every leaf subclasses EffectPersistenceError, so catching the root still catches all."""
    for leaf in ERROR_LEAVES:
        assert issubclass(leaf, EffectPersistenceError)
        assert leaf.__module__ == "ledger.errors"
    assert set(subclasses(EffectPersistenceError)) == {EffectPersistenceError, *ERROR_LEAVES}


def test_every_leaf_is_drawn_in_the_module_docstring() -> None:
    """The tree in ledger.errors' docstring names every class it holds."""
    assert ledger.errors.__doc__ is not None
    for name in ledger.errors.__all__:
        assert name in ledger.errors.__doc__


def test_an_error_retold_keeps_its_leaf_and_its_cause() -> None:
    """``retold`` gives each caller its own error: the same leaf, the original as cause."""
    for leaf in ERROR_LEAVES:
        original = leaf("disk I/O error")
        with_action = ledger.errors.retold(original, "claim 'e1'")
        as_it_was = ledger.errors.retold(original)
        for told in (with_action, as_it_was):
            assert type(told) is leaf
            assert told is not original
            assert told.__cause__ is original
        assert str(with_action) == "claim 'e1': disk I/O error"
        assert str(as_it_was) == "disk I/O error"
