-- A batch's invoices in one statement: $1 order ids, $2 customers, $3
-- amounts in cents, one element per invoice, in delivery order.
INSERT INTO invoices (order_id, customer, amount_cents)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[])
