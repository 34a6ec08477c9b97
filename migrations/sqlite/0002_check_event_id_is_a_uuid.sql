-- outbox_events.event_id must be a lowercase UUID. SQLite has no UUID type,
-- and the length-and-case check of 0001 lets other 36-character text through;
-- the relay could not read such a row, so it is refused at insert instead.
CREATE TRIGGER outbox_events_event_id_is_uuid_on_insert
BEFORE INSERT ON outbox_events
WHEN NEW.event_id NOT GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.event_id must be a lowercase UUID (8-4-4-4-12 hex digits)');
END;

CREATE TRIGGER outbox_events_event_id_is_uuid_on_update
BEFORE UPDATE OF event_id ON outbox_events
WHEN NEW.event_id NOT GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.event_id must be a lowercase UUID (8-4-4-4-12 hex digits)');
END;
