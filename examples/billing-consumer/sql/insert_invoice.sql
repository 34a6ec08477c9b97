INSERT INTO invoices (order_id, customer, amount_cents) VALUES ($1, $2, $3)
