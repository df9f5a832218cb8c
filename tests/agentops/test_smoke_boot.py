from agentops.models import Organization


def test_database_is_real_postgresql(db):
    from django.db import connection

    assert connection.vendor == "postgresql"
    Organization.objects.create(name="A", slug="a")
    assert Organization.objects.filter(slug="a").exists()
