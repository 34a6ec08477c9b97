-- $1 publication name: whether it publishes inserts, whether it lists
-- `outbox_events` of the current schema, and whether it lists any other
-- table (a table renamed from `outbox_events` stays listed under its new
-- name). No row when it does not exist.
SELECT p.pubinsert AS publishes_inserts,
       EXISTS (
           SELECT 1 FROM pg_publication_tables AS t
           WHERE t.pubname = p.pubname
             AND t.schemaname = current_schema()
             AND t.tablename = 'outbox_events'
       ) AS lists_table,
       EXISTS (
           SELECT 1 FROM pg_publication_tables AS t
           WHERE t.pubname = p.pubname
             AND (t.schemaname <> current_schema() OR t.tablename <> 'outbox_events')
       ) AS lists_other_tables
FROM pg_publication AS p
WHERE p.pubname = $1
