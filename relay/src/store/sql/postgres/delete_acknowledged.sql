-- $1 relay id, $2 partition count, $3 JSON array of leases, $4 event ids.
-- The mark of `retention.published = "0s"`: acknowledged rows are deleted
-- instead of marked, fenced as the mark is: a row is deleted only while its
-- partition's lease is one of ours.
DELETE FROM outbox_events AS e
USING outbox_partitions AS p, jsonb_to_recordset($3::jsonb) AS held (partition_no integer, lease_token bigint)
WHERE e.id = ANY($4::bigint[])
  AND e.state = 'pending'
  AND p.partition_no = e.partition_key % $2
  AND p.partition_no = held.partition_no
  AND p.lease_token = held.lease_token
  AND p.lease_owner = $1
  AND p.lease_expires_at > now()
