-- Take the named lock that serializes outbox migrations (?: its name; named
-- locks are server-wide, so the name carries the database). It waits at
-- most the session's lock_wait_timeout, the wait MariaDB and MySQL also
-- allow DDL for a metadata lock, and is held until migration_unlock.sql
-- runs or the session ends. Returns 1 when taken, 0 on timeout, NULL on
-- error; the second column is the timeout, for the error message.
SELECT GET_LOCK(?, @@SESSION.lock_wait_timeout), CAST(@@SESSION.lock_wait_timeout AS SIGNED)
