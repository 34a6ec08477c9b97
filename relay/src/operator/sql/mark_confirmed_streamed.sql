-- Follows stream_lease_fence.sql.
-- $1 operator id, $2 stream lease token, $3 ids of the events the slot
-- would still send, $4 after this event id, $5 batch size, $6 the highest
-- id committed when the bound was taken, $7 the oldest transaction then
-- running (xid8 as text).
-- Stream-owned events (pending, no attempt, no note) of transactions that
-- had finished by then, which the slot would not send again, were
-- published and confirmed: marked published as polling marks them, a batch
-- in id order at a time, fenced by the stream's lease. A row's xmin is the
-- (sub)transaction that inserted it; one below the oldest running
-- transaction finished, and a visible one committed. A slot's backlog not
-- yet handed to the table path was never streamed, nor is it marked.
-- Everything else stays pending.
, batch AS (
    SELECT e.id
    FROM outbox_events AS e
    WHERE EXISTS (SELECT 1 FROM lease)
      AND e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
      AND e.id > $4
      AND e.id <= $6
      AND age(e.xmin) > age($7::xid8::xid)
      AND NOT (e.id = ANY ($3::bigint[]))
      AND NOT EXISTS (
          SELECT 1 FROM outbox_slot_backlogs AS b
          WHERE b.finished_at IS NULL
            AND e.id > b.handed_after_id
            AND (b.bound_at IS NULL OR e.id <= b.bound_id))
    ORDER BY e.id
    LIMIT $5
), marked AS (
    UPDATE outbox_events AS e
    SET state = 'published', published_at = now(), next_attempt_at = NULL
    FROM batch
    WHERE e.id = batch.id
    RETURNING e.id
)
SELECT (SELECT COUNT(*) FROM lease) AS lease_held,
       COUNT(*) AS marked,
       MAX(id) AS last_id
FROM marked
