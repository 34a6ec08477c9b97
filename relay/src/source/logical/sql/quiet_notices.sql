-- The preparing transaction shows only warnings and errors: PostgreSQL's
-- notices, such as "relation ... already exists, skipping" from its
-- CREATE TABLE IF NOT EXISTS on every start, are not news. Ends with the
-- transaction.
SET LOCAL client_min_messages = warning
