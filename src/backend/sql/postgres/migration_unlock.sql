-- Release the lock of migration_lock.sql ($1: its key).
SELECT pg_advisory_unlock($1)
