-- The billing service's own table. There is deliberately no unique
-- constraint on order_id: the inbox is what keeps a redelivered
-- order.created event from invoicing an order twice.
CREATE TABLE IF NOT EXISTS invoices (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     UUID NOT NULL,
    customer     TEXT NOT NULL,
    amount_cents BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
)
