"""Django's ``migrate``, one installation at a time: several web processes, workers or
hosts that start together against one PostgreSQL (``serve`` and each web container run
``migrate`` at start) would otherwise apply the same migration at once, and all but one
fail half-way ("relation already exists", a duplicate row in ``django_migrations``).

The command holds a PostgreSQL advisory lock for its whole run, on a connection of its
own (Django's may be closed and reopened while migrating, which would drop a session
lock without a word); a second ``migrate`` waits for the first, then finds nothing left
to apply. The lock lives in the database it migrates, so test databases or other
deployments on the same server do not wait for each other.

A waiting ``migrate`` asks for the lock again and again (``pg_try_advisory_lock``) rather
than in one statement that blocks: a statement waiting for a lock holds a snapshot, and
``CREATE INDEX CONCURRENTLY`` (and ``DROP INDEX CONCURRENTLY``) in the first one's
migrations waits for every older snapshot to end. The first would wait for the second,
which waits for the first, for ever: PostgreSQL cannot see that cycle, because the lock
is held by a session other than the one building the index."""

import time

from django.core.management.commands.migrate import Command as DjangoMigrateCommand
from django.db import connections

# pg_advisory_lock's key: any 64-bit number no other code of the platform uses.
MIGRATION_LOCK = 0x6167656E746F7073  # "agentops"
# How often a waiting migrate asks for the lock again.
LOCK_RETRY_SECONDS = 0.25


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
            told = False
            while not lock.execute("SELECT pg_try_advisory_lock(%s)", [MIGRATION_LOCK]).fetchone()[0]:
                if not told and options["verbosity"] >= 1:
                    self.stdout.write("Waiting for another installation's migrate to finish...")
                    told = True
                time.sleep(LOCK_RETRY_SECONDS)
            return super().handle(*args, **options)
        finally:
            lock.close()  # ends the session, which releases its lock
