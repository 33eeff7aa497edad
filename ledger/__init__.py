"""A write-ahead effect ledger for AI-agent workers.

Public modules: :mod:`ledger.effects` (record values and the pure assessment),
:mod:`ledger.resources` (what an effect can touch), :mod:`ledger.effect_log`
(the durable log of one run) and :mod:`ledger.cli` (the ``ledger`` command).
"""

__version__ = "0.1.0"
