"""Alembic environment for the ledger schema.

Run programmatically by ``ledger.store.engine.upgrade`` (which passes an open
connection in ``config.attributes["connection"]``), or with the Alembic CLI:
``alembic -c ledger/store/migrations/alembic.ini -x url=sqlite:///runs/ledger.db upgrade head``.
"""

from __future__ import annotations

from alembic import context

from ledger.store.engine import default_db_url, make_engine
from ledger.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    x_args = context.get_x_argument(as_dictionary=True)
    return x_args.get("url") or config.get_main_option("sqlalchemy.url") or default_db_url()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
