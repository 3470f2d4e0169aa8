"""Every store test runs twice: against a real SQLite file and a real PostgreSQL server (the
session's throw-away server, tests/conftest.py, whose `store_url` fixture names both)."""

import pytest

from runwright.store import Store


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()
