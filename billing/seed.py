"""The public price catalog again, for the test suite and demo data: transactional tests
empty every table, migration data too, so the suite's fixture seeds it again before
each test that uses the database (tests/conftest.py).

The rows themselves are the seed migrations' literals (0002, 0003, 0006, 0010): this module
runs those migrations' own ``create_rows`` with the live ``Price``, so the suite finds
exactly what a fresh install has. Migrations never import this module."""

from importlib import import_module

_SEED_MIGRATIONS = (
    "0002_seed_mistral_prices",
    "0003_seed_offline_price",
    "0006_seed_catalog",
    "0010_seed_price_parts_and_tiers",
)


def _migration(name: str):
    # Migration modules start with a digit: not importable with an import statement.
    return import_module(f"billing.migrations.{name}")


# When every seeded row takes effect (tests price steps before and after it).
EFFECTIVE_FROM = _migration("0002_seed_mistral_prices").EFFECTIVE_FROM


def seed_catalog(model_price) -> None:
    """Create the rows of the seed migrations that are missing (``model_price``: the
    ``Price`` model class)."""
    for name in _SEED_MIGRATIONS:
        _migration(name).create_rows(model_price)
