"""The agent layer under :class:`~ledger.effect_log.EffectLog`: one run, in memory and in calls.

``state`` holds the run's memory and the reservations of records on their way to the
store, pure (no storage, no clock, no lock); ``index`` and ``steps`` are what it decides
with; ``requests`` the requests the log takes; ``journal`` the run's store and lock;
``writes`` the queue that writes records in batches (and degrades the log); ``agent`` the
log's tool-call doors (``effect``, ``tool``, ``observe_file``, ``begin_step``), with
``calls`` (one effect), ``files`` (looking at files) and ``tool`` (the decorator) behind
them; ``recorded`` what of a call's arguments and result is stored. Nothing here is
public: the log is the door.
"""
