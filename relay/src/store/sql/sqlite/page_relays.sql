-- Live relays of the operators' page (/ui), each with the partitions it
-- holds a live lease on (one row per lease; NULL lease columns for a relay
-- that holds none).
SELECT r.relay_id, r.expires_at,
       p.partition_no AS partition_no, p.lease_token, p.lease_expires_at
FROM outbox_relays AS r
LEFT JOIN outbox_partitions AS p
  ON p.lease_owner = r.relay_id AND p.lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE r.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ORDER BY r.relay_id, p.partition_no
