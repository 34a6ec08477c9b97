-- Whether the logical source was prepared on this database (`migrate
-- --source logical`, or a relay started on it): its tables exist.
SELECT to_regclass('outbox_slot_backlogs') IS NOT NULL
   AND to_regclass('outbox_stream_checkpoints') IS NOT NULL
