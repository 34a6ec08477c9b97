-- The server's wal_level: logical decoding needs `logical`.
SELECT current_setting('wal_level')
