-- $1 publication name: 1 when it exists, else 0.
SELECT COUNT(*) FROM pg_publication WHERE pubname = $1
