"""Every store test runs twice: against a real SQLite file and a real PostgreSQL server (the
session's throw-away server, tests/conftest.py)."""

import itertools
import os

import pytest
import sqlalchemy as sa

from runwright.store import Store

_counter = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    base = request.getfixturevalue("pg_base_url")
    name = f"t{os.getpid()}_{next(_counter)}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    yield base.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()
