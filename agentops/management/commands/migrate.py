"""Django's ``migrate``, one installation at a time: several web processes, workers or
hosts that start together against one PostgreSQL (``serve`` and each web container run
``migrate`` at start) would otherwise apply the same migration at once, and all but one
fail half-way ("relation already exists", a duplicate row in ``django_migrations``).

The command holds a PostgreSQL advisory lock for its whole run, on a connection of its
own (Django's may be closed and reopened while migrating, which would drop a session
lock without a word); a second ``migrate`` waits for the first, then finds nothing left
to apply. The lock lives in the database it migrates, so test databases or other
deployments on the same server do not wait for each other."""

from django.core.management.commands.migrate import Command as DjangoMigrateCommand
from django.db import connections

# pg_advisory_lock's key: any 64-bit number no other code of the platform uses.
MIGRATION_LOCK = 0x6167656E746F7073  # "agentops"


class Command(DjangoMigrateCommand):
    def handle(self, *args, **options):
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            return super().handle(*args, **options)
        # A connection of its own, never one of the pool's (settings.DATABASE_POOL): closing
        # it must end the session, and with it the lock.
        lock = connection.Database.connect(**connection.get_connection_params())
        try:
            lock.autocommit = True
            lock.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
            return super().handle(*args, **options)
        finally:
            lock.close()  # ends the session, which releases its lock
