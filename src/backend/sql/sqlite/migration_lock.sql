-- Take the database's write lock before reading which migrations are
-- applied, and hold it, in this transaction, until every missing one is.
-- It waits as long as the connection's busy timeout allows.
BEGIN IMMEDIATE
