-- A NOTIFY costs the producers more than it looks: PostgreSQL queues the
-- commits of all transactions that notify on one lock, held through each
-- one's WAL flush, so outbox writes commit one at a time however many
-- sessions write. A relay that is busy does not need the notification: it
-- polls again right after each batch. So each relay says until when it
-- polls on its own (quiet_until, renewed while events keep coming), and the
-- trigger notifies only while some relay waits for a notification: one
-- whose quiet_until is unset or past. With no relay row at all nobody
-- listens, and nothing is sent.
ALTER TABLE outbox_relays ADD COLUMN quiet_until TIMESTAMPTZ NULL;

-- SECURITY DEFINER: producers need only INSERT on outbox_events, not
-- SELECT on outbox_relays; the search path is the one of this migration.
CREATE OR REPLACE FUNCTION outbox_events_notify() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM outbox_relays
        WHERE quiet_until IS NULL OR quiet_until <= clock_timestamp()
    ) THEN
        PERFORM pg_notify('outbox_events', '');
    END IF;
    RETURN NULL;
END
$$;
