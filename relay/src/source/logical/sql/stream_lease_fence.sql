-- Opens the statements fenced by the stream's lease, $1 being its holder
-- and $2 its token: `lease` has a row while that lease is still held and
-- none once it is lost. Each statement writes only while it has one, and
-- returns `lease_held`.
WITH lease AS (
    SELECT 1 FROM outbox_partitions
    WHERE partition_no = -1
      AND lease_owner = $1
      AND lease_token = $2
      AND lease_expires_at > now()
)
