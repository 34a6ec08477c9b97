-- Serialize the creation of the logical source's tables and indexes among
-- relays starting at once: CREATE ... IF NOT EXISTS run by two sessions
-- together fails one of them on a unique violation in the catalog. Held
-- until the preparing transaction ends.
SELECT pg_advisory_xact_lock(1870724)
