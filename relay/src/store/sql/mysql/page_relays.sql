-- Live relays of the operators' page (/ui), each with the partitions it
-- holds a live lease on (one row per lease; NULL lease columns for a relay
-- that holds none).
SELECT r.relay_id, r.expires_at,
       CAST(p.partition_no AS SIGNED) AS partition_no, p.lease_token, p.lease_expires_at
FROM outbox_relays AS r
LEFT JOIN outbox_partitions AS p
  ON p.lease_owner = r.relay_id AND p.lease_expires_at > UTC_TIMESTAMP(6)
WHERE r.expires_at > UTC_TIMESTAMP(6)
ORDER BY r.relay_id, p.partition_no
