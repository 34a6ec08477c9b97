-- $1 lease token: whether the stream's lease is still the one acquired
-- with this token (every acquisition bumps it). Checked before each
-- session is opened, so a relay that lost the lease never opens the slot
-- again.
SELECT EXISTS (
    SELECT 1 FROM outbox_partitions WHERE partition_no = -1 AND lease_token = $1
)
