-- The orders service's own table, next to the outbox tables that
-- outbox::migrate creates in the same database.
CREATE TABLE IF NOT EXISTS orders (
    id          UUID PRIMARY KEY,
    customer    TEXT NOT NULL,
    total_cents BIGINT NOT NULL CHECK (total_cents > 0),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)
