"""The pure core: record values and the rules that judge them, with nothing of storage.

The words (:mod:`.enums`), the checks every field is held to and canonical JSON
(:mod:`.values`), the records (:mod:`.records`), one run's history and the rules it obeys
(:mod:`.history`), the verdict on a claim (:mod:`.assessment`) and what to do about it
(:mod:`.decision`). Each only builds on the ones before it. Import the names from
:mod:`ledger.effects`, their public home.
"""
