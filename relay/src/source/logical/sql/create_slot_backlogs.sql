-- The backlog of each slot the relay creates: the events committed before
-- the slot existed, which it will never stream. `bound_id` is the highest
-- id visible once the slot existed (NULL, with `bound_at`, while the slot
-- is being created); the stream's holder hands the pending, untouched
-- events up to it (and created at or after `since`, when set) to the table
-- path in id order, `handed_after_id` being how far it got, before it
-- streams. `finished_at` is set once none is left.
CREATE TABLE IF NOT EXISTS outbox_slot_backlogs (
    slot_name       TEXT        PRIMARY KEY,
    since           TIMESTAMPTZ,
    started_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    bound_id        BIGINT,
    bound_at        TIMESTAMPTZ,
    handed_after_id BIGINT      NOT NULL DEFAULT 0,
    handed_over     BIGINT      NOT NULL DEFAULT 0,
    finished_at     TIMESTAMPTZ
)
