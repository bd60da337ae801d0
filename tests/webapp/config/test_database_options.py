"""PostgreSQL connections of the app run without JIT compilation, unless DATABASE_URL says otherwise."""

from __future__ import annotations

import pytest
from django.db import connection

from webapp.config.settings.base import _database_from_env


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_apps_postgresql_connection_has_jit_off():
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL setting (this run is on SQLite)")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


def test_options_in_the_url_replace_the_default_and_sqlite_gets_none_of_it(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/crucible")
    assert _database_from_env()["OPTIONS"] == {"options": "-c jit=off"}
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/crucible?options=-c%20jit%3Don&sslmode=require")
    assert _database_from_env()["OPTIONS"] == {"options": "-c jit=on", "sslmode": "require"}
    monkeypatch.setenv("DATABASE_URL", "sqlite:////tmp/x.sqlite3")
    assert "options" not in _database_from_env()["OPTIONS"]
