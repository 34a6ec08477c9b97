-- Create the service's tables one replica at a time: two concurrent
-- CREATE TABLE IF NOT EXISTS of one table can both find it missing, and
-- the later one then fails on a unique index of PostgreSQL's catalog. The
-- lock is held until the transaction that creates the tables ends.
SELECT pg_advisory_xact_lock(hashtext('orders-service schema'))
