"""The agent layer under :class:`~ledger.effect_log.EffectLog`: one run, in memory and in calls.

``state`` holds the run's memory and the reservations of records on their way to the
store, pure (no storage, no clock); ``index`` and ``steps`` are what it indexes with;
``requests`` the checked requests the log takes; ``journal`` the run's store and lock,
``writes`` the queue that writes records in batches; ``calls``, ``files`` and ``tool`` what
``log.effect``, ``log.observe_file`` and ``log.tool`` do; ``recorded`` what of a call's
arguments and result is stored. Nothing here is public: the log is the door.
"""
