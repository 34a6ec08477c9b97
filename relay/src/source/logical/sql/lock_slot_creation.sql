-- $1 slot name. Serializes the creation of one slot (and of its
-- publication and backlog) across relays and operator commands: a session
-- lock, released by unlock_slot_creation.sql or when the session ends.
SELECT pg_advisory_lock(1870723, hashtext($1))
