"""The SQL floor under both backends: what a store is, whatever database holds it.

``tables`` holds the tables and their naming; ``guards`` the conditions each insert must
pass, as data (each backend renders them: SQLite as triggers, PostgreSQL as PL/pgSQL);
``views`` the views, the SQL twin of ``ledger.effects.assess`` and ``decide``; ``rows``
records to rows and back, with the validating load; ``revisions`` the Alembic
configuration and the schema's history; ``reads`` the forensic reads both backends
share; ``errors`` the translation of a driver's errors, given the backend's classifier.

Dialect-neutral: nothing here imports a backend or a database driver (SQLAlchemy Core
only), so that neither backend has to load the other.
"""
