-- outbox_events.created_at is text on SQLite. The relay compares it as text
-- and reads it back as a UTC time, so it must have the form of the column's
-- default: 2026-11-30T10:00:00.000Z. A time SQLite can read in another form
-- (a space for the T, an offset, no fraction) is rewritten to that form, in
-- UTC. Anything else is refused at insert: one row the relay cannot read
-- would stop its fetch.

-- Rows written before this migration.
UPDATE outbox_events
SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)
WHERE strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS NOT NULL
  AND created_at IS NOT strftime('%Y-%m-%dT%H:%M:%fZ', created_at);

CREATE TRIGGER outbox_events_created_at_is_a_time_on_insert
BEFORE INSERT ON outbox_events
WHEN strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at) IS NULL
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.created_at must be a time, e.g. 2026-11-30T10:00:00.000Z (UTC) or 2026-11-30 12:00:00+02:00');
END;

CREATE TRIGGER outbox_events_created_at_is_a_time_on_update
BEFORE UPDATE OF created_at ON outbox_events
WHEN strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at) IS NULL
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.created_at must be a time, e.g. 2026-11-30T10:00:00.000Z (UTC) or 2026-11-30 12:00:00+02:00');
END;

CREATE TRIGGER outbox_events_created_at_in_utc_after_insert
AFTER INSERT ON outbox_events
WHEN NEW.created_at IS NOT strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at)
BEGIN
    UPDATE outbox_events
    SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at)
    WHERE id = NEW.id;
END;

CREATE TRIGGER outbox_events_created_at_in_utc_after_update
AFTER UPDATE OF created_at ON outbox_events
WHEN NEW.created_at IS NOT strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at)
BEGIN
    UPDATE outbox_events
    SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', NEW.created_at)
    WHERE id = NEW.id;
END;
