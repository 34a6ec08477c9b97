-- Events the table path owns under the logical source: failed ones (a retry
-- waits, or dead) and the later events of their aggregates, held behind
-- them (`last_error` set, no attempt used). Small: only the failure path
-- writes these rows. The stream consults it on every fetch.
CREATE INDEX IF NOT EXISTS outbox_events_table_owned_idx
    ON outbox_events (aggregate_type, aggregate_id, id)
    WHERE state <> 'published' AND (attempts > 0 OR last_error IS NOT NULL)
