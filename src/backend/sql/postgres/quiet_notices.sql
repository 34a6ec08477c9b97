-- The migration session shows only warnings and errors: PostgreSQL's
-- notices, such as "relation ... already exists, skipping" from the
-- migrations table's CREATE TABLE IF NOT EXISTS on every start, are not
-- news. The session is closed once the migration is over.
SET client_min_messages = warning
