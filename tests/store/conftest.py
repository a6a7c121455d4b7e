"""The example ledger on both backends: written once per backend and test module, copied for each test
(a SQLite file copy; PostgreSQL ``CREATE DATABASE ... TEMPLATE``)."""

from __future__ import annotations

import pytest
from databases import BACKENDS, backend_of, fresh_database
from store_helpers import populate_example

from ledger.store import open_store


@pytest.fixture(scope="module", params=BACKENDS)
def example_template(request, tmp_path_factory):
    """The example ledger, written once per backend and module; each test gets a copy."""
    with fresh_database(request.param, tmp_path_factory.mktemp("ledger")) as url:
        with open_store(url) as store:
            keys = populate_example(store)
        yield url, keys


@pytest.fixture()
def example(example_template, tmp_path):
    template, keys = example_template
    with fresh_database(backend_of(template), tmp_path, template=template) as url:
        store = open_store(url)
        try:
            yield store, keys, url
        finally:
            store.close()
