"""The public price catalog and the carbon factors again, for the test suite and demo
data: transactional tests empty every table, migration data too, so the suite's fixture
seeds them again before each test that uses the database (tests/conftest.py).

The rows themselves are the seed migrations' literals (0002, 0003, 0006, 0011; the
factors: 0009): this module runs those migrations' own ``create_rows``
(``create_factor_rows``) with the live model, so the suite finds exactly what a fresh
install has. Migrations never import this module."""

from importlib import import_module

_SEED_MIGRATIONS = (
    "0002_seed_mistral_prices",
    "0003_seed_offline_price",
    "0006_seed_catalog",
    "0011_seed_price_parts_and_tiers",
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


_FACTOR_MIGRATION = "0009_ledger_categories_carbon"


def seed_energy_factors(model_energy_factor) -> None:
    """Create the carbon factor rows of their migration that are missing
    (``model_energy_factor``: the ``EnergyFactor`` model class)."""
    _migration(_FACTOR_MIGRATION).create_factor_rows(model_energy_factor)
