-- Whether the connected role may open a replication connection: the
-- REPLICATION attribute (superusers have it implicitly).
SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user
