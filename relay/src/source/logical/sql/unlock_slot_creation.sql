-- $1 slot name. Releases lock_slot_creation.sql's lock.
SELECT pg_advisory_unlock(1870723, hashtext($1))
