"""The PostgreSQL server the tests start themselves: private, durable, one database per test."""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.postgresql.server import server


def test_the_test_server_is_durable_and_reachable_by_its_socket_only() -> None:
    """fsync and synchronous_commit are on, and the server listens on no network address."""
    with server().connect() as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('fsync', 'synchronous_commit', 'listen_addresses')"
            ).fetchall()
        )
    assert settings == {"fsync": "on", "synchronous_commit": "on", "listen_addresses": ""}


def test_each_new_database_is_empty_and_its_own() -> None:
    """Two databases asked for are two different, empty databases."""
    first, second = server().new_database(), server().new_database()
    assert first != second
    name = urlsplit(first).path.lstrip("/")
    with server().connect(name) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
    assert tables == (0,)
