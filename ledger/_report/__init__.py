"""``ledger report``: one self-contained HTML page of a store's runs, for a person to look at.

The page is built from what the other commands print (runs, status --attention, status
--unresolved, show, verify), read in one snapshot (:meth:`ledger.storage.Reader.survey`),
so it says nothing they would not. By job:

- :mod:`~ledger._report.attention`: what needs a person, most urgent first (also
  ``ledger status --attention``);
- :mod:`~ledger._report.model`: the page as data, and its limits;
- :mod:`~ledger._report.assemble`: the model from one survey: the runs chosen, the two
  lists at the top and the commands that settle each entry;
- :mod:`~ledger._report.excerpt`: what the page keeps of a run it draws or lists (the
  records it shows and what their verdicts consult, never the whole run);
- :mod:`~ledger._report.runs`: one run drawn, its timeline and its table of records;
- :mod:`~ledger._report.html`: the page rendered by Jinja2 (escaped, loading nothing)
  and written privately.

A large run is summarised, not dumped (the limits are
:mod:`~ledger._report.model`'s): at most :data:`ATTENTION_LIMIT` effects that
need a person and :data:`INCIDENT_LIMIT` incidents listed, :data:`LANE_LIMIT` lanes per
timeline (effects with unresolved impact first), :data:`TABLE_LIMIT` rows in a run's
record table, and :data:`RUN_LIMIT` runs drawn in full (the newest); the page says what
it left out and which command shows the rest. Only the effects drawn are assessed, and
of a run only the records shown and those their verdicts consult are kept.

The package imports none of them: ``ledger status --attention`` loads the attention
list alone, and Jinja2 is imported only when a page is rendered.
"""
