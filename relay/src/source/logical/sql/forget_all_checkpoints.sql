-- Retention's checkpoints were taken against a slot that is gone. A new
-- slot starts past all of them, so each would count as confirmed and let
-- retention delete events the old slot never confirmed: forget them all;
-- retention takes new ones against the new slot.
DELETE FROM outbox_stream_checkpoints
