-- Take the session-level advisory lock that serializes outbox migrations in
-- this database ($1: its key). It waits as long as the session's
-- lock_timeout allows (by default, for ever) and is held until
-- migration_unlock.sql runs or the session ends.
SELECT pg_advisory_lock($1)
