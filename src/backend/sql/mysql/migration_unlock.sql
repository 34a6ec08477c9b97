-- Release the lock of migration_lock.sql (?: its name).
SELECT RELEASE_LOCK(?)
