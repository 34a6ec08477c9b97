-- $1 index name: whether it exists (on the search path).
SELECT to_regclass($1) IS NOT NULL
