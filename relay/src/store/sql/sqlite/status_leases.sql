-- Live partition leases, for `outbox-relay status`.
SELECT partition_no, lease_owner, lease_token, lease_expires_at
FROM outbox_partitions
WHERE lease_owner IS NOT NULL AND lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
ORDER BY partition_no
